"""A cluster's controllers: one, or the 3 or 5 voters of a KRaft quorum, and how the launcher finds
the active one.

A lone controller is id 0, as it always was, with its data in `<data-dir>/controller`. The voters
of a quorum are ids 3000, 3001, ... (apart from the nodes' 1..N, as Kafka wants controller and
broker ids apart), each with `<data-dir>/controller-<id>`, and each started with every voter's
address (`--voters`, Kafka's controller.quorum.voters syntax) and the one cluster id they share
(`--cluster-id`, as `kafka-storage.sh format` gives every controller of a quorum the same one: a
voter refuses the Raft requests of another cluster's). Only the quorum's active
controller acts; the others answer NotController, naming the leader when they know it, so every
request of the launcher goes through `call_active`.
"""
from __future__ import annotations

import base64
import ssl
import time
import uuid
from pathlib import Path

from cluster.formats.control import ControlError, NotController, call_sync
from cluster.formats.config import load_properties
from cluster.launch.backend import ControllerProcess, recorded_state
from cluster.tools.errors import ClusterError

CONTROLLER_COUNTS = (1, 3, 5)
LONE_CONTROLLER_ID = 0
FIRST_VOTER_ID = 3000
ELECTION_WAIT_S = 0.08  # after every controller was asked and none is active: an election runs


def controller_ids(count: int) -> list[int]:
    """The ids of a cluster's controllers: [0] for one, 3000, 3001, ... for a quorum."""
    if count not in CONTROLLER_COUNTS:
        raise ClusterError(f"a cluster runs 1, 3 or 5 controllers, not {count}")
    return [LONE_CONTROLLER_ID] if count == 1 else list(range(FIRST_VOTER_ID, FIRST_VOTER_ID + count))


def controller_name(controller_id: int) -> str:
    """`controller` for a lone controller (its data dir and log name, as ever), `controller-<id>` for a voter."""
    return "controller" if controller_id == LONE_CONTROLLER_ID else f"controller-{controller_id}"


def new_controller(data_dir: Path, controller_id: int) -> ControllerProcess:
    """The record of a controller not started yet."""
    name = controller_name(controller_id)
    return ControllerProcess(controller_id, None, 0, data_dir / name, data_dir / "logs" / f"{name}.log")


def voters_argument(host: str, controllers: dict[int, ControllerProcess]) -> str:
    """Every voter as id@host:port, the form of `--voters` and of Kafka's controller.quorum.voters."""
    return ",".join(f"{controller_id}@{host}:{record.port}" for controller_id, record in sorted(controllers.items()))


def quorum_cluster_id(controllers: dict[int, ControllerProcess]) -> str:
    """The cluster id a quorum's controllers share: the one a voter's data dir was formatted with,
    else a new one (Kafka's form: a random UUID in URL-safe base64, unpadded)."""
    for _, controller in sorted(controllers.items()):
        # meta.properties read as a properties file: the metadata log's module would load the record
        # codecs, and with them kafka-python, into the launcher (and its fork server) too early.
        meta = controller.data_dir / "meta.properties"
        known = load_properties(meta).get("cluster.id") if meta.exists() else None
        if known:
            return known
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def controllers_state(controllers: dict[int, ControllerProcess], host: str) -> list[dict]:
    """The `controllers` list of cluster.json."""
    return [{"id": c.node_id, "host": host, "port": c.port, "pid": c.pid, "data_dir": str(c.data_dir),
             "log_path": str(c.log_path)} for _, c in sorted(controllers.items())]


def controllers_from_state(state: dict, data_dir: Path) -> dict[int, ControllerProcess]:
    """The controllers a cluster.json records; one written before quorums names only `controller`."""
    recorded = state.get("controllers")
    if not recorded:
        lone = new_controller(Path(data_dir), LONE_CONTROLLER_ID)
        lone.pid, lone.port = state["controller"]["pid"], state["controller"]["port"]
        return {LONE_CONTROLLER_ID: lone}
    return {c["id"]: ControllerProcess(c["id"], c["pid"], c["port"], Path(c["data_dir"]), Path(c["log_path"]))
            for c in recorded}


def check_controller_count(data_dir: Path, count: int) -> None:
    """A data dir keeps the metadata of the controllers it was started with: the same number must run it."""
    state = recorded_state(data_dir)
    before = len(controllers_from_state(state, data_dir)) if state else count
    if before != count:
        raise ClusterError(f"the cluster in {data_dir} ran {before} controller(s): start it with "
                           f"--controllers {before}, or use a new data dir")


class ActiveController:
    """Sends the launcher's requests to the quorum's active controller: the one that answered last,
    else the leader a follower names, else each controller in turn until one acts or the time is up.
    Controllers whose process is dead or paused are passed over (a paused one would hold the
    request until the timeout). A lone controller is asked once, as it always was."""

    def __init__(self, host: str, controllers: dict[int, ControllerProcess], state_of, tls: ssl.SSLContext | None):
        self.host = host
        self.controllers = controllers
        self.state_of = state_of  # controller id -> running, paused or dead
        self.tls = tls
        self.last_active: int | None = None

    def call(self, op: str, timeout: float, **args) -> dict:
        if len(self.controllers) == 1:
            [only] = self.controllers.values()
            return call_sync(self.host, only.port, op, timeout=timeout, tls=self.tls, **args)
        deadline = time.monotonic() + timeout
        target, followed_leader, failure = self._first_target(), False, None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise failure or ControlError(f"{op}: no controller of the quorum is running (each is dead or paused)")
            if self.state_of(target) == "running":
                try:
                    reply = call_sync(self.host, self.controllers[target].port, op, timeout=remaining, tls=self.tls,
                                      **args)
                except NotController as exc:
                    failure = exc
                    if exc.leader and exc.leader[0] in self.controllers and not followed_leader:
                        target, followed_leader = exc.leader[0], True
                        continue
                except OSError as exc:  # refused or cut: the controller died, or is starting again
                    failure = exc
                else:
                    self.last_active = target
                    return reply
            followed_leader = False
            target = self._after(target)
            if target == self._first_target():
                time.sleep(min(ELECTION_WAIT_S, max(0.0, deadline - time.monotonic())))

    def _first_target(self) -> int:
        return self.last_active if self.last_active in self.controllers else min(self.controllers)

    def _after(self, controller_id: int) -> int:
        ids = sorted(self.controllers)
        return ids[(ids.index(controller_id) + 1) % len(ids)]


class ControllerFaults:
    """What a Cluster does with its controllers (a part of Cluster, kept here beside the quorum's
    other code). Without a lone controller, or a quorum's majority, the nodes serve on with the
    metadata they have; nothing that needs the controller (a new topic, a leader for a dead node's
    partitions) happens until it is back. A quorum without its active controller elects another,
    which the nodes follow. controller_id may be left out when there is one controller."""

    def controller(self, controller_id: int | None = None) -> ControllerProcess:
        """The record of controller controller_id; ClusterError when the cluster has no such controller."""
        if controller_id is None and len(self.controllers) == 1:
            [only] = self.controllers.values()
            return only
        if controller_id not in self.controllers:
            raise ClusterError(f"no controller {controller_id} in this cluster "
                               f"(controllers: {', '.join(map(str, sorted(self.controllers)))})")
        return self.controllers[controller_id]

    def kill_controller(self, controller_id: int | None = None) -> None:
        """Kill a controller, as a crash would."""
        self.runner.kill_controller(self.controller(controller_id))

    def stop_controller(self, controller_id: int | None = None) -> None:
        """Stop a controller gracefully."""
        self.runner.stop_controller(self.controller(controller_id))

    def pause_controller(self, controller_id: int | None = None) -> None:
        """The controller lives on but answers nothing, like one stuck in a long pause."""
        self.runner.pause_controller(self.controller(controller_id))

    def resume_controller(self, controller_id: int | None = None) -> None:
        self.runner.resume_controller(self.controller(controller_id))

    def start_controller(self, controller_id: int | None = None) -> None:
        """Start a controller again on its port and data dir; returns once every running node is
        registered with the active controller again and caught up."""
        self.runner.restart_controller(self.controller(controller_id), self._controller_settings())
        running = [node_id for node_id, node in self.nodes.items() if node.alive()]
        if running:
            self.wait_ready(running)
        self.write_state()

    def restart_controller(self, controller_id: int | None = None) -> None:
        """Stop a controller (when it runs) and start it again."""
        if self.runner.controller_running(self.controller(controller_id)):
            self.stop_controller(controller_id)
        self.start_controller(controller_id)

    @property
    def controller_id(self) -> int:
        """The first controller's node id: 0 for a lone controller (its log dir is formatted as node 0,
        apart from the nodes' 1..N), 3000 for a quorum."""
        return min(self.controllers)

    @property
    def controller_ids(self) -> list[int]:
        return sorted(self.controllers)

    def active_controller_id(self, timeout: float = 30) -> int:
        """The id of the quorum's leader, the controller that acts (for a lone controller, 0); while an
        election runs, asked again until one is elected or the timeout passes (ClusterError)."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.control("describe_quorum", timeout=max(deadline - time.monotonic(), 0.1))["leader_id"]
            if leader in self.controllers:
                return leader
            if time.monotonic() >= deadline:
                raise ClusterError(f"no controller of {self.controller_ids} leads the quorum after {timeout:g} s")
            time.sleep(0.05)

    def controller_state(self, controller_id: int | None = None) -> str:
        """running, paused or dead."""
        controller = self.controller(controller_id)
        if not self.runner.controller_running(controller):
            return "dead"
        return "paused" if self.runner.controller_paused(controller) else "running"

    def isolate_controller(self, controller_id: int | None = None) -> dict:
        """Cut a controller off from the other controllers and the nodes, its process running on (a
        quorum's leader resigns and another is elected); returns the faults it is under."""
        return self.controller_control(self.controller(controller_id).node_id, "isolate")

    def heal_controller(self, controller_id: int | None = None) -> dict:
        """End a controller's isolation and latency."""
        return self.controller_control(self.controller(controller_id).node_id, "heal")

    def delay_controller(self, controller_id: int | None, delay_ms: int) -> dict:
        """delay_ms more on everything a controller sends (0 removes it)."""
        return self.controller_control(self.controller(controller_id).node_id, "delay", delay_ms=delay_ms)

    def controller_faults(self, controller_id: int | None = None) -> dict:
        """{"isolated", "delay_ms"}: the faults a controller acts out."""
        return self.controller_control(self.controller(controller_id).node_id, "describe_faults")
