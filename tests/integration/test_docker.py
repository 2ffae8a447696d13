"""The docker backend: a cluster whose controller and nodes each run in a container of their own.

One 3-node cluster serves the whole module (the image is built once, from this checkout). Real
clients on the host (through each node's EXTERNAL listener, published on 127.0.0.1) and in a
container on the cluster network (through the INTERNAL listeners, at the containers' addresses)
use it; faults are done by docker and by the kernel, and the tests look at the kernel's side of
them (interface counters, the controller's fencing) and at what a host client gets through the
published ports. Skipped, with the reason, where no docker daemon can be reached.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest

from cluster.launch import ClusterError, DockerCluster

docker_backend = pytest.importorskip("cluster.launch.docker_backend")
pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'kraftwerk[docker]')")

KRAFTWERK = [sys.executable, "-c", "from cluster.cli import main; main()"]
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
SESSION_TIMEOUT_MS = 2000
FENCE_WAIT_S = 15
QUIET_WINDOW_S = 3  # how long an isolated node's interface is watched for the packets it sends
# Shorter than Kafka's 30 s default: a follower's fetch that a network cut stalled is given up
# and retried this long after it was sent, rather than when TCP's backed-off retransmission comes.
REPLICA_SOCKET_TIMEOUT_MS = 8000


def docker_reason() -> str | None:
    try:
        docker_backend.docker_client()
    except ClusterError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def image():
    reason = docker_reason()
    if reason:
        pytest.skip(reason)
    return docker_backend.ensure_image()


@pytest.fixture(scope="module")
def docker_cluster(image, tmp_path_factory):
    config = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "group.initial.rebalance.delay.ms": "0",
              "replica.socket.timeout.ms": str(REPLICA_SOCKET_TIMEOUT_MS)}
    with DockerCluster(nodes=3, data_dir=tmp_path_factory.mktemp("docker") / "kraftwerk",
                                      node_config=config, image=image) as cluster:
        yield cluster
    assert not docker_backend.shared_client().containers.list(
        all=True, filters={"label": f"{docker_backend.LABEL}={cluster.name}"})


def new_topic(cluster, prefix: str, partitions: int = 3) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    assert cluster.wait_in_sync(topic)
    return topic


def kafka_python_round_trip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(topic, value)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-kafka-python",
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        return [message.value for message in consumer]
    finally:
        consumer.close()


def api_versions_answer(address: str, timeout: float) -> int | None:
    """The error code of the answer to an ApiVersions v0 request sent to address (host:port); None
    when none comes within timeout (the connection refused, closed or silent)."""
    host, port = address.rsplit(":", 1)
    request = struct.pack("!hhih", 18, 0, 7, 5) + b"probe"  # api key, version, correlation id, client id
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            connection.sendall(struct.pack("!i", len(request)) + request)
            head = b""
            while len(head) < 10:
                chunk = connection.recv(10 - len(head))
                if not chunk:
                    return None
                head += chunk
    except OSError:  # socket.timeout included
        return None
    _, correlation_id, error_code = struct.unpack("!iih", head)
    assert correlation_id == 7
    return error_code


def test_nodes_run_in_their_own_containers_with_their_own_addresses(docker_cluster):
    nodes = sorted(docker_cluster.nodes.items())
    addresses = [node.address for _, node in nodes]
    host_ports = [node.host_port for _, node in nodes]
    assert len(set(addresses)) == 3 and docker_cluster.controller_ip not in addresses
    assert len(set(host_ports)) == 3 and all(host_ports)
    assert docker_cluster.bootstrap_servers == ",".join(f"127.0.0.1:{port}" for port in host_ports)
    assert docker_cluster.internal_bootstrap_servers == ",".join(f"{a}:9092" for a in addresses)
    assert [node.ports for _, node in nodes] == [{"INTERNAL": 9092, "EXTERNAL": 9094}] * 3
    brokers = docker_cluster.status()["brokers"]
    assert sorted((b["node_id"], b["fenced"]) for b in brokers) == [(1, False), (2, False), (3, False)]
    assert [b["listeners"] for b in sorted(brokers, key=lambda b: b["node_id"])] == [
        {"INTERNAL": f"{address}:9092", "EXTERNAL": f"127.0.0.1:{port}"} for address, port in zip(addresses, host_ports)]
    state = json.loads((docker_cluster.data_dir / "cluster.json").read_text())
    assert state["bootstrap_servers"] == docker_cluster.bootstrap_servers
    assert state["internal_bootstrap_servers"] == docker_cluster.internal_bootstrap_servers


def test_metadata_from_the_host_lists_every_node_at_its_published_port(docker_cluster):
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": docker_cluster.bootstrap_servers}).list_topics(timeout=10)
    assert sorted((b.id, b.host, b.port) for b in metadata.brokers.values()) == [
        (node_id, "127.0.0.1", node.host_port) for node_id, node in sorted(docker_cluster.nodes.items())]


def test_kafka_python_from_the_host_produces_and_consumes_in_a_group(docker_cluster):
    topic = new_topic(docker_cluster, "host-kafka-python")
    values = [f"kafka-python {i}".encode() for i in range(30)]
    assert sorted(kafka_python_round_trip(docker_cluster.bootstrap_servers, topic, values)) == sorted(values)


def test_confluent_kafka_from_the_host_produces_and_consumes_in_a_group(docker_cluster):
    from confluent_kafka import Consumer, Producer

    topic = new_topic(docker_cluster, "host-confluent")
    producer = Producer({"bootstrap.servers": docker_cluster.bootstrap_servers, "acks": "all"})
    values = [f"librdkafka {i}".encode() for i in range(30)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": docker_cluster.bootstrap_servers, "group.id": f"{topic}-group",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received = []
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append(message.value())
        assert consumer.committed([*consumer.assignment()], timeout=10) is not None
    finally:
        consumer.close()
    assert sorted(received) == sorted(values)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_kcat_from_the_host_produces_and_consumes_in_a_group(docker_cluster):
    topic = new_topic(docker_cluster, "host-kcat")
    lines = [f"kcat {i}" for i in range(20)]
    subprocess.run([KCAT, "-b", docker_cluster.bootstrap_servers, "-P", "-t", topic, "-X", "acks=all"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    consumed = subprocess.run([KCAT, "-b", docker_cluster.bootstrap_servers, "-G", f"{topic}-group", topic,
                               "-X", "auto.offset.reset=earliest", "-c", str(len(lines)), "-e", "-q"],
                              capture_output=True, text=True, timeout=60)
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)


# Produces and consumes ten messages, then prints them and the brokers the consumer's Metadata listed.
CLIENT_IN_A_CONTAINER = """
import json, sys
from kafka import KafkaConsumer, KafkaProducer
bootstrap, topic = sys.argv[1], sys.argv[2]
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
for i in range(10):
    producer.send(topic, f"from a container {i}".encode())
producer.flush()
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=topic, auto_offset_reset="earliest",
                         consumer_timeout_ms=10000)
values = sorted(m.value.decode() for m in consumer)
brokers = sorted([b.node_id, b.host, b.port] for b in consumer._client.cluster.brokers())
print(json.dumps({"values": values, "brokers": brokers}))
"""


@pytest.mark.parametrize("bootstrap", ["host names", "internal_bootstrap_servers"])
def test_a_container_on_the_network_reaches_the_nodes_at_their_internal_addresses(docker_cluster, image, bootstrap):
    topic = new_topic(docker_cluster, "in-network")
    servers = "node-1:9092,node-2:9092" if bootstrap == "host names" else docker_cluster.internal_bootstrap_servers
    output = docker_backend.shared_client().containers.run(
        image, ["-c", CLIENT_IN_A_CONTAINER, servers, topic], entrypoint="python3",
        network=docker_cluster.name, labels={docker_backend.LABEL: docker_cluster.name}, remove=True)
    seen = json.loads(output.decode().splitlines()[-1])
    assert seen["values"] == sorted(f"from a container {i}" for i in range(10))
    assert seen["brokers"] == [[node_id, node.address, 9092] for node_id, node in sorted(docker_cluster.nodes.items())]


# Run as root in a node's container: the destinations of every frame its interface sends during a
# window (IPv4 destination, or the address an ARP message is for), read from a packet socket.
SENT_TO = """
import socket, struct, sys, time
sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sniffer.bind(("eth0", 0))
sniffer.settimeout(0.2)
end, destinations = time.monotonic() + float(sys.argv[1]), set()
while time.monotonic() < end:
    try:
        frame, (_, _, kind, _, _) = sniffer.recvfrom(65535)
    except socket.timeout:
        continue
    ethertype = struct.unpack("!H", frame[12:14])[0]
    if kind == socket.PACKET_OUTGOING and ethertype == 0x0800:
        destinations.add(f"{socket.inet_ntoa(frame[30:34])} ip-protocol-{frame[23]}")
    elif kind == socket.PACKET_OUTGOING and ethertype == 0x0806:
        destinations.add(f"{socket.inet_ntoa(frame[38:42])} arp-{frame[21]}")
print("\\n".join(sorted(destinations)))
"""


def sent_to(cluster, node_id: int, seconds: float) -> dict[str, str]:
    """{address: what was sent to it} for the frames node_id's interface sent in a window of seconds."""
    container = docker_backend.shared_client().containers.get(cluster.nodes[node_id].container)
    code, output = container.exec_run(["python3", "-c", SENT_TO, str(seconds)], user="root")
    assert code == 0, output
    return dict(line.split(" ", 1) for line in output.decode().splitlines() if line)


def tcp_segments_delivered(cluster, node_id: int) -> int:
    """TCP segments the node's kernel took in (packets the cut drops are counted by the interface, not here)."""
    container = docker_backend.shared_client().containers.get(cluster.nodes[node_id].container)
    code, output = container.exec_run(["grep", "^Tcp:", "/proc/net/snmp"])
    assert code == 0, output
    names, values = output.decode().splitlines()
    return dict(zip(names.split()[1:], map(int, values.split()[1:])))["InSegs"]


def wait_fenced(cluster, node_id: int, fenced: bool) -> bool:
    deadline = time.monotonic() + FENCE_WAIT_S
    while time.monotonic() < deadline:
        brokers = {b["node_id"]: b["fenced"] for b in cluster.status()["brokers"]}
        if brokers.get(node_id) == fenced:
            return True
        time.sleep(0.2)  # the controller offers no wait for a fence; its status is cheap to ask
    return False


def test_an_isolated_node_exchanges_nothing_with_its_peers_and_is_fenced(docker_cluster):
    topic = new_topic(docker_cluster, "isolated")
    faults = docker_cluster.isolate_node(3)
    assert faults["isolated_from"] == ["1", "2", "controller"]
    try:
        assert wait_fenced(docker_cluster, 3, True)
        delivered = tcp_segments_delivered(docker_cluster, 3)
        destinations = sent_to(docker_cluster, 3, QUIET_WINDOW_S)
        others = {node.address for node_id, node in docker_cluster.nodes.items() if node_id != 3}
        assert not destinations.keys() & (others | {docker_cluster.controller_ip}), destinations
        assert tcp_segments_delivered(docker_cluster, 3) == delivered
        # The rest of the cluster serves on without it, to clients that bootstrap from the rest: the
        # isolated node still answers Metadata from what it knew before the cut (as a Kafka broker cut
        # off from its controller does), so a client bootstrapped there may write to a leader now gone.
        rest = ",".join(docker_cluster.address(node) for node_id, node in sorted(docker_cluster.nodes.items())
                        if node_id != 3)
        values = [f"without node 3: {i}".encode() for i in range(10)]
        assert sorted(kafka_python_round_trip(rest, topic, values)) == sorted(values)
    finally:
        docker_cluster.heal_node(3)
    docker_cluster.wait_ready()
    assert wait_fenced(docker_cluster, 3, False)
    # A peer's connection that the cut stalled recovers with TCP's next retransmission after the heal
    # (its backoff grows during the cut) or, at the latest, once replica.socket.timeout.ms runs out.
    assert docker_cluster.wait_in_sync(topic, timeout=REPLICA_SOCKET_TIMEOUT_MS / 1000 + 30)


def test_a_node_isolated_from_clients_takes_no_connection_until_healed(docker_cluster):
    node = docker_cluster.nodes[1]
    external = docker_cluster.address(node)
    assert api_versions_answer(external, timeout=5) == 0
    faults = docker_cluster.isolate_node(1, ["clients"])
    try:
        assert faults["isolated_from"] == ["clients"]
        with pytest.raises(OSError):
            socket.create_connection((node.address, node.port), timeout=2)
        # Through the published port docker's proxy takes the connection, but its own connection to
        # the node, from the network's gateway, is cut: the request is never answered.
        assert api_versions_answer(external, timeout=3) is None
        assert docker_cluster.wait_ready([1])  # the controller and its peers still reach it
    finally:
        faults = docker_cluster.heal_node(1)
    assert faults["isolated_from"] == []
    socket.create_connection((node.address, node.port), timeout=5).close()
    assert api_versions_answer(external, timeout=5) == 0


def test_a_delayed_node_answers_late_through_its_published_port(docker_cluster):
    external = docker_cluster.address(docker_cluster.nodes[2])
    faults = docker_cluster.delay_node(2, 600)
    try:
        assert faults["delay_ms"] == 600
        started = time.monotonic()
        assert api_versions_answer(external, timeout=10) == 0
        assert time.monotonic() - started >= 0.6
    finally:
        faults = docker_cluster.delay_node(2, 0)
    assert faults["delay_ms"] == 0


def test_a_paused_node_answers_nothing_through_its_published_port(docker_cluster):
    external = docker_cluster.address(docker_cluster.nodes[3])
    docker_cluster.pause_node(3)
    try:
        assert api_versions_answer(external, timeout=2) is None
    finally:
        docker_cluster.resume_node(3)
    assert api_versions_answer(external, timeout=5) == 0
    docker_cluster.wait_ready()


def test_a_paused_container_is_fenced_after_the_session_timeout(docker_cluster):
    docker_cluster.pause_node(2)
    try:
        assert docker_cluster.nodes[2].paused()
        assert wait_fenced(docker_cluster, 2, True)
    finally:
        docker_cluster.resume_node(2)
    docker_cluster.wait_ready()
    assert wait_fenced(docker_cluster, 2, False)


def test_kill_and_restart_give_the_node_a_new_container_at_the_same_address(docker_cluster):
    address, host_port = docker_cluster.nodes[1].address, docker_cluster.nodes[1].host_port
    incarnation = docker_cluster.nodes[1].incarnation_id
    docker_cluster.kill_node(1)
    assert not docker_cluster.nodes[1].alive()
    docker_cluster.restart_node(1)
    assert (docker_cluster.nodes[1].address, docker_cluster.nodes[1].host_port) == (address, host_port)
    assert docker_cluster.nodes[1].incarnation_id != incarnation
    topic = new_topic(docker_cluster, "after-restart")
    values = [f"after restart {i}".encode() for i in range(10)]
    assert sorted(kafka_python_round_trip(docker_cluster.bootstrap_servers, topic, values)) == sorted(values)


def test_the_controller_container_as_a_fault_keeps_the_metadata_and_the_nodes_serving(docker_cluster):
    from kafka import KafkaProducer

    before = new_topic(docker_cluster, "before-controller-kill")
    docker_cluster.kill_controller()
    assert docker_cluster.controller_state() == "dead"
    # The nodes serve on with the metadata they have: acks=all writes are acknowledged meanwhile
    # (not an idempotent producer's: its producer id comes from a block the controller hands out).
    producer = KafkaProducer(bootstrap_servers=docker_cluster.bootstrap_servers, acks="all",
                             enable_idempotence=False)
    offsets = [producer.send(before, f"no controller {i}".encode()).get(30).offset for i in range(5)]
    producer.close()
    assert len(offsets) == 5
    docker_cluster.start_controller()
    assert docker_cluster.controller_state() == "running"
    docker_cluster.pause_controller()
    assert docker_cluster.controller_state() == "paused"
    docker_cluster.resume_controller()
    docker_cluster.wait_ready()
    after = new_topic(docker_cluster, "after-controller-start")
    assert {before, after} <= {t["name"] for t in docker_cluster.status()["topics"]}
    values = [f"controller back {i}".encode() for i in range(5)]
    assert sorted(kafka_python_round_trip(docker_cluster.bootstrap_servers, after, values)) == sorted(values)
    read_back = kafka_python_round_trip(docker_cluster.bootstrap_servers, before, [])
    assert sorted(read_back) == sorted(f"no controller {i}".encode() for i in range(5))


def kraftwerk(*args: str, data_dir, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*KRAFTWERK, *args, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(300)
def test_check_failover_passes_with_real_network_cuts(docker_cluster):
    """The CLI finds the docker cluster through its cluster.json; isolate here is a kernel-level cut."""
    result = kraftwerk("check-failover", "--duration", "20", "--faults", "kill,stop,pause,isolate",
                       data_dir=docker_cluster.data_dir, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lost 0," in result.stdout, result.stdout


def test_cli_up_down_up_keeps_topics_and_messages(image, tmp_path):
    data_dir = tmp_path / "cli"
    try:
        started = kraftwerk("up", "--backend", "docker", "--image", image, "--nodes", "1", "--port", "0",
                            "--detach", data_dir=data_dir)
        assert started.returncode == 0, started.stdout + started.stderr
        state = json.loads((data_dir / "cluster.json").read_text())
        assert state["backend"] == "docker"
        host_port, address = state["nodes"]["1"]["host_port"], state["nodes"]["1"]["address"]
        assert state["bootstrap_servers"] == f"127.0.0.1:{host_port}"
        assert state["internal_bootstrap_servers"] == f"{address}:9092"
        assert f"bootstrap servers: 127.0.0.1:{host_port}\n" in started.stdout
        created = kraftwerk("topic", "create", "kept", "--partitions", "1", data_dir=data_dir)
        assert created.returncode == 0, created.stdout + created.stderr
        produced = subprocess.run([*KRAFTWERK, "produce", "kept", "--data-dir", str(data_dir)],
                                  input="one\ntwo\n", capture_output=True, text=True, timeout=60)
        assert produced.returncode == 0, produced.stdout + produced.stderr
        assert kraftwerk("down", data_dir=data_dir).returncode == 0
        again = kraftwerk("up", "--detach", data_dir=data_dir)  # the backend is remembered
        assert again.returncode == 0, again.stdout + again.stderr
        consumed = kraftwerk("consume", "kept", "--from-beginning", "--max-messages", "2", data_dir=data_dir)
        assert consumed.stdout.splitlines() == ["one", "two"], consumed.stdout + consumed.stderr
        assert json.loads((data_dir / "cluster.json").read_text())["nodes"]["1"]["host_port"] == host_port
        status = json.loads(kraftwerk("status", "--json", data_dir=data_dir).stdout)
        assert [(n["node_id"], n["process"], n["fenced"], n["address"], n["internal_address"])
                for n in status["nodes"]] == [(1, "running", False, f"127.0.0.1:{host_port}", f"{address}:9092")]
        table = subprocess.run([*KRAFTWERK, "status", "--data-dir", str(data_dir)], capture_output=True, text=True,
                               timeout=60, env={**os.environ, "COLUMNS": "200"}).stdout  # rich wraps at 80 columns
        assert f"127.0.0.1:{host_port}" in table and f"{address}:9092" in table
    finally:
        kraftwerk("down", data_dir=data_dir)
    assert not docker_backend.shared_client().containers.list(
        all=True, filters={"label": f"{docker_backend.LABEL}={state['name']}"})


@pytest.mark.kraftwerk(backend="docker", nodes=1)
def test_the_pytest_fixture_runs_a_docker_backed_cluster(image, kraftwerk_cluster):
    assert isinstance(kraftwerk_cluster, DockerCluster)
    assert kraftwerk_cluster.nodes[1].alive()
    kraftwerk_cluster.create_topic("fixture", partitions=1, replication_factor=1)
    values = [f"fixture {i}".encode() for i in range(5)]
    assert kafka_python_round_trip(kraftwerk_cluster.bootstrap_servers, "fixture", values) == values
