"""Start, find and stop a kraftwerk cluster: one controller and N node processes.

All processes of a cluster share one process group, led by the controller, so that
stopping the cluster (or a test fixture failing half way) can always kill every one of
them. `cluster.json` in the data dir records what runs where, so that other commands
and `Cluster.attach` find a cluster started with `kraftwerk up --detach`.

The controller and the nodes are forked by a fork server (cluster/launch/fork_server.py) that
imports their code once; each says that it serves with one JSON line on its stdout, which
the launcher waits for: nothing on the start path sleeps or polls.

The ports a cluster first listens on (each node's Kafka listener and admin port, the
controller's port) are kept for its lifetime, as a Kafka broker keeps its listener: a
restarted node, and the cluster started again on the same data dir, listen where they
did before, so that bootstrap lists and the addresses clients cached stay valid.
"""
from __future__ import annotations

import errno
import json
import os
import select
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cluster.formats.config import ADMIN_PORT_CONFIG
from cluster.formats.control import ControlError, call_sync
from cluster.formats.errors import ErrorCode
from cluster.formats.image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC
from cluster.launch.fork_server import ForkedProcess, ForkServer, ForkServerError

READY_TIMEOUT_S = 30
STOP_GRACE_S = 10


class ClusterError(Exception):
    """The cluster could not be started, found or controlled."""


@dataclass
class NodeProcess:
    node_id: int
    pid: int
    port: int
    data_dir: Path
    log_path: Path
    admin_port: int = 0  # the node's control port: fault injection and replica state
    incarnation_id: str = ""

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def paused(self) -> bool:
        """Stopped by SIGSTOP (kraftwerk node pause): alive, but running nothing."""
        return process_state(self.pid) == "T"


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of pid (R, S, T, Z, ...), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True while pid runs; an exited process nobody has reaped yet (a zombie) counts as gone."""
    return process_state(pid) not in (None, "Z", "X")


def read_ready_line(process: ForkedProcess, log_path: Path, timeout: float) -> dict:
    """The one JSON line a process prints once it serves; waits on the pipe, never polls."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    if not line:
        lines = log_path.read_text(errors="replace").strip().splitlines() if log_path.exists() else []
        # Its stdout ended before a line: it exited (its status is the fork server's to collect,
        # but its log's last line says why).
        what = "exited before it was ready" if ready else f"did not start within {timeout:.0f}s"
        last = f": {lines[-1].strip()}" if lines else ""
        raise ClusterError(f"{log_path.stem} {what}{last} (its log: {log_path})")
    return json.loads(line)


def ensure_port_free(host: str, port: int, owner: str) -> None:
    """Refuse at once, naming the port and its owner, when a kept port is taken by another process.

    The probe binds as the servers do, with SO_REUSEADDR, so that connections of a process
    that just exited, still in TIME_WAIT, do not count as taking the port.
    """
    if not port:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise ClusterError(f"{owner} cannot listen on {host}:{port}: the port is in use by another process "
                               f"(a cluster keeps the ports it first got; free the port, or use a new data dir)"
                               ) from None


@dataclass
class KeptPorts:
    """The ports a cluster's processes listened on, from the cluster.json of its last start."""
    base_port: int = 0
    controller: int = 0
    nodes: dict[int, tuple[int, int]] | None = None  # node id -> (Kafka listener port, admin port)

    @classmethod
    def read(cls, data_dir: Path) -> "KeptPorts":
        path = data_dir / "cluster.json"
        if not path.exists():
            return cls()
        state = json.loads(path.read_text())
        return cls(state.get("base_port", 0), state["controller"]["port"],
                   {int(node_id): (node["port"], node.get("admin_port", 0)) for node_id, node in state["nodes"].items()})


class Cluster:
    """A running cluster, as a context manager: `with Cluster(nodes=3) as c: c.bootstrap_servers`."""

    backend = "process"  # cluster/launch/docker_backend.py's DockerCluster: "docker"

    def __init__(self, nodes: int = 3, data_dir=None, port: int = 0, host: str = "127.0.0.1",
                 node_config: dict[str, str] | None = None, startup_timeout: float = READY_TIMEOUT_S,
                 racks: dict[int, str] | None = None):
        self.node_count = nodes
        self.racks = dict(racks or {})  # node id -> broker.rack
        self._temporary = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kraftwerk-"))
        self.base_port = port
        self.host = host
        # Kafka defaults to one copy; a cluster launched to test failover wants min(3, nodes).
        replicas = str(min(3, nodes))
        self.node_config = {"default.replication.factor": replicas, "offsets.topic.replication.factor": replicas,
                            **(node_config or {})}
        self.startup_timeout = startup_timeout
        self.nodes: dict[int, NodeProcess] = {}
        self.controller_pid: int | None = None
        self.controller_port: int | None = None
        self._started_group = False  # this object started the controller, whose group the processes share
        self._fork_server: ForkServer | None = None
        self._kept = KeptPorts() if self._temporary else KeptPorts.read(self.data_dir)

    # --- starting ---

    def start(self) -> "Cluster":
        self._refuse_if_running()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self._start_controller()
            pending = {node_id: self._spawn_node(node_id) for node_id in self._node_ids()}
            for node_id, (process, log_path) in pending.items():
                self._adopt_node(node_id, process, log_path)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        self._write_state()
        return self

    def _refuse_if_running(self) -> None:
        state = self.data_dir / "cluster.json"
        if state.exists():
            pids = json.loads(state.read_text()).get("pids", [])
            if any(pid_alive(pid) for pid in pids):
                raise ClusterError(f"a cluster is already running in {self.data_dir} (kraftwerk down stops it)")

    def _start_controller(self) -> None:
        log_path = self.data_dir / "logs" / "controller.log"
        port = self._kept.controller
        ensure_port_free(self.host, port, "the controller")
        argv = ["--data-dir", str(self.data_dir / "controller"), "--host", self.host, "--port", str(port),
                "--num-partitions", self.node_config.get("num.partitions", "1"),
                "--default-replication-factor", self.node_config["default.replication.factor"],
                "--heartbeat-timeout-ms", self.node_config.get("broker.session.timeout.ms", "2000")]
        for key, value in self.node_config.items():
            argv += ["--set", f"{key}={value}"]  # it reads the leader-balancing ones
        # Its own process group, which every node joins: one killpg stops them all.
        process = self._fork("controller", argv, log_path, lead_group=True)
        self.controller_pid = process.pid
        self._started_group = True
        self.controller_port = read_ready_line(process, log_path, self.startup_timeout)["port"]

    def _spawn_node(self, node_id: int) -> tuple[ForkedProcess, Path]:
        log_path = self.data_dir / "logs" / f"node-{node_id}.log"
        port, admin_port = self._node_ports(node_id)
        ensure_port_free(self.host, port, f"node {node_id}")
        ensure_port_free(self.host, admin_port, f"node {node_id} (admin port)")
        argv = ["--node-id", str(node_id), "--data-dir", str(self.data_dir / f"node-{node_id}"),
                "--host", self.host, "--port", str(port), "--controller", f"{self.host}:{self.controller_port}"]
        settings = {**self.node_config, **self._rack_config(node_id), ADMIN_PORT_CONFIG: str(admin_port)}
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        return self._fork("node", argv, log_path), log_path

    def _node_ports(self, node_id: int) -> tuple[int, int]:
        """(Kafka port, admin port) for node_id: where it listened before, else what --port asks for (0: any)."""
        if node_id in self.nodes:
            return self.nodes[node_id].port, self.nodes[node_id].admin_port
        kept_port, kept_admin_port = (self._kept.nodes or {}).get(node_id, (0, 0))
        if kept_port and self.base_port in (0, self._kept.base_port):
            return kept_port, kept_admin_port
        return (self.base_port + node_id - 1 if self.base_port else 0), kept_admin_port

    def _adopt_node(self, node_id: int, process: ForkedProcess, log_path: Path) -> None:
        ready = read_ready_line(process, log_path, self.startup_timeout)
        self.nodes[node_id] = NodeProcess(node_id, process.pid, ready["port"], self.data_dir / f"node-{node_id}",
                                          log_path, admin_port=ready["admin_port"],
                                          incarnation_id=ready["incarnation_id"])

    def _fork(self, program: str, argv: list[str], log_path: Path, lead_group: bool = False) -> ForkedProcess:
        """`python -m <program>` with argv, forked by this cluster's fork server."""
        try:
            return self._running_fork_server(lead_group).spawn(program, argv, log_path, lead_group=lead_group)
        except ForkServerError as exc:
            raise ClusterError(f"cannot start {log_path.stem}: {exc}") from None

    def _running_fork_server(self, new_group: bool) -> ForkServer:
        """This cluster's fork server, started when there is none running: with the cluster, in a group
        of its own until it forks the controller; attached to a running cluster (`kraftwerk node
        restart`, say), in the cluster's group, for nodes only."""
        if self._fork_server is None or not self._fork_server.alive():
            self._close_fork_server()
            programs, group = (["controller", "node"], 0) if new_group else (["node"], self.controller_pid)
            self._fork_server = ForkServer.start(programs, self.data_dir / "logs" / "fork-server.log", group)
        return self._fork_server

    def _close_fork_server(self) -> None:
        if self._fork_server is not None:
            self._fork_server.close()
            self._fork_server = None

    def wait_ready(self, node_ids: list[int] | None = None) -> dict:
        """Until the given nodes (default: all) are registered, unfenced and caught up with the metadata."""
        try:
            return self._control("wait_ready", node_ids=node_ids or sorted(self.nodes),
                                 timeout_ms=int(self.startup_timeout * 1000), timeout=self.startup_timeout + 5)
        except ControlError as exc:
            raise ClusterError(f"the cluster did not become ready: {exc}") from exc

    # --- state file ---

    def _write_state(self) -> None:
        state = {
            "host": self.host,
            "base_port": self.base_port,
            "node_config": self.node_config,
            "controller": {"pid": self.controller_pid, "port": self.controller_port},
            "process_group": self.controller_pid,
            "nodes": {str(n.node_id): {**asdict(n), "data_dir": str(n.data_dir), "log_path": str(n.log_path)}
                      for n in self.nodes.values()},
            "bootstrap_servers": self.bootstrap_servers,
            "pids": [self.controller_pid, *(n.pid for n in self.nodes.values())],
            "racks": {str(node_id): rack for node_id, rack in self.racks.items()},
        }
        temp = self.data_dir / "cluster.json.tmp"
        temp.write_text(json.dumps(state, indent=2))
        os.replace(temp, self.data_dir / "cluster.json")

    @classmethod
    def attach(cls, data_dir) -> "Cluster":
        """The cluster described by <data_dir>/cluster.json (started by `kraftwerk up`)."""
        path = Path(data_dir) / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster in {data_dir} (start one with kraftwerk up)")
        state = json.loads(path.read_text())
        if state.get("backend") == "docker":
            from cluster.launch.docker_backend import DockerCluster
            return DockerCluster.from_state(data_dir, state)
        cluster = cls(nodes=len(state["nodes"]), data_dir=data_dir, port=state["base_port"], host=state["host"],
                      node_config=state["node_config"],
                      racks={int(node_id): rack for node_id, rack in state.get("racks", {}).items()})
        cluster._temporary = False
        cluster.controller_pid = state["controller"]["pid"]
        cluster.controller_port = state["controller"]["port"]
        for node_id, node in state["nodes"].items():
            cluster.nodes[int(node_id)] = NodeProcess(int(node_id), node["pid"], node["port"], Path(node["data_dir"]),
                                                      Path(node["log_path"]), node.get("admin_port", 0),
                                                      node.get("incarnation_id", ""))
        return cluster

    # --- queries ---

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self._address(n) for _, n in sorted(self.nodes.items()))

    def node_host(self, node: NodeProcess) -> str:
        """The host name or address where clients reach node."""
        return self.host

    def _address(self, node: NodeProcess) -> str:
        return f"{self.node_host(node)}:{node.port}"

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{self.controller_port}"

    def _control(self, op: str, timeout: float = 30, **args) -> dict:
        return call_sync(self.host, self.controller_port, op, timeout=timeout, **args)

    def status(self) -> dict:
        return self._control("status")

    def _node_control(self, node_id: int, op: str, timeout: float = 10, **args) -> dict:
        node = self.nodes[node_id]
        if not node.alive():
            raise ClusterError(f"node {node_id} is not running")
        return call_sync(self.host, node.admin_port, op, timeout=timeout, **args)

    def replica_states(self, timeout: float = 2) -> dict[int, dict]:
        """Per node, each hosted partition's log start, log end, high watermark and ISR as the node sees them, and (on leaders)
        the followers' fetch offsets; nodes that are down or do not answer are left out."""
        states = {}
        for node_id in sorted(self.nodes):
            try:
                states[node_id] = self._node_control(node_id, "replica_states", timeout=timeout)
            except (ClusterError, ControlError, OSError):
                continue
        return states

    def wait_in_sync(self, topic: str, timeout: float = 30) -> bool:
        """True once every partition of topic has a leader and all its replicas in sync, and every live node
        has applied the metadata; False on timeout."""
        reply = self._control("wait_in_sync", topic=topic, timeout_ms=int(timeout * 1000), timeout=timeout + 5)
        return reply["in_sync"]

    def running(self) -> bool:
        return self.controller_pid is not None and pid_alive(self.controller_pid)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict[str, str] | None = None) -> None:
        """Create a topic through a real Kafka admin client, as users do."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(name, partitions, replication_factor, topic_configs=config or {})])
        finally:
            admin.close()

    # --- faults ---

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would; returns once the process is gone and the controller has
        fenced it (its leaderships have moved)."""
        node = self.nodes[node_id]
        self._signal(node.pid, signal.SIGKILL)
        self._reap(node.pid, STOP_GRACE_S)
        self._report_death(node)

    def _report_death(self, node: NodeProcess) -> None:
        """Tell the controller that this incarnation of the node is gone. Its own watch on the node's
        pid usually fenced it already; answering this report only after that fence is what lets
        kill_node return with the leaderships moved. A node that registered again is left alone."""
        try:
            self._control("process_died", node_id=node.node_id, incarnation_id=node.incarnation_id, timeout=10)
        except (ControlError, OSError):
            pass  # the controller is down too: nothing to fence

    def stop_node(self, node_id: int) -> None:
        """Graceful stop (SIGTERM): the node hands its leaderships over before it exits."""
        node = self.nodes[node_id]
        self._signal(node.pid, signal.SIGCONT)
        self._signal(node.pid, signal.SIGTERM)
        self._reap(node.pid, STOP_GRACE_S)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP: the process lives on but answers nothing, like a node stuck in a long pause."""
        self._signal(self.nodes[node_id].pid, signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        self._signal(self.nodes[node_id].pid, signal.SIGCONT)

    def isolate_node(self, node_id: int, parties: list[str | int] | None = None) -> dict:
        """Cut a live node off from parties ("controller", "clients", peer node ids; default the
        controller and every peer): traffic either way is held, as in a network partition."""
        return self._node_control(node_id, "isolate", parties=list(parties or []))

    def heal_node(self, node_id: int) -> dict:
        """End a node's isolation, latency and pending injected errors."""
        return self._node_control(node_id, "heal")

    def delay_node(self, node_id: int, delay_ms: int) -> dict:
        """Add delay_ms to every response on the node's Kafka listener (0 removes it)."""
        return self._node_control(node_id, "delay", delay_ms=delay_ms)

    def inject_error(self, node_id: int, api: str | int, error: str | int, count: int = 1) -> dict:
        """The next `count` requests of `api` (Produce, Fetch, ...) to this node are answered with
        `error` (a Kafka error name or code) without being executed."""
        return self._node_control(node_id, "inject_error", api=api, error=error, count=count)

    def node_faults(self, node_id: int) -> dict:
        return self._node_control(node_id, "faults")

    def restart_node(self, node_id: int) -> None:
        """Start a node again with the same id, data dir and ports; a running one is stopped first."""
        node = self.nodes[node_id]
        if node.alive():
            self._signal(node.pid, signal.SIGTERM)
            self._reap(node.pid, STOP_GRACE_S)
        process, log_path = self._spawn_node(node_id)
        self._adopt_node(node_id, process, log_path)
        self.wait_ready([node_id])  # other nodes may be down on purpose
        self._write_state()

    # --- stopping ---

    def _in_group(self, pid: int) -> bool:
        """True when pid is still one of this cluster's processes, not an unrelated one that reused a stale pid."""
        return self._group_holds(pid) and _runs_kraftwerk_process(pid)

    def _group_holds(self, pid: int) -> bool:
        try:
            return self.controller_pid is not None and os.getpgid(pid) == self.controller_pid
        except ProcessLookupError:
            return False

    def _signal(self, pid: int, sig: int) -> None:
        if self._in_group(pid):
            _signal(pid, sig)

    def stop(self) -> None:
        """Graceful stop of every node then the controller; anything left in the group is killed."""
        # Decided before anything exits: a stale cluster.json must never lead to killing a reused group id.
        group_is_ours = self._started_group or any(
            self._in_group(pid) for pid in [self.controller_pid, *(n.pid for n in self.nodes.values())] if pid)
        for node in self.nodes.values():
            self._signal(node.pid, signal.SIGCONT)  # a paused node must run to stop gracefully
            self._signal(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for node in self.nodes.values():
            self._reap(node.pid, deadline - time.monotonic())
        if self.controller_pid and group_is_ours:
            self._signal(self.controller_pid, signal.SIGTERM)
            self._reap(self.controller_pid, deadline - time.monotonic())
            try:
                os.killpg(self.controller_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._close_fork_server()
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _reap(self, pid: int, timeout: float) -> None:
        # Never our child (the fork server's, or of a cluster started by another `kraftwerk up`):
        # wait on a pidfd. Only the group tells whether it is ours: a killed process loses its
        # command line before it closes its sockets, and waiting is harmless.
        if not self._group_holds(pid):
            return  # gone already, or the pid now belongs to someone else
        if not _wait_exit(pid, max(timeout, 0.1)):
            self._signal(pid, signal.SIGKILL)
            _wait_exit(pid, STOP_GRACE_S)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- partition reassignment ---

    def reassign(self, moves: dict[tuple[str, int], list[int] | None],
                 throttle_bytes_per_s: int | None = None) -> dict[tuple[str, int], str | None]:
        """Move partitions, {(topic, partition): replicas}, through AlterPartitionReassignments as
        kafka-reassign-partitions.sh does (None as the replicas cancels that partition's move).
        Returns, per partition, Kafka's error name if it was refused, else None.

        With throttle_bytes_per_s, every node's leader and follower replication throttles are set to
        it and the moving replicas listed as throttled (Kafka's --throttle); clear_throttles() lifts it."""
        from kafka import KafkaAdminClient, TopicPartition

        if throttle_bytes_per_s is not None:
            self._throttle_moves(moves, throttle_bytes_per_s)
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            results = admin.alter_partition_reassignments(
                {TopicPartition(topic, partition): replicas for (topic, partition), replicas in moves.items()})
        finally:
            admin.close()
        return {(tp.topic, tp.partition): None if error is None else ErrorCode(error.errno).name
                for tp, error in results.items()}

    def list_reassignments(self) -> dict[tuple[str, int], dict]:
        """Partitions being moved: {(topic, partition): {"replicas", "adding_replicas", "removing_replicas"}}."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            ongoing = admin.list_partition_reassignments()
        finally:
            admin.close()
        return {(tp.topic, tp.partition): moving for tp, moving in ongoing.items()}

    def wait_reassigned(self, partitions: list[tuple[str, int]] | None = None, timeout: float = 300) -> bool:
        """True once none of partitions (default: any) is being moved; False on timeout. Waits on the
        controller's metadata changes, not by polling."""
        keys = None if partitions is None else [list(p) for p in partitions]
        reply = self._control("wait_reassigned", partitions=keys, timeout_ms=int(timeout * 1000), timeout=timeout + 5)
        return reply["settled"]

    def _throttle_moves(self, moves: dict[tuple[str, int], list[int] | None], rate: int) -> None:
        """Kafka's --throttle: rates on every node; leaders throttled on the current replicas, followers on
        the ones being added, appended to what each topic lists already."""
        current = {(t["name"], p["partition"]): p["replicas"]
                   for t in self.status()["topics"] for p in t["partitions"]}
        leaders: dict[str, set[str]] = {}
        followers: dict[str, set[str]] = {}
        for (topic, partition), replicas in moves.items():
            existing = current.get((topic, partition), [])
            leaders.setdefault(topic, set()).update(f"{partition}:{r}" for r in existing)
            followers.setdefault(topic, set()).update(f"{partition}:{r}" for r in replicas or () if r not in existing)
        rates = [{"name": f"{side}.replication.throttled.rate", "op": 0, "value": str(rate)}
                 for side in ("leader", "follower")]
        resources = [{"resource_type": CONFIG_RESOURCE_BROKER, "resource_name": "", "configs": rates}]
        for topic in leaders:
            resources.append({"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic, "configs": [
                {"name": f"{side}.replication.throttled.replicas", "op": 2, "value": ",".join(sorted(listed))}
                for side, listed in (("leader", leaders[topic]), ("follower", followers[topic])) if listed]})
        self._configure(resources)

    def clear_throttles(self) -> None:
        """Lift every replication throttle: the rates and each topic's throttled replicas (Kafka's --verify)."""
        def deleted(kind: str) -> list[dict]:
            return [{"name": f"{side}.replication.throttled.{kind}", "op": 1, "value": None}
                    for side in ("leader", "follower")]
        resources = [{"resource_type": CONFIG_RESOURCE_BROKER, "resource_name": "", "configs": deleted("rate")}]
        resources += [{"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic["name"],
                       "configs": deleted("replicas")} for topic in self.status()["topics"]]
        self._configure(resources)

    def _configure(self, resources: list[dict]) -> None:
        reply = self._control("alter_configs", resources=resources)
        refused = [r for r in reply.get("results", ()) if r["error_code"]] or (
            [reply] if reply.get("error_code") else [])
        if refused:
            raise ClusterError(f"cannot set replication throttles: {refused[0]['error_message']}")

    def client_fetch_stats(self, timeout: float = 2) -> dict[int, dict[tuple[str, int], dict]]:
        """Per running node, {(topic, partition): {"fetches", "bytes"}} it served to consumers (not followers)."""
        stats = {}
        for node_id in sorted(self.nodes):
            try:
                reply = self._node_control(node_id, "client_fetch_stats", timeout=timeout)
            except (ClusterError, ControlError, OSError):
                continue
            stats[node_id] = {(p["topic"], p["partition"]): {"fetches": p["fetches"], "bytes": p["bytes"]}
                              for p in reply["partitions"]}
        return stats

    # --- growing and shrinking ---

    def _node_ids(self) -> list[int]:
        """The ids to start: those of the last start (nodes added or removed since keep theirs), else 1..N."""
        kept = sorted(self._kept.nodes or ())
        return kept if len(kept) == self.node_count else list(range(1, self.node_count + 1))

    def _rack_config(self, node_id: int) -> dict[str, str]:
        rack = self.racks.get(node_id)
        return {"broker.rack": rack} if rack else {}

    def add_node(self, rack: str | None = None) -> int:
        """Start a node with the next free id in the running cluster; returns its id once it is
        registered, unfenced and caught up. It hosts nothing until topics are created or moved."""
        node_id = max(self.nodes, default=0) + 1
        if rack:
            self.racks[node_id] = rack
        process, log_path = self._spawn_node(node_id)
        self._adopt_node(node_id, process, log_path)
        self.node_count = len(self.nodes)
        self._write_state()
        self.wait_ready([node_id])
        return node_id

    def assignment(self) -> dict[tuple[str, int], list[int]]:
        """Every partition's replicas, preferred leader first."""
        return {(t["name"], p["partition"]): p["replicas"] for t in self.status()["topics"] for p in t["partitions"]}

    def remove_node(self, node_id: int, throttle_bytes_per_s: int | None = None, timeout: float = 300) -> None:
        """Decommission node_id: move every replica off it (ClusterError, with nothing changed, when a
        topic's replication factor cannot be kept on the other nodes), wait for the moves, stop it,
        unregister it (UnregisterBroker) and delete its data dir."""
        from cluster.tools.planner import PlannerError, drain_plan

        if node_id not in self.nodes:
            raise ClusterError(f"node {node_id} is not part of the cluster (nodes: {sorted(self.nodes)})")
        try:
            moves = drain_plan(self.assignment(), node_id, sorted(self.nodes), self.racks)
        except PlannerError as exc:
            raise ClusterError(f"cannot remove node {node_id}: {exc}") from None
        self.run_plan(moves, throttle_bytes_per_s, timeout)
        self.stop_node(node_id)
        self.unregister_node(node_id)
        node = self.nodes.pop(node_id)
        self.racks.pop(node_id, None)
        self.node_count = len(self.nodes)
        shutil.rmtree(node.data_dir, ignore_errors=True)
        self._write_state()

    def run_plan(self, moves: dict[tuple[str, int], list[int]], throttle_bytes_per_s: int | None = None,
                 timeout: float = 300) -> None:
        """Reassign as moves says and wait until every move is complete (lifting a throttle it set)."""
        if not moves:
            return
        self.start_moves(moves, throttle_bytes_per_s)
        settled = self.wait_reassigned(list(moves), timeout=timeout)
        if throttle_bytes_per_s is not None:
            self.clear_throttles()
        if not settled:
            raise ClusterError(f"{len(self.list_reassignments())} partitions were still moving after {timeout:.0f}s")

    def start_moves(self, moves: dict[tuple[str, int], list[int]], throttle_bytes_per_s: int | None = None) -> None:
        """Reassign as moves says; ClusterError, naming the first partition refused, if any was."""
        refused = {key: error for key, error in self.reassign(moves, throttle_bytes_per_s).items() if error}
        if refused:
            (topic, partition), error = sorted(refused.items())[0]
            raise ClusterError(f"the reassignment of {topic}-{partition} was refused: {error}")

    def unregister_node(self, node_id: int) -> None:
        """UnregisterBroker, sent to a node as `kafka-cluster.sh unregister --id` sends it."""
        from kafka import KafkaAdminClient
        from node.apis.unregister_broker import UnregisterBrokerRequest

        others = ",".join(self._address(n) for i, n in sorted(self.nodes.items()) if i != node_id)
        admin = KafkaAdminClient(bootstrap_servers=others)
        try:
            # The admin client's own path to the controller, as Kafka's Admin.unregisterBroker takes it.
            request = UnregisterBrokerRequest[0](broker_id=node_id)
            response = admin._manager.run(admin._send_request_to_controller, request)
        finally:
            admin.close()
        if response.error_code:
            raise ClusterError(f"UnregisterBroker of node {node_id}: {response.error_message}")

    # --- consumer-group rebalances on demand (cluster/tools/group_tools.py) ---

    def rebalance_group(self, group_id: str) -> dict:
        """The group's coordinator starts a rebalance, as when a member joins: every member sees
        REBALANCE_IN_PROGRESS on its next heartbeat and rejoins. Returns the group's state, the
        generation it leaves and its member ids."""
        from cluster.tools import group_tools
        return group_tools.rebalance(self, group_id)

    def remove_group_member(self, group_id: str, member: str) -> dict:
        """Remove a member by its group.instance.id (static) or member id, with the LeaveGroup v3+
        Kafka's AdminClient.removeMembersFromConsumerGroup sends."""
        from cluster.tools import group_tools
        return group_tools.remove_member(self, group_id, member)

    def move_group_coordinator(self, group_id: str, to: int | None = None) -> dict:
        """Give the group's `__consumer_offsets` partition another in-sync leader (node `to`, or one
        the controller picks): {"group_id", "partition", "from", "to"}."""
        from cluster.tools import group_tools
        return group_tools.move_coordinator(self, group_id, to)


def _wait_exit(pid: int, timeout: float | None) -> bool:
    """True once pid has exited; a pidfd becomes readable at exit, so nothing polls."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def _runs_kraftwerk_process(pid: int) -> bool:
    """True when pid runs `python -m controller` or `python -m node`, or is (or was forked by) the fork server."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    modules = {args[i + 1] for i, arg in enumerate(args[:-1]) if arg == b"-m"}
    return bool(modules & {b"controller", b"node", b"cluster.launch.fork_server"})


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def cluster_class(backend: str = "process") -> type[Cluster]:
    """Cluster for processes on this machine; DockerCluster for one container per process."""
    if backend == "docker":
        from cluster.launch.docker_backend import DockerCluster
        return DockerCluster
    if backend != "process":
        raise ClusterError(f"unknown backend {backend!r}: expected process or docker")
    return Cluster
