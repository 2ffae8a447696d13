"""How the processes of a cluster are run: the interface each backend implements.

A `Cluster` (cluster/launch/cluster.py) knows what a cluster is made of and in what order its
processes start and stop; its backend knows how a process is run: as a process on this machine
forked by a fork server (cluster/launch/local_backend.py), or in a container of its own on a
network of the cluster's (cluster/launch/docker_backend.py). Faults belong to the backend too,
since each carries them out with what it has: signals and the node's own fault switches, or the
container runtime and the kernel's routing rules.

A backend is bound to one cluster. It reads the cluster's settings (data dir, host, node
config, startup timeout) and the records the cluster keeps (its nodes, its controllers: one, or
the 3 or 5 voters of a quorum), and asks it for what every backend shares (the control channels,
the state file).
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 30
STOP_GRACE_S = 10
STATE_FILE = "cluster.json"  # in the data dir: what runs where, written at every start and change


def recorded_state(data_dir) -> dict | None:
    """What the data dir's cluster.json records of the cluster last started there; None if none was."""
    path = Path(data_dir) / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


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


@dataclass
class NodeProcess:
    node_id: int
    pid: int
    port: int
    data_dir: Path
    log_path: Path
    admin_port: int = 0  # the node's control port: fault injection and replica state
    incarnation_id: str = ""
    # Every listener's port, by listener name (`port` is the first's).
    ports: dict[str, int] = field(default_factory=dict)

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def paused(self) -> bool:
        """Stopped by SIGSTOP (kraftwerk node pause): alive, but running nothing."""
        return process_state(self.pid) == "T"


@dataclass
class ControllerProcess:
    """One controller process: id 0 when it is the cluster's only one, else its id as a voter of the quorum."""
    node_id: int
    pid: int | None
    port: int  # 0 until it serves, for a lone controller that picks its own port
    data_dir: Path
    log_path: Path

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)


class Backend(ABC):
    """How one cluster's controller and nodes are run."""

    def bind(self, cluster) -> None:
        """Serve `cluster` (a Cluster), whose settings are all set."""
        self.cluster = cluster

    # --- starting ---

    @abstractmethod
    def prepare_start(self) -> None:
        """Refuse (ClusterError) when a cluster already runs in the data dir; make ready what its
        processes need."""

    @abstractmethod
    def start_controllers(self, settings: list[str]) -> None:
        """Start every controller of the cluster (cluster.controller_ids) with the given command-line
        settings, a quorum's with its voters, and wait until each serves. Records each in
        cluster.controllers as soon as there is a process (so that a failed start can still stop
        it), then its port."""

    @abstractmethod
    def spawn_node(self, node_id: int, settings: dict[str, str]) -> object:
        """Start node node_id with the given configuration; returns what adopt_node waits on."""

    @abstractmethod
    def adopt_node(self, node_id: int, started: object) -> NodeProcess:
        """Wait until a node spawn_node started serves; returns its record."""

    # --- where things are ---

    @property
    @abstractmethod
    def controller_host(self) -> str:
        """The host name or address where the controllers' ports are reached."""

    @abstractmethod
    def node_host(self, node: NodeProcess) -> str:
        """The host name or address where clients reach node."""

    @abstractmethod
    def running(self) -> bool:
        """True while any process of the cluster runs (the controller or a node)."""

    @abstractmethod
    def controller_running(self, controller: ControllerProcess) -> bool:
        """True while the controller's process lives, paused or not."""

    # --- faults on one node ---

    @abstractmethod
    def kill(self, node: NodeProcess) -> None:
        """Kill the node as a crash would; returns once it is gone."""

    @abstractmethod
    def stop(self, node: NodeProcess) -> None:
        """Stop the node gracefully (it hands its leaderships over), paused or not; returns once it is gone."""

    @abstractmethod
    def pause(self, node: NodeProcess) -> None:
        """Freeze the node: it lives on but runs nothing."""

    @abstractmethod
    def resume(self, node: NodeProcess) -> None:
        """Let a paused node run again."""

    @abstractmethod
    def isolate(self, node: NodeProcess, parties: list[str | int]) -> dict:
        """Cut the node off from parties ("controller", "clients", peer node ids; none: the controller
        and every peer); returns the faults it is under."""

    @abstractmethod
    def heal(self, node: NodeProcess) -> dict:
        """End the node's isolation, delay and injected errors; returns the faults it is under."""

    @abstractmethod
    def delay(self, node: NodeProcess, delay_ms: int) -> dict:
        """Delay what the node sends by delay_ms (0 removes it); returns the faults it is under."""

    @abstractmethod
    def faults(self, node: NodeProcess) -> dict:
        """The faults the node is under."""

    # --- faults on a controller ---

    @abstractmethod
    def restart_controller(self, controller: ControllerProcess, settings: list[str]) -> None:
        """Start the controller again, on its port and data dir, while the nodes (and the quorum's
        other controllers) run on; returns once it serves."""

    @abstractmethod
    def kill_controller(self, controller: ControllerProcess) -> None:
        """Kill the controller as a crash would; returns once it is gone."""

    @abstractmethod
    def stop_controller(self, controller: ControllerProcess) -> None:
        """Stop the controller (SIGTERM), paused or not; returns once it is gone."""

    @abstractmethod
    def pause_controller(self, controller: ControllerProcess) -> None:
        """Freeze the controller: it lives on but answers nothing."""

    @abstractmethod
    def resume_controller(self, controller: ControllerProcess) -> None:
        """Let a paused controller run again."""

    @abstractmethod
    def controller_paused(self, controller: ControllerProcess) -> bool:
        """True while the controller is frozen by pause_controller."""

    # --- the whole cluster ---

    @abstractmethod
    def stop_all(self) -> None:
        """Stop every node gracefully, then the controllers; whatever is left is killed."""

    @abstractmethod
    def state(self, shared: dict) -> dict:
        """cluster.json: the state every backend records, with what this one needs to find its processes again."""

    @abstractmethod
    def node_from_state(self, node_id: int, recorded: dict) -> NodeProcess:
        """The record of a node, from what state() wrote for it."""
