"""The process backend: the controller and every node as processes on this machine.

All processes of a cluster share one process group, led by the (first) controller it started with
(a controller started again joins the group the nodes are in), so that stopping the cluster (or a
test fixture failing half way) can always kill every one of them.

The controller and the nodes are forked by a fork server (cluster/launch/fork_server.py) that
imports their code once; each says that it serves with one JSON line on its stdout, which the
launcher waits for: nothing on the start path sleeps or polls.

The ports a cluster first listens on (each node's Kafka listener and admin port, each
controller's port) are kept for its lifetime, as a Kafka broker keeps its listener: a
restarted node, and the cluster started again on the same data dir, listen where they did
before, so that bootstrap lists and the addresses clients cached stay valid. The voters of a
quorum must know one another's ports before they start: those are picked free here
(`free_port`), once, and kept like the others.

Faults are signals (kill, stop, pause, resume, for a node and for a controller) and the node's
own fault switches, set through its admin port (isolate, heal, delay).
"""
from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.formats.config import ADMIN_PORT_CONFIG
from cluster.launch.backend import (
    STOP_GRACE_S, Backend, ControllerProcess, NodeProcess, pid_alive, process_state, recorded_state,
)
from cluster.launch.controllers import controllers_from_state, quorum_cluster_id, voters_argument
from cluster.launch.fork_client import SERVER_MODULE, ForkedProcess, ForkServer, ForkServerError
from cluster.tools.errors import ClusterError


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


def free_port(host: str) -> int:
    """A port nothing listens on now, for a voter whose port the others must know before it starts.
    Bound with SO_REUSEADDR as the servers bind, so the port is free for them once closed."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class KeptPorts:
    """The ports a cluster's processes listened on, from the cluster.json of its last start."""
    base_port: int = 0
    controllers: dict[int, int] | None = None  # controller id -> port
    nodes: dict[int, tuple[int, int]] | None = None  # node id -> (Kafka listener port, admin port)

    @classmethod
    def read(cls, data_dir: Path) -> "KeptPorts":
        state = recorded_state(data_dir)
        if state is None:
            return cls()
        return cls(state.get("base_port", 0),
                   {c.node_id: c.port for c in controllers_from_state(state, data_dir).values()},
                   {int(node_id): (node["port"], node.get("admin_port", 0)) for node_id, node in state["nodes"].items()})


class LocalProcessBackend(Backend):
    """Processes on this machine, in one process group, forked by the cluster's fork server."""

    def __init__(self):
        self.started_group = False  # this object started the controller, whose group the processes share
        self.fork_server: ForkServer | None = None
        self.kept = KeptPorts()

    def bind(self, cluster) -> None:
        super().bind(cluster)
        self.kept = KeptPorts() if cluster.owns_data_dir else KeptPorts.read(cluster.data_dir)
        # The group every process of the cluster is in: the first controller's pid, kept when that
        # controller is restarted (its successor joins the group the nodes are still in).
        state = None if cluster.owns_data_dir else recorded_state(cluster.data_dir)
        self.process_group: int | None = (state or {}).get("process_group")

    # --- starting ---

    def prepare_start(self) -> None:
        state = recorded_state(self.cluster.data_dir)
        if state is not None and any(pid_alive(pid) for pid in state.get("pids", [])):
            raise ClusterError(f"a cluster is already running in {self.cluster.data_dir} (kraftwerk down stops it)")

    def start_controllers(self, settings: list[str]) -> None:
        """Every controller forked, then each waited for: the first leads the process group, which
        the fork server and so every process forked after it join."""
        controllers = self.cluster.controllers
        kept = self.kept.controllers or {}
        quorum = len(controllers) > 1
        for controller_id, controller in controllers.items():
            # A lone controller may pick its own port; a quorum's voters must know each other's first.
            controller.port = kept.get(controller_id) or (free_port(self.cluster.host) if quorum else 0)
        cluster_id = quorum_cluster_id(controllers) if quorum else None  # before the first one formats its dir
        started = [(controller, self._spawn_controller(controller, settings, index == 0, cluster_id))
                   for index, controller in enumerate(controllers[c] for c in sorted(controllers))]
        for controller, process in started:
            controller.port = read_ready_line(process, controller.log_path, self.cluster.startup_timeout)["port"]

    def restart_controller(self, controller: ControllerProcess, settings: list[str]) -> None:
        """A controller again, on its port, in the group of the processes still running (a new group when none is)."""
        others = [pid for pid in self._pids() if pid and pid != controller.pid]
        alive = any(self._in_group(pid) for pid in others)
        cluster_id = quorum_cluster_id(self.cluster.controllers) if len(self.cluster.controllers) > 1 else None
        process = self._spawn_controller(controller, settings, lead_group=not alive, cluster_id=cluster_id)
        controller.port = read_ready_line(process, controller.log_path, self.cluster.startup_timeout)["port"]

    def _spawn_controller(self, controller: ControllerProcess, settings: list[str], lead_group: bool,
                          cluster_id: str | None) -> ForkedProcess:
        """Fork a controller; a quorum's with its id, every voter and the cluster id they share."""
        cluster = self.cluster
        name = controller.log_path.stem
        ensure_port_free(cluster.host, controller.port, f"the {name.replace('-', ' ')}")
        argv = ["--data-dir", str(controller.data_dir), "--host", cluster.host, "--port", str(controller.port)]
        if cluster_id:
            # One argument: a Kafka cluster id may begin with "-", which argparse would take for an option.
            argv += ["--node-id", str(controller.node_id), f"--cluster-id={cluster_id}",
                     "--voters", voters_argument(cluster.host, cluster.controllers)]
        process = self._fork("controller", [*argv, *settings], controller.log_path, lead_group=lead_group)
        controller.pid = process.pid
        if lead_group:
            self.process_group = process.pid
            self.started_group = True
        return process

    def spawn_node(self, node_id: int, settings: dict[str, str]) -> tuple[ForkedProcess, Path]:
        cluster = self.cluster
        log_path = cluster.data_dir / "logs" / f"node-{node_id}.log"
        port, admin_port = self._node_ports(node_id)
        ensure_port_free(cluster.host, port, f"node {node_id}")
        ensure_port_free(cluster.host, admin_port, f"node {node_id} (admin port)")
        argv = ["--node-id", str(node_id), "--data-dir", str(cluster.data_dir / f"node-{node_id}"),
                "--host", cluster.host, "--port", str(port), "--controller", cluster.controller_address]
        for key, value in {**settings, ADMIN_PORT_CONFIG: str(admin_port)}.items():
            argv += ["--set", f"{key}={value}"]
        return self._fork("node", argv, log_path), log_path

    def _node_ports(self, node_id: int) -> tuple[int, int]:
        """(Kafka port, admin port) for node_id: where it listened before, else what --port asks for (0: any)."""
        nodes, base_port = self.cluster.nodes, self.cluster.base_port
        if node_id in nodes:
            return nodes[node_id].port, nodes[node_id].admin_port
        kept_port, kept_admin_port = (self.kept.nodes or {}).get(node_id, (0, 0))
        if kept_port and base_port in (0, self.kept.base_port):
            return kept_port, kept_admin_port
        return (base_port + node_id - 1 if base_port else 0), kept_admin_port

    def adopt_node(self, node_id: int, started: tuple[ForkedProcess, Path]) -> NodeProcess:
        process, log_path = started
        ready = read_ready_line(process, log_path, self.cluster.startup_timeout)
        return NodeProcess(node_id, process.pid, ready["port"], self.cluster.data_dir / f"node-{node_id}",
                           log_path, admin_port=ready["admin_port"], incarnation_id=ready["incarnation_id"],
                           ports=ready.get("ports", {}))

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
        if self.fork_server is None or not self.fork_server.alive():
            self._close_fork_server()
            programs, group = (["controller", "node"], 0) if new_group else (["node"], self.process_group)
            self.fork_server = ForkServer.start(programs, self.cluster.data_dir / "logs" / "fork-server.log", group)
        return self.fork_server

    def _close_fork_server(self) -> None:
        if self.fork_server is not None:
            self.fork_server.close()
            self.fork_server = None

    # --- where things are ---

    @property
    def controller_host(self) -> str:
        return self.cluster.host

    def node_host(self, node: NodeProcess) -> str:
        return self.cluster.host

    def running(self) -> bool:
        return any(pid and self._in_group(pid) for pid in self._pids())

    def controller_running(self, controller: ControllerProcess) -> bool:
        return controller.pid is not None and self._in_group(controller.pid)

    def _pids(self) -> list[int]:
        """Every controller's pid (None for one never started), then every node's."""
        return [*(c.pid for _, c in sorted(self.cluster.controllers.items())),
                *(node.pid for node in self.cluster.nodes.values())]

    # --- faults ---

    def kill(self, node: NodeProcess) -> None:
        """SIGKILL."""
        self._signal(node.pid, signal.SIGKILL)
        self._reap(node.pid, STOP_GRACE_S)

    def stop(self, node: NodeProcess) -> None:
        """SIGTERM, after a SIGCONT that lets a paused node run to stop."""
        self._signal(node.pid, signal.SIGCONT)
        self._signal(node.pid, signal.SIGTERM)
        self._reap(node.pid, STOP_GRACE_S)

    def pause(self, node: NodeProcess) -> None:
        """SIGSTOP: like a node stuck in a long pause; returns once the kernel has stopped it."""
        self._stop_process(node.pid)

    def resume(self, node: NodeProcess) -> None:
        self._signal(node.pid, signal.SIGCONT)

    def isolate(self, node: NodeProcess, parties: list[str | int]) -> dict:
        """The node holds the traffic to and from the parties, as in a network partition."""
        return self.cluster.node_control(node.node_id, "isolate", parties=list(parties))

    def heal(self, node: NodeProcess) -> dict:
        return self.cluster.node_control(node.node_id, "heal")

    def delay(self, node: NodeProcess, delay_ms: int) -> dict:
        """The node adds delay_ms to every response on its Kafka listener."""
        return self.cluster.node_control(node.node_id, "delay", delay_ms=delay_ms)

    def faults(self, node: NodeProcess) -> dict:
        return self.cluster.node_control(node.node_id, "faults")

    # --- faults on the controller: the same signals ---

    def kill_controller(self, controller: ControllerProcess) -> None:
        self._signal(controller.pid, signal.SIGKILL)
        self._reap(controller.pid, STOP_GRACE_S)

    def stop_controller(self, controller: ControllerProcess) -> None:
        self._signal(controller.pid, signal.SIGCONT)
        self._signal(controller.pid, signal.SIGTERM)
        self._reap(controller.pid, STOP_GRACE_S)

    def pause_controller(self, controller: ControllerProcess) -> None:
        self._stop_process(controller.pid)

    def resume_controller(self, controller: ControllerProcess) -> None:
        self._signal(controller.pid, signal.SIGCONT)

    def controller_paused(self, controller: ControllerProcess) -> bool:
        return self.controller_running(controller) and process_state(controller.pid) == "T"

    # --- stopping ---

    def _in_group(self, pid: int) -> bool:
        """True when pid is still one of this cluster's processes, not an unrelated one that reused a stale pid."""
        return self._group_holds(pid) and _runs_kraftwerk_process(pid)

    def _group_holds(self, pid: int) -> bool:
        group = self.process_group or self.cluster.controller_pid
        try:
            return group is not None and pid is not None and os.getpgid(pid) == group
        except ProcessLookupError:
            return False

    def _signal(self, pid: int | None, sig: int) -> None:
        if pid and self._in_group(pid):
            _signal(pid, sig)

    def _stop_process(self, pid: int) -> None:
        """SIGSTOP, then wait (at most a second) until the process is stopped: the signal is
        delivered when the kernel next schedules it, and a caller reads its state right after."""
        self._signal(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 1
        while pid_alive(pid) and process_state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.001)

    def stop_all(self) -> None:
        """SIGTERM to every node then the controllers; anything left in the group is killed."""
        controller_pid, nodes = self.cluster.controller_pid, self.cluster.nodes
        controller_pids = [c.pid for c in self.cluster.controllers.values() if c.pid]
        group = self.process_group or controller_pid
        # Decided before anything exits: a stale cluster.json must never lead to killing a reused group id.
        group_is_ours = self.started_group or any(self._in_group(pid) for pid in self._pids() if pid)
        for node in nodes.values():
            self._signal(node.pid, signal.SIGCONT)  # a paused node must run to stop gracefully
            self._signal(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for node in nodes.values():
            self._reap(node.pid, deadline - time.monotonic())
        if group_is_ours:
            for pid in controller_pids:
                self._signal(pid, signal.SIGCONT)
                self._signal(pid, signal.SIGTERM)
            for pid in controller_pids:
                self._reap(pid, deadline - time.monotonic())
        if group and group_is_ours:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._close_fork_server()

    def _reap(self, pid: int, timeout: float) -> None:
        # Never our child (the fork server's, or of a cluster started by another `kraftwerk up`):
        # wait on a pidfd. Only the group tells whether it is ours: a killed process loses its
        # command line before it closes its sockets, and waiting is harmless.
        if not self._group_holds(pid):
            return  # gone already, or the pid now belongs to someone else
        if not _wait_exit(pid, max(timeout, 0.1)):
            self._signal(pid, signal.SIGKILL)
            _wait_exit(pid, STOP_GRACE_S)

    # --- state file ---

    def state(self, shared: dict) -> dict:
        cluster = self.cluster
        return {**shared, "process_group": self.process_group or cluster.controller_pid, "pids": self._pids()}

    def node_from_state(self, node_id: int, recorded: dict) -> NodeProcess:
        return NodeProcess(node_id, recorded["pid"], recorded["port"], Path(recorded["data_dir"]),
                           Path(recorded["log_path"]), recorded.get("admin_port", 0),
                           recorded.get("incarnation_id", ""), recorded.get("ports", {}))


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
    return bool(modules & {b"controller", b"node", SERVER_MODULE.encode()})


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
