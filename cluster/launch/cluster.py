"""Start, find and stop a kraftwerk cluster: one controller (or a quorum of 3 or 5) and N node processes.

`Cluster` knows what a cluster is made of and the order things happen in; its backend
(cluster/launch/backend.py) runs the processes: on this machine (the default,
cluster/launch/local_backend.py) or, for `DockerCluster`, in containers
(cluster/launch/docker_backend.py). `cluster.json` in the data dir records what runs where and on
which backend, so that other commands and `Cluster.attach` find a cluster started with
`kraftwerk up --detach` and get the class of its backend from CLUSTER_CLASSES. A quorum's
controllers, how the launcher finds the active one and the methods on them (ControllerFaults, which
Cluster inherits) are cluster/launch/controllers.py.

Moving partitions and adding or removing nodes are cluster/tools/reassignment.py and
membership.py; consumer-group rebalances on demand are cluster/tools/group_tools.py, and where a
transactional id is coordinated cluster/tools/transaction_tools.py. The methods here hand over to
them.
"""
from __future__ import annotations

import functools
import json
import shutil
import ssl
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from cluster.formats.config import BrokerConfig
from cluster.formats.control import ControlError, call_sync
from cluster.formats.files import write_atomically
from cluster.launch.backend import READY_TIMEOUT_S, STATE_FILE, Backend, ControllerProcess, NodeProcess, recorded_state
from cluster.launch.controllers import (
    ActiveController, ControllerFaults, check_controller_count, controller_ids, controllers_from_state,
    controllers_state, new_controller,
)
from cluster.launch.docker_backend import BACKEND as DOCKER_BACKEND
from cluster.launch.docker_backend import DockerBackend
from cluster.launch.local_backend import LocalProcessBackend
from cluster.launch.security import Security, kafka_python_config
from cluster.runtime.tls import control_channel_tls
from cluster.tools import membership, reassignment
from cluster.tools.errors import ClusterError

__all__ = ["CLUSTER_CLASSES", "Cluster", "ClusterError", "DockerCluster", "NodeProcess", "cluster_class"]


class Cluster(ControllerFaults):
    """A running cluster, as a context manager: `with Cluster(nodes=3) as c: c.bootstrap_servers`.

    `runner` is the backend that runs its processes; the default runs them on this machine.
    `controllers` is 1 (the default), or 3 or 5 for a KRaft quorum of controllers.
    """

    backend = "process"  # the name of the backend this class runs on: cluster_class(backend) gives the class

    def __init__(self, nodes: int = 3, data_dir=None, port: int = 0, host: str = "127.0.0.1",
                 node_config: dict[str, str] | None = None, startup_timeout: float = READY_TIMEOUT_S,
                 racks: dict[int, str] | None = None, runner: Backend | None = None,
                 security: Security | None = None, controllers: int = 1):
        quorum_ids = controller_ids(controllers)  # refused before a data dir is made
        self.node_count = nodes
        self.racks = dict(racks or {})  # node id -> broker.rack
        self.owns_data_dir = data_dir is None  # made here, and removed when the cluster stops
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kraftwerk-"))
        self.base_port = port
        self.host = host
        self.security = security or Security()
        # Kafka defaults to one copy; a cluster launched to test failover wants min(3, nodes).
        replicas = str(min(3, nodes))
        self.node_config = {"default.replication.factor": replicas, "offsets.topic.replication.factor": replicas,
                            "transaction.state.log.replication.factor": replicas,
                            "share.coordinator.state.topic.replication.factor": replicas, **(node_config or {})}
        # What the security settings ask of every node (under node_config, which may override it).
        self.security_config = self.security.node_config(self.data_dir, host)
        self.startup_timeout = startup_timeout
        self.nodes: dict[int, NodeProcess] = {}
        self.controllers: dict[int, ControllerProcess] = {
            controller_id: new_controller(self.data_dir, controller_id) for controller_id in quorum_ids}
        self._last_node_ids = [] if self.owns_data_dir else _recorded_node_ids(self.data_dir)
        self.runner = runner or LocalProcessBackend()  # how its processes are run
        self.runner.bind(self)

    # --- starting ---

    def start(self) -> "Cluster":
        self.runner.prepare_start()
        if not self.owns_data_dir:
            check_controller_count(self.data_dir, len(self.controllers))
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self.runner.start_controllers(self._controller_settings())
            pending = {node_id: self._spawn_node(node_id) for node_id in self._node_ids()}
            for node_id, spawned in pending.items():
                self.nodes[node_id] = self.runner.adopt_node(node_id, spawned)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        self.write_state()
        return self

    def _controller_settings(self) -> list[str]:
        settings = ["--num-partitions", self.node_config.get("num.partitions", "1"),
                    "--default-replication-factor", self.node_config["default.replication.factor"],
                    "--heartbeat-timeout-ms", self.node_config.get("broker.session.timeout.ms", "2000")]
        for key, value in self._every_node_config().items():
            settings += ["--set", f"{key}={value}"]  # it reads the leader-balancing and control channel ones
        for credential in self.security.scram_bootstrap():
            settings += ["--add-scram", credential]
        return settings

    def _spawn_node(self, node_id: int) -> object:
        rack = self.racks.get(node_id)
        return self.runner.spawn_node(node_id, {**self._every_node_config(), **({"broker.rack": rack} if rack else {})})

    def _every_node_config(self) -> dict[str, str]:
        return {**self.security_config, **self.node_config}

    def launch_node(self, node_id: int) -> NodeProcess:
        """Start node node_id (a new one, or one that is not running) and wait until it serves;
        it may not be registered with the controller yet (wait_ready waits for that)."""
        self.nodes[node_id] = self.runner.adopt_node(node_id, self._spawn_node(node_id))
        return self.nodes[node_id]

    def _node_ids(self) -> list[int]:
        """The ids to start: those of the last start (nodes added or removed since keep theirs), else 1..N."""
        kept = self._last_node_ids
        return kept if len(kept) == self.node_count else list(range(1, self.node_count + 1))

    def wait_ready(self, node_ids: list[int] | None = None) -> dict:
        """Until the given nodes (default: all) are registered, unfenced and caught up with the metadata."""
        try:
            return self.control("wait_ready", node_ids=node_ids or sorted(self.nodes),
                                timeout_ms=int(self.startup_timeout * 1000), timeout=self.startup_timeout + 5)
        except ControlError as exc:
            raise ClusterError(f"the cluster did not become ready: {exc}") from exc

    # --- state file ---

    def write_state(self) -> None:
        """Record in cluster.json what runs where."""
        state = self.runner.state({
            "host": self.runner.controller_host,
            "base_port": self.base_port,
            "node_config": self.node_config,
            "controller": {"pid": self.controller_pid, "port": self.controller_port},
            "controllers": controllers_state(self.controllers, self.runner.controller_host),
            "nodes": {str(n.node_id): {**asdict(n), "data_dir": str(n.data_dir), "log_path": str(n.log_path)}
                      for n in self.nodes.values()},
            "bootstrap_servers": self.bootstrap_servers,
            "security": self.security.to_state(),
            "client_config": self.client_config(),
            "racks": {str(node_id): rack for node_id, rack in self.racks.items()},
        })
        write_atomically(self.data_dir / STATE_FILE, json.dumps(state, indent=2))

    @classmethod
    def attach(cls, data_dir) -> "Cluster":
        """The cluster described by <data_dir>/cluster.json (started by `kraftwerk up`), on the backend it runs on."""
        state = recorded_state(data_dir)
        if state is None:
            raise ClusterError(f"no cluster in {data_dir} (start one with kraftwerk up)")
        return cluster_class(state.get("backend", "process")).from_state(data_dir, state)

    @classmethod
    def from_state(cls, data_dir, state: dict) -> "Cluster":
        """The cluster a cluster.json describes."""
        controllers = controllers_from_state(state, data_dir)
        cluster = cls(nodes=len(state["nodes"]), data_dir=data_dir, port=state["base_port"], host=state["host"],
                      node_config=state["node_config"], security=Security.from_state(state.get("security")),
                      racks={int(node_id): rack for node_id, rack in state.get("racks", {}).items()},
                      controllers=len(controllers))
        cluster.controllers = controllers
        for node_id, recorded in state["nodes"].items():
            cluster.nodes[int(node_id)] = cluster.runner.node_from_state(int(node_id), recorded)
        return cluster

    # --- queries ---

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.address(n) for _, n in sorted(self.nodes.items()))

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """The librdkafka (and Java) properties a client needs to connect as `user` (default: the
        super user): {} on a PLAINTEXT cluster. Add bootstrap.servers and go."""
        return self.security.client_config(self.data_dir, user)

    def kafka_python_config(self, user: str | None = None) -> dict:
        """client_config(user) as kafka-python's (and aiokafka's) keyword arguments."""
        return kafka_python_config(self.client_config(user))

    def node_host(self, node: NodeProcess) -> str:
        """The host name or address where clients reach node."""
        return self.runner.node_host(node)

    def address(self, node: NodeProcess) -> str:
        """host:port of node's Kafka listener."""
        return f"{self.node_host(node)}:{node.port}"

    @property
    def controller_address(self) -> str:
        """host:port of the controller; of every controller, comma-separated, for a quorum (what a node's --controller takes)."""
        return ",".join(self.controller_address_of(c) for c in sorted(self.controllers))

    def controller_address_of(self, controller_id: int) -> str:
        return f"{self.runner.controller_host}:{self.controllers[controller_id].port}"

    @property
    def controller_pid(self) -> int | None:  # the first controller's (the only one, unless a quorum runs)
        return self.controllers[self.controller_id].pid

    @property
    def controller_port(self) -> int:  # the first controller's (the only one, unless a quorum runs)
        return self.controllers[self.controller_id].port

    def control(self, op: str, timeout: float = 30, **args) -> dict:
        """Ask the active controller, through its control channel (cluster/formats/control.py); with a
        quorum, whichever of its controllers acts (cluster/launch/controllers.py)."""
        return self._active_controller.call(op, timeout, **args)

    def controller_control(self, controller_id: int, op: str, timeout: float = 5, **args) -> dict:
        """Ask one controller, active or not (`quorum_role` is what every one answers)."""
        return call_sync(self.runner.controller_host, self.controllers[controller_id].port, op, timeout=timeout,
                         tls=self._control_tls, **args)

    @functools.cached_property
    def _active_controller(self) -> ActiveController:
        return ActiveController(self.runner.controller_host, self.controllers, self.controller_state,
                                self._control_tls)

    @functools.cached_property
    def _control_tls(self) -> ssl.SSLContext | None:
        """What the launcher presents on the control channel: the nodes' own settings say whether it is secured."""
        tls = control_channel_tls(BrokerConfig(self._every_node_config()))
        return tls.client if tls else None

    def node_control(self, node_id: int, op: str, timeout: float = 10, **args) -> dict:
        """Ask a running node, through its admin port; ClusterError when it is not running."""
        node = self.nodes[node_id]
        if not node.alive():
            raise ClusterError(f"node {node_id} is not running")
        return call_sync(self.node_host(node), node.admin_port, op, timeout=timeout, tls=self._control_tls, **args)

    def status(self) -> dict:
        return self.control("status")

    def replica_states(self, timeout: float = 2) -> dict[int, dict]:
        """Per node, each hosted partition's log start, log end, high watermark and ISR as the node sees them, and (on leaders)
        the followers' fetch offsets; nodes that are down or do not answer are left out."""
        states = {}
        for node_id in sorted(self.nodes):
            try:
                states[node_id] = self.node_control(node_id, "replica_states", timeout=timeout)
            except (ClusterError, ControlError, OSError):
                continue
        return states

    def client_fetch_stats(self, timeout: float = 2) -> dict[int, dict[tuple[str, int], dict]]:
        """Per running node, {(topic, partition): {"fetches", "bytes"}} it served to consumers (not followers)."""
        stats = {}
        for node_id in sorted(self.nodes):
            try:
                reply = self.node_control(node_id, "client_fetch_stats", timeout=timeout)
            except (ClusterError, ControlError, OSError):
                continue
            stats[node_id] = {(p["topic"], p["partition"]): {"fetches": p["fetches"], "bytes": p["bytes"]}
                              for p in reply["partitions"]}
        return stats

    def wait_in_sync(self, topic: str, timeout: float = 30) -> bool:
        """True once every partition of topic has a leader and all its replicas in sync, and every live node
        has applied the metadata; False on timeout."""
        reply = self.control("wait_in_sync", topic=topic, timeout_ms=int(timeout * 1000), timeout=timeout + 5)
        return reply["in_sync"]

    def running(self) -> bool:
        return self.runner.running()

    def assignment(self) -> dict[tuple[str, int], list[int]]:
        """Every partition's replicas, preferred leader first."""
        return {(t["name"], p["partition"]): p["replicas"] for t in self.status()["topics"] for p in t["partitions"]}

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict[str, str] | None = None) -> None:
        """Create a topic through a real Kafka admin client, as users do."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **self.kafka_python_config())
        try:
            admin.create_topics([NewTopic(name, partitions, replication_factor, topic_configs=config or {})])
        finally:
            admin.close()

    # --- faults ---

    def kill_node(self, node_id: int) -> None:
        """Kill one node, as a crash would; returns once the process is gone and the controller has
        fenced it (its leaderships have moved)."""
        node = self.nodes[node_id]
        self.runner.kill(node)
        self._report_death(node)

    def _report_death(self, node: NodeProcess) -> None:
        """Tell the controller that this incarnation of the node is gone. Its own watch on the node's
        pid usually fenced it already; answering this report only after that fence is what lets
        kill_node return with the leaderships moved. A node that registered again is left alone."""
        try:
            self.control("process_died", node_id=node.node_id, incarnation_id=node.incarnation_id, timeout=10)
        except (ControlError, OSError):
            pass  # the controller is down too: nothing to fence

    def stop_node(self, node_id: int) -> None:
        """Graceful stop: the node hands its leaderships over before it exits."""
        self.runner.stop(self.nodes[node_id])

    def pause_node(self, node_id: int) -> None:
        """The process lives on but answers nothing, like a node stuck in a long pause."""
        self.runner.pause(self.nodes[node_id])

    def resume_node(self, node_id: int) -> None:
        self.runner.resume(self.nodes[node_id])

    def isolate_node(self, node_id: int, parties: list[str | int] | None = None) -> dict:
        """Cut a live node off from parties ("controller", "clients", peer node ids; default the
        controller and every peer): traffic either way is held, as in a network partition."""
        return self.runner.isolate(self.nodes[node_id], list(parties or []))

    def heal_node(self, node_id: int) -> dict:
        """End a node's isolation, latency and pending injected errors."""
        return self.runner.heal(self.nodes[node_id])

    def delay_node(self, node_id: int, delay_ms: int) -> dict:
        """Delay what the node sends by delay_ms (0 removes it)."""
        return self.runner.delay(self.nodes[node_id], delay_ms)

    def inject_error(self, node_id: int, api: str | int, error: str | int, count: int = 1) -> dict:
        """The next `count` requests of `api` (Produce, Fetch, ...) to this node are answered with
        `error` (a Kafka error name or code) without being executed."""
        return self.node_control(node_id, "inject_error", api=api, error=error, count=count)

    def node_faults(self, node_id: int) -> dict:
        return self.runner.faults(self.nodes[node_id])

    def restart_node(self, node_id: int) -> None:
        """Start a node again with the same id, data dir and address; a running one is stopped first."""
        if self.nodes[node_id].alive():
            self.stop_node(node_id)
        self.launch_node(node_id)
        self.wait_ready([node_id])  # other nodes may be down on purpose
        self.write_state()

    # --- stopping ---

    def stop(self) -> None:
        """Graceful stop of every node then the controller; anything left is killed. The data dir
        stays, unless the cluster made it itself."""
        self.runner.stop_all()
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- moving partitions (cluster/tools/reassignment.py) ---

    def reassign(self, moves: dict[tuple[str, int], list[int] | None],
                 throttle_bytes_per_s: int | None = None) -> dict[tuple[str, int], str | None]:
        """Move partitions, {(topic, partition): replicas} (None cancels a move), optionally throttled;
        returns, per partition, Kafka's error name if it was refused, else None."""
        return reassignment.reassign(self, moves, throttle_bytes_per_s)

    def list_reassignments(self) -> dict[tuple[str, int], dict]:
        """Partitions being moved: {(topic, partition): {"replicas", "adding_replicas", "removing_replicas"}}."""
        return reassignment.list_reassignments(self)

    def wait_reassigned(self, partitions: list[tuple[str, int]] | None = None, timeout: float = 300) -> bool:
        """True once none of partitions (default: any) is being moved; False on timeout."""
        return reassignment.wait_reassigned(self, partitions, timeout)

    def clear_throttles(self) -> None:
        """Lift every replication throttle."""
        reassignment.clear_throttles(self)

    def run_plan(self, moves: dict[tuple[str, int], list[int]], throttle_bytes_per_s: int | None = None,
                 timeout: float = 300) -> None:
        """Reassign as moves says and wait until every move is complete."""
        reassignment.run_plan(self, moves, throttle_bytes_per_s, timeout)

    def start_moves(self, moves: dict[tuple[str, int], list[int]], throttle_bytes_per_s: int | None = None) -> None:
        """Reassign as moves says; ClusterError, naming the first partition refused, if any was."""
        reassignment.start_moves(self, moves, throttle_bytes_per_s)

    # --- growing and shrinking (cluster/tools/membership.py) ---

    def add_node(self, rack: str | None = None) -> int:
        """Start a node with the next free id; returns its id once it is ready."""
        return membership.add_node(self, rack)

    def remove_node(self, node_id: int, throttle_bytes_per_s: int | None = None, timeout: float = 300) -> None:
        """Move every replica off node_id, stop it, unregister it and delete its data dir."""
        membership.remove_node(self, node_id, throttle_bytes_per_s, timeout)

    def unregister_node(self, node_id: int) -> None:
        """UnregisterBroker, as `kafka-cluster.sh unregister --id` sends it."""
        membership.unregister_node(self, node_id)

    def forget_node(self, node_id: int) -> NodeProcess:
        """Drop a stopped node from the cluster's records (write_state then drops it from cluster.json);
        returns its record."""
        node = self.nodes.pop(node_id)
        self.racks.pop(node_id, None)
        self.node_count = len(self.nodes)
        return node

    # --- consumer-group rebalances on demand (cluster/tools/group_tools.py) ---
    # group_tools is imported when used: it loads kafka-python's admin client, which the fork server,
    # importing this package, must not.

    def rebalance_group(self, group_id: str) -> dict:
        """The group's coordinator starts a rebalance, as when a member joins."""
        from cluster.tools import group_tools
        return group_tools.rebalance(self, group_id)

    def remove_group_member(self, group_id: str, member: str) -> dict:
        """Remove a member by its group.instance.id (static) or member id."""
        from cluster.tools import group_tools
        return group_tools.remove_member(self, group_id, member)

    def move_group_coordinator(self, group_id: str, to: int | None = None) -> dict:
        """Give the group's `__consumer_offsets` partition another in-sync leader (node `to`, or one
        the controller picks)."""
        from cluster.tools import group_tools
        return group_tools.move_coordinator(self, group_id, to)

    # --- transactions (cluster/tools/transaction_tools.py) ---

    def transaction_coordinator(self, transactional_id: str) -> dict:
        """{"transactional_id", "topic", "partition", "coordinator"}: the id's `__transaction_state`
        partition and the node that leads it, its transaction coordinator (-1 while that topic does
        not exist)."""
        from cluster.tools import transaction_tools
        return transaction_tools.coordinator_placement(self, transactional_id)


def _recorded_node_ids(data_dir: Path) -> list[int]:
    """The node ids the cluster.json of the cluster's last start lists, sorted."""
    state = recorded_state(data_dir)
    return sorted(int(node_id) for node_id in state["nodes"]) if state is not None else []


class DockerCluster(Cluster):
    """A cluster whose controller and nodes run in containers: `with DockerCluster(nodes=3) as c: ...`.

    Same API as Cluster; `host` does not apply. Each node serves INTERNAL on 9092 at its container's
    address and EXTERNAL published on the host's 127.0.0.1 at a port of its own (`port` + id - 1,
    free ones for 0): `bootstrap_servers` are the EXTERNAL addresses, for clients on the host,
    `internal_bootstrap_servers` the INTERNAL ones, for containers on the cluster's network.
    `image` defaults to one built from this checkout.
    """

    backend = DOCKER_BACKEND

    def __init__(self, nodes: int = 3, data_dir=None, port: int = 0, host: str = "", node_config=None,
                 startup_timeout: float = READY_TIMEOUT_S, racks=None, image: str | None = None,
                 security: Security | None = None, controllers: int = 1):
        if security is not None and security.secured:
            raise ClusterError("the docker backend serves PLAINTEXT listeners only; secured listeners need "
                               "the process backend")
        if controllers != 1:
            raise ClusterError("the docker backend runs one controller; a quorum of controllers needs the "
                               "process backend")
        super().__init__(nodes=nodes, data_dir=data_dir, port=port, host="", node_config=node_config,
                         startup_timeout=startup_timeout, racks=racks, runner=DockerBackend(image))

    def address(self, node: NodeProcess) -> str:
        """127.0.0.1:<host port>: node's EXTERNAL listener, published to the host."""
        return self.runner.external_address(node)

    def internal_address(self, node: NodeProcess) -> str:
        """<container address>:9092: node's INTERNAL listener, on the cluster's network."""
        return self.runner.internal_address(node)

    @property
    def internal_bootstrap_servers(self) -> str:
        return self.runner.internal_bootstrap_servers

    @classmethod
    def from_state(cls, data_dir, state: dict) -> "DockerCluster":
        cluster = super().from_state(data_dir, state)
        cluster.runner.image = state.get("image")
        return cluster

    @property
    def name(self) -> str:
        """The name of the cluster's docker network, and the prefix of its containers' names."""
        return self.runner.name

    @property
    def image(self) -> str | None:
        return self.runner.image

    @property
    def subnet(self):
        return self.runner.subnet

    @property
    def controller_ip(self) -> str:
        return self.runner.controller_ip


# The class of each backend, by the name `kraftwerk up --backend` takes and cluster.json records.
CLUSTER_CLASSES: dict[str, type[Cluster]] = {Cluster.backend: Cluster, DockerCluster.backend: DockerCluster}


def cluster_class(backend: str = "process") -> type[Cluster]:
    """Cluster for processes on this machine; DockerCluster for one container per process."""
    if backend not in CLUSTER_CLASSES:
        raise ClusterError(f"unknown backend {backend!r}: expected {' or '.join(CLUSTER_CLASSES)}")
    return CLUSTER_CLASSES[backend]
