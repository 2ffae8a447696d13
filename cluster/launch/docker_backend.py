"""The docker backend: each process of a cluster in its own container, faults carried out by the kernel.

`kraftwerk up --backend docker` and `DockerCluster(nodes=3)` (cluster/launch/cluster.py) run the controller and every node as
containers of the kraftwerk image (docker/Dockerfile) on a network of the cluster's own, each with
its own network namespace, host name (`controller`, `node-1`, ...) and fixed address. A node has
two listeners, as Kafka's INTERNAL/EXTERNAL pattern has them: INTERNAL on port 9092, advertised
at the container's address, for other containers on the network and for the nodes' replication
(`inter.broker.listener.name`); EXTERNAL on port 9094, published on the host's 127.0.0.1 at a
port of the node's own (free, or counted up from `--port`, and kept across restarts) and
advertised there, so that a client on the host works wherever docker publishes ports, whether
or not the host can route to container addresses.
The data dir is bind-mounted into every container at the same layout the process backend uses,
so `down` and `up` keep topics and messages, and cluster.json says where everything runs.

Faults map onto the kernel rather than onto the node's own fault switches:
- kill: `docker kill` (SIGKILL); stop: `docker stop` (SIGTERM through tini: a controlled shutdown);
- pause / resume: `docker pause` / `unpause` (the cgroup freezer stops every thread);
- isolate: blackhole routing rules in the node's network namespace drop every packet to and from
  the chosen parties' addresses, ARP included; "clients" drops every packet coming in but the
  controller's and the peers' that stay connected (cluster/launch/docker_faults.py). A host
  client's connection to a published port reaches the node from the network's gateway (docker's
  proxy connects on its behalf), so that cut holds it off too;
- delay: `tc netem` on the node's interface delays every packet it sends, to the published
  port's clients too; where the kernel lacks netem, the node delays its own responses as in the
  process backend.

Everything created here (network, containers) carries the label org.kraftwerk.cluster=<name>,
so `remove_labelled` cleans up whatever a crashed run left.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.formats.config import ADMIN_PORT_CONFIG
from cluster.formats.control import ControlError
from cluster.launch.backend import STOP_GRACE_S, Backend, ControllerProcess, NodeProcess, recorded_state
from cluster.launch.docker_faults import NETEM_MISSING, delay_commands, heal_commands, isolation_commands
from cluster.launch.local_backend import ensure_port_free
from cluster.tools.errors import ClusterError

BACKEND = "docker"  # what `kraftwerk up --backend` and cluster.json call it
LABEL = "org.kraftwerk.cluster"
KAFKA_PORT = 9092  # a node's INTERNAL listener, in its container
CONTROLLER_PORT = 9093
EXTERNAL_PORT = 9094  # a node's EXTERNAL listener, in its container: published to the host
PUBLISHED_HOST = "127.0.0.1"  # where the host reaches each node's EXTERNAL listener
LISTENERS = f"INTERNAL://0.0.0.0:{KAFKA_PORT},EXTERNAL://0.0.0.0:{EXTERNAL_PORT}"
PROTOCOL_MAP = "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"
ADMIN_PORT = 9091
MOUNT = "/kraftwerk"  # where the data dir appears inside every container

SUBNET_POOL = ipaddress.ip_network("10.213.0.0/16")  # the /24 each cluster network takes comes from here
GATEWAY_HOST = 1  # host part of the network's gateway (the host's side of the bridge)
CONTROLLER_HOST = 10  # host part of the controller's address; node N gets NODE_HOST_BASE + N
NODE_HOST_BASE = 20
DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"  # the checkout's docker/
SOURCE_PACKAGES = ("cluster", "node", "controller")


def docker_client(timeout: float = 60):
    """A client of the local docker daemon; ClusterError, with the reason, when there is none."""
    try:
        import docker
    except ImportError:
        raise ClusterError("the docker backend needs the docker SDK: pip install 'kraftwerk[docker]'") from None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for "no daemon"
        raise ClusterError(f"cannot reach the docker daemon: {exc}") from None
    return client


_shared = None


def shared_client():
    """One daemon client for the many short status queries of a process."""
    global _shared
    if _shared is None:
        _shared = docker_client()
    return _shared


# --- the image ---

def source_tag() -> str:
    """kraftwerk:src-<hash of the source and the docker files>: an image built from exactly this checkout."""
    root = DOCKER_DIR.parent
    digest = hashlib.sha256()
    files = [root / "pyproject.toml", *sorted(p for p in DOCKER_DIR.iterdir() if p.is_file())]
    for package in SOURCE_PACKAGES:
        files += sorted((root / package).rglob("*.py")) + sorted((root / package).rglob("*.json"))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return f"kraftwerk:src-{digest.hexdigest()[:12]}"


def ensure_image(image: str | None = None) -> str:
    """The image to run: `image` if given (it must exist), else one built from this checkout
    by docker/build-image when there is none yet (a minute cold, seconds once cached)."""
    client = docker_client()
    if image is not None:
        if not client.images.list(name=image):
            raise ClusterError(f"no docker image {image} (docker/build-image builds one)")
        return image
    if not (DOCKER_DIR / "build-image").exists():
        raise ClusterError("this installation has no docker/ directory: pass an image built with docker/build-image")
    tag = source_tag()
    if not client.images.list(name=tag):
        build = subprocess.run([str(DOCKER_DIR / "build-image"), tag, "kraftwerk:latest"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if build.returncode:
            raise ClusterError(f"docker/build-image failed: {build.stdout.decode(errors='replace').strip()[-2000:]}")
        _remove_older_builds(client, tag)
    return tag


def _remove_older_builds(client, current: str) -> None:
    """Untag the images built from earlier states of the checkout: each source change makes a new one."""
    import docker.errors

    for image in client.images.list(name="kraftwerk"):
        for tag in image.tags:
            if tag.startswith("kraftwerk:src-") and tag != current:
                try:
                    client.images.remove(tag)
                except docker.errors.APIError:
                    pass  # a container still uses it


# --- a node in a container ---

@dataclass
class DockerNode(NodeProcess):
    container: str = ""
    address: str = ""  # in the cluster's network: the INTERNAL listener's
    host_port: int = 0  # on the host's PUBLISHED_HOST: the EXTERNAL listener's
    isolated_from: list[str] = field(default_factory=list)
    delay_ms: int = 0

    def _status(self) -> str | None:
        import docker.errors
        try:
            return shared_client().containers.get(self.container).status
        except docker.errors.NotFound:
            return None

    def alive(self) -> bool:
        return self._status() in ("running", "paused")

    def paused(self) -> bool:
        return self._status() == "paused"


class DockerBackend(Backend):
    """The controller and every node in containers of `image` (default: one built from this checkout)."""

    def __init__(self, image: str | None = None):
        self.image = image
        self.name = ""  # of the cluster's network, and the prefix of its containers' names
        self.subnet: ipaddress.IPv4Network | None = None
        self.kept_host_ports: dict[int, int] = {}  # node id -> the host port it had at the last start
        self.kept_base_port = 0

    def bind(self, cluster) -> None:
        super().bind(cluster)
        cluster.data_dir = cluster.data_dir.resolve()  # the name below must not depend on the working dir
        self.name = "kraftwerk-" + hashlib.sha1(str(cluster.data_dir).encode()).hexdigest()[:10]
        self.subnet = None if cluster.owns_data_dir else kept_subnet(cluster.data_dir)
        if not cluster.owns_data_dir:
            self.kept_base_port, self.kept_host_ports = kept_host_ports(cluster.data_dir)

    @property
    def docker(self):
        return shared_client()

    # --- where things are ---

    def _address_of(self, host_part: int) -> str:
        return str(self.subnet.network_address + host_part)

    @property
    def controller_ip(self) -> str:
        return self._address_of(CONTROLLER_HOST)

    @property
    def controller_host(self) -> str:
        return self.controller_ip

    def node_host(self, node: DockerNode) -> str:
        return node.address

    @staticmethod
    def external_address(node: DockerNode) -> str:
        """host:port where a client on the host reaches node: its published EXTERNAL listener."""
        return f"{PUBLISHED_HOST}:{node.host_port}"

    @staticmethod
    def internal_address(node: DockerNode) -> str:
        """host:port where a container on the cluster's network reaches node: its INTERNAL listener."""
        return f"{node.address}:{KAFKA_PORT}"

    @property
    def internal_bootstrap_servers(self) -> str:
        return ",".join(self.internal_address(node) for _, node in sorted(self.cluster.nodes.items()))

    def running(self) -> bool:
        return any(c.status in ("running", "paused")
                   for c in self.docker.containers.list(all=True, filters={"label": f"{LABEL}={self.name}"}))

    def controller_running(self, controller: ControllerProcess) -> bool:
        return self._container_status(self._controller_name) in ("running", "paused")

    @property
    def _controller_name(self) -> str:
        return f"{self.name}-controller"

    def _container_status(self, name: str) -> str | None:
        import docker.errors
        try:
            return self.docker.containers.get(name).status
        except docker.errors.NotFound:
            return None

    # --- starting ---

    def prepare_start(self) -> None:
        self.image = ensure_image(self.image)
        if self.docker.containers.list(filters={"label": f"{LABEL}={self.name}"}):
            raise ClusterError(f"a cluster is already running in {self.cluster.data_dir} (kraftwerk down stops it)")

    def _create_network(self) -> None:
        """The cluster's network, on the subnet it had before (its nodes advertise addresses in it),
        else on the first free /24 of SUBNET_POOL."""
        import docker.errors
        from docker.types import IPAMConfig, IPAMPool

        remove_labelled(self.name, self.docker)  # what a crashed run of this data dir left
        kept = [self.subnet] if self.subnet else []
        candidates = kept or self._free_subnets()
        for subnet in candidates:
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=str(subnet.network_address + GATEWAY_HOST))])
            try:
                self.docker.networks.create(self.name, driver="bridge", ipam=ipam, labels={LABEL: self.name})
            except docker.errors.APIError as exc:
                if kept or "overlap" not in str(exc):
                    raise ClusterError(f"cannot create the docker network {self.name} on {subnet}: {exc}") from None
                continue
            self.subnet = subnet
            return
        raise ClusterError(f"no free /24 left in {SUBNET_POOL} for the docker network {self.name}")

    def _free_subnets(self):
        # Clusters of different data dirs start their search at different subnets.
        return free_subnets(self.docker, start=int(self.name[-4:], 16))

    def start_controllers(self, settings: list[str]) -> None:
        """The one controller (DockerCluster refuses a quorum)."""
        self._create_network()
        [controller] = self.cluster.controllers.values()
        self.restart_controller(controller, settings)

    def restart_controller(self, controller: ControllerProcess, settings: list[str]) -> None:
        """A fresh controller container at the controller's address, on the network the nodes are on."""
        command = ["controller", "--data-dir", f"{MOUNT}/controller", "--host", "0.0.0.0",
                   "--port", str(CONTROLLER_PORT), *settings]
        container = self._run_container("controller", command, self.controller_ip)
        self._ready_line(container, self.cluster.data_dir / "logs" / "controller.log")
        controller.pid = container.attrs["State"]["Pid"]
        controller.port = CONTROLLER_PORT

    def spawn_node(self, node_id: int, settings: dict[str, str]):
        address = self._address_of(NODE_HOST_BASE + node_id)
        self._remove_container(f"{self.name}-node-{node_id}")  # an earlier incarnation holds the host port
        host_port = self._host_port(node_id)
        ensure_port_free(PUBLISHED_HOST, host_port, f"node {node_id} (its published EXTERNAL listener)")
        command = ["node", "--node-id", str(node_id), "--data-dir", f"{MOUNT}/node-{node_id}",
                   "--host", "0.0.0.0", "--port", str(KAFKA_PORT), "--controller", f"controller:{CONTROLLER_PORT}"]
        settings = {**settings, ADMIN_PORT_CONFIG: str(ADMIN_PORT), "listeners": LISTENERS,
                    "advertised.listeners": f"INTERNAL://{address}:{KAFKA_PORT},"
                                            f"EXTERNAL://{PUBLISHED_HOST}:{host_port}",
                    "listener.security.protocol.map": PROTOCOL_MAP, "inter.broker.listener.name": "INTERNAL"}
        for key, value in settings.items():
            command += ["--set", f"{key}={value}"]
        container = self._run_container(f"node-{node_id}", command, address, cap_add=["NET_ADMIN"],
                                        ports={f"{EXTERNAL_PORT}/tcp": (PUBLISHED_HOST, host_port)})
        return container, self.cluster.data_dir / "logs" / f"node-{node_id}.log", host_port

    def _host_port(self, node_id: int) -> int:
        """The host port node_id's EXTERNAL listener is published on: the one it had (a restart, or
        `up` again on the data dir), else the `--port` count (first node's port + id - 1), else a free one."""
        running = self.cluster.nodes.get(node_id)
        if running is not None and running.host_port:
            return running.host_port
        base_port = self.cluster.base_port
        kept = self.kept_host_ports.get(node_id, 0)
        if kept and base_port in (0, self.kept_base_port):
            return kept
        if base_port:
            return base_port + node_id - 1
        taken = {node.host_port for node in self.cluster.nodes.values()} | set(self.kept_host_ports.values())
        while True:  # without docker's proxy a published port is not bound on the host: the OS may offer it again
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind((PUBLISHED_HOST, 0))
                port = probe.getsockname()[1]
            if port not in taken:
                return port

    def adopt_node(self, node_id: int, started) -> DockerNode:
        container, log_path, host_port = started
        ready = self._ready_line(container, log_path)
        return DockerNode(node_id, container.attrs["State"]["Pid"], KAFKA_PORT,
                          self.cluster.data_dir / f"node-{node_id}", log_path, admin_port=ADMIN_PORT,
                          incarnation_id=ready["incarnation_id"], ports=ready.get("ports", {}),
                          container=container.name, address=self._address_of(NODE_HOST_BASE + node_id),
                          host_port=host_port)

    def _run_container(self, host_name: str, command: list[str], address: str, **options):
        """A fresh container for one incarnation of a process (an old one of the same name is
        removed, its log kept), on the cluster network at a fixed address, running as the
        invoking user so that the files it writes in the data dir are theirs."""
        name = f"{self.name}-{host_name}"
        self._remove_container(name)
        endpoint = self.docker.api.create_endpoint_config(ipv4_address=address, aliases=[host_name])
        container = self.docker.containers.run(
            self.image, command, name=name, hostname=host_name, detach=True, labels={LABEL: self.name},
            user=f"{os.getuid()}:{os.getgid()}", network=self.name, networking_config={self.name: endpoint},
            volumes={str(self.cluster.data_dir): {"bind": MOUNT, "mode": "rw"}},
            environment={"KRAFTWERK_LOG_LEVEL": os.environ.get("KRAFTWERK_LOG_LEVEL", "INFO")}, **options)
        container.reload()
        return container

    def _ready_line(self, container, log_path: Path) -> dict:
        """The JSON line a process prints on stdout once it serves, read from its log stream as it
        arrives; ClusterError with its last log line when it exits or stays silent."""
        client = docker_client(self.cluster.startup_timeout)
        stream = client.api.logs(container.id, stdout=True, stderr=False, stream=True, follow=True)
        pending = b""
        try:
            for chunk in stream:
                pending += chunk
                if b"\n" in pending:
                    return json.loads(pending.split(b"\n", 1)[0])
        except Exception:  # the read timed out: requests and urllib3 raise several types
            pass
        finally:
            stream.close()
            client.close()
        last = container.logs(stdout=False, stderr=True, tail=1).decode(errors="replace").strip()
        raise ClusterError(f"{log_path.stem} did not start in its container {container.name}"
                           f"{': ' + last if last else ''} (its log: {log_path}, once the cluster is down)")

    def _save_log(self, name: str, log_path: Path) -> None:
        """Append a container's stderr (the process's log) to log_path, before the container goes."""
        import docker.errors
        try:
            text = self.docker.containers.get(name).logs(stdout=False, stderr=True)
        except docker.errors.NotFound:
            return
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            log_file.write(text)

    def _remove_container(self, name: str) -> None:
        import docker.errors
        try:
            container = self.docker.containers.get(name)
        except docker.errors.NotFound:
            return
        role = name[len(self.name) + 1:]
        self._save_log(name, self.cluster.data_dir / "logs" / f"{role}.log")
        container.remove(force=True)

    # --- state file ---

    def state(self, shared: dict) -> dict:
        return {"backend": BACKEND, "name": self.name, "image": self.image, "subnet": str(self.subnet), **shared,
                "internal_bootstrap_servers": self.internal_bootstrap_servers,
                "controller": {**shared["controller"], "container": f"{self.name}-controller",
                               "address": self.controller_ip}}

    def node_from_state(self, node_id: int, recorded: dict) -> DockerNode:
        return DockerNode(**{**recorded, "data_dir": Path(recorded["data_dir"]), "log_path": Path(recorded["log_path"])})

    # --- faults ---

    def _container(self, node: DockerNode):
        return self.docker.containers.get(node.container)

    def kill(self, node: DockerNode) -> None:
        """`docker kill`: SIGKILL to every process of the container."""
        _kill_container(self._container(node))

    def stop(self, node: DockerNode) -> None:
        """`docker stop`: SIGTERM (tini passes it on), so the node hands over its leaderships and exits."""
        _stop_container(self._container(node))

    # The controller's faults: the same container operations on its container.

    def kill_controller(self, controller: ControllerProcess) -> None:
        _kill_container(self.docker.containers.get(self._controller_name))

    def stop_controller(self, controller: ControllerProcess) -> None:
        _stop_container(self.docker.containers.get(self._controller_name))

    def pause_controller(self, controller: ControllerProcess) -> None:
        self.docker.containers.get(self._controller_name).pause()

    def resume_controller(self, controller: ControllerProcess) -> None:
        self.docker.containers.get(self._controller_name).unpause()

    def controller_paused(self, controller: ControllerProcess) -> bool:
        return self._container_status(self._controller_name) == "paused"

    def pause(self, node: DockerNode) -> None:
        """`docker pause`: the cgroup freezer stops the node; the controller fences it after the session timeout."""
        self._container(node).pause()

    def resume(self, node: DockerNode) -> None:
        self._container(node).unpause()

    def isolate(self, node: DockerNode, parties: list[str | int]) -> dict:
        """Drop, in the node's own network namespace, every packet to and from the parties: a real
        network partition (cluster/launch/docker_faults.py says how)."""
        peers = {peer: other.address for peer, other in self.cluster.nodes.items() if peer != node.node_id}
        parties = list(parties or ["controller", *sorted(peers)])
        infrastructure = {"controller": self.controller_ip, **peers}
        self._as_root(node, isolation_commands(infrastructure, parties))
        node.isolated_from = sorted(map(str, parties))
        self.cluster.write_state()
        return self.faults(node)

    def heal(self, node: DockerNode) -> dict:
        """End the node's isolation and delay (its blackhole rules and netem go) and its injected errors."""
        self._as_root(node, heal_commands(self._address_of(GATEWAY_HOST)))
        node.isolated_from, node.delay_ms = [], 0
        self.cluster.write_state()
        self.cluster.node_control(node.node_id, "heal")
        return self.faults(node)

    def delay(self, node: DockerNode, delay_ms: int) -> dict:
        """tc netem: every packet the node sends waits delay_ms (0 removes the delay). Where the
        kernel has no netem, the node delays its own responses instead, as in the process backend."""
        try:
            self._as_root(node, delay_commands(delay_ms))
        except ClusterError as exc:
            if NETEM_MISSING not in str(exc):
                raise
            return self.cluster.node_control(node.node_id, "delay", delay_ms=delay_ms) | {
                "isolated_from": node.isolated_from}
        if delay_ms <= 0:  # removing a delay always works, netem or not: end the node's own too
            self.cluster.node_control(node.node_id, "delay", delay_ms=0)
        node.delay_ms = delay_ms
        self.cluster.write_state()
        return self.faults(node)

    def faults(self, node: DockerNode) -> dict:
        """The faults the node itself holds (injected errors), with the network faults it is under."""
        try:
            faults = self.cluster.node_control(node.node_id, "faults", timeout=2)
        except (ClusterError, ControlError, OSError):
            faults = {"injected_errors": []}  # cut off from the host ("clients"): the network faults still hold
        return {**faults, "isolated_from": node.isolated_from, "delay_ms": node.delay_ms or faults.get("delay_ms", 0)}

    def _as_root(self, node: DockerNode, commands: list[str]) -> None:
        """Run ip and tc commands as root in the node's container; ClusterError with their message if one fails."""
        exit_code, output = self._container(node).exec_run(["sh", "-ec", "\n".join(commands)], user="root")
        if exit_code:
            raise ClusterError(f"node {node.node_id}: a network command failed: {output.decode(errors='replace').strip()}")

    # --- stopping ---

    def stop_all(self) -> None:
        """Graceful stop of every node, then the controller; then the containers and network go."""
        import docker.errors

        containers = self.docker.containers.list(all=True, filters={"label": f"{LABEL}={self.name}"})
        nodes = [c for c in containers if not c.name.endswith("-controller")]
        for container in nodes:
            try:
                if container.status == "paused":
                    container.unpause()
                container.kill(signal="SIGTERM")
            except docker.errors.APIError:
                pass  # not running
        deadline = time.monotonic() + STOP_GRACE_S
        for container in nodes:
            try:
                container.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except Exception:  # still running at the deadline: the removal below kills it
                pass
        for container in containers:
            if container.name.endswith("-controller"):
                container.stop(timeout=STOP_GRACE_S)
        for container in containers:
            self._remove_container(container.name)
        remove_labelled(self.name, self.docker)


def kept_subnet(data_dir: Path) -> ipaddress.IPv4Network | None:
    """The subnet of the docker cluster that last ran in data_dir: its nodes advertised addresses in
    it, so it is kept, as the process backend keeps its ports."""
    state = recorded_state(data_dir) or {}
    return ipaddress.ip_network(state["subnet"]) if state.get("backend") == BACKEND else None


def kept_host_ports(data_dir: Path) -> tuple[int, dict[int, int]]:
    """(base port, {node id: host port}) of the docker cluster that last ran in data_dir: its nodes
    advertised those ports to clients on the host, so they are kept, as the process backend keeps its ports."""
    state = recorded_state(data_dir) or {}
    if state.get("backend") != BACKEND:
        return 0, {}
    ports = {int(node_id): node.get("host_port", 0) for node_id, node in state["nodes"].items()}
    return state.get("base_port", 0), {node_id: port for node_id, port in ports.items() if port}


def free_subnets(client, start: int = 0):
    """The /24s of SUBNET_POOL that no docker network uses, from the start-th one on (wrapping around)."""
    taken = [ipaddress.ip_network(config["Subnet"]) for network in client.networks.list()
             for config in (network.attrs.get("IPAM") or {}).get("Config") or () if "Subnet" in config]
    subnets = list(SUBNET_POOL.subnets(new_prefix=24))
    start %= len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(subnet.version == other.version and subnet.overlaps(other) for other in taken):
            yield subnet


def remove_labelled(name: str | None = None, client=None) -> None:
    """Remove the containers and networks of the docker cluster `name` (every kraftwerk one when None)."""
    client = client or docker_client()
    label = LABEL if name is None else f"{LABEL}={name}"
    for container in client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)
    for network in client.networks.list(filters={"label": label}):
        network.remove()


def _kill_container(container) -> None:
    if container.status == "paused":
        container.unpause()  # a frozen cgroup takes no signal: kill the running process, as on a crash
    container.kill()
    container.wait(timeout=STOP_GRACE_S)


def _stop_container(container) -> None:
    if container.status == "paused":
        container.unpause()
    container.stop(timeout=STOP_GRACE_S)
