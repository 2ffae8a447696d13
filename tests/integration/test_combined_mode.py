"""Kafka's own server.properties roles: `broker,controller` in one node, `controller` alone.

A node started as Kafka's quickstart starts (`process.roles=broker,controller`) runs a
controller on its CONTROLLER listener that serves the log dir's `__cluster_metadata`, so the
node leads the partitions a real Kafka 3.7 broker left there and serves their records.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from cluster.formats.control import ControlError, call_sync
from cluster.launch.certificates import make_control_certificates
from tests.integration.test_kafka_fixture import FIXTURE, copy_fixture, start_process

TIMESTAMPS = [1769792698283, 1769793423115, 1769793578165]


def combined_properties(path: Path, log_dir: Path, **extra: str) -> Path:
    """Kafka's quickstart server.properties, on ports the OS picks."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:0",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        **{k.replace("_", "."): v for k, v in extra.items()},
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class Node:
    """One `python -m node server.properties` process and its log."""

    def __init__(self, properties: Path, log_path: Path):
        self.log_path = log_path
        self.process, ready = start_process([sys.executable, "-m", "node", str(properties)], log_path)
        self.bootstrap = f"127.0.0.1:{ready['port']}"

    def controller_pid(self) -> int:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        assert len(children) == 1
        return int(children[0])

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def nodes():
    started: list[Node] = []
    yield started
    for node in started:
        node.kill()


def read_all(bootstrap: str, topic: str) -> list:
    """Every record of partition 0, up to the end offset the leader reports."""
    partition = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=30_000)
    try:
        consumer.assign([partition])
        end = consumer.end_offsets([partition])[partition]
        consumer.seek_to_beginning()
        records = []
        for record in consumer if end else ():
            records.append(record)
            if record.offset >= end - 1:
                break
        return records
    finally:
        consumer.close()


def assert_no_errors(log_path: Path) -> None:
    assert " ERROR " not in log_path.read_text(), log_path.read_text()


@pytest.fixture
def kafka_log_dir(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"the Kafka 3.7 fixture log dir is not beside this checkout ({FIXTURE})")
    return copy_fixture(tmp_path / "kraft-combined-logs")


def test_a_combined_node_serves_the_records_kafka_left_and_keeps_what_it_is_given(tmp_path, kafka_log_dir, nodes):
    properties = combined_properties(tmp_path / "server.properties", kafka_log_dir)
    nodes.append(Node(properties, tmp_path / "first.log"))
    records = read_all(nodes[0].bootstrap, "TestTopicPatient")
    assert [r.offset for r in records] == [0, 1, 2]
    assert [r.timestamp for r in records] == TIMESTAMPS
    assert b'"resourceType": "Bundle"' in records[2].value

    producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap, acks="all")
    assert producer.send("TestTopicPatient", b"appended", partition=0).get(30).offset == 3
    producer.close()
    assert nodes[0].stop() == 0
    assert_no_errors(tmp_path / "first.log")

    nodes.append(Node(properties, tmp_path / "second.log"))
    records = read_all(nodes[1].bootstrap, "TestTopicPatient")
    assert [r.offset for r in records] == [0, 1, 2, 3]
    assert [r.timestamp for r in records][:3] == TIMESTAMPS and records[3].value == b"appended"


@pytest.mark.parametrize("formatted", [False, True], ids=["empty-dir", "formatted-as-kafka-storage-does"])
def test_a_combined_node_on_a_fresh_log_dir(tmp_path, nodes, formatted):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    if formatted:  # what `kafka-storage.sh format -t <cluster id> -c server.properties` leaves
        (log_dir / "meta.properties").write_text(
            "#\n#Tue Nov 24 10:00:00 UTC 2026\nnode.id=1\ndirectory.id=3xr0hNbxQc6ExV7dLzQW1w\nversion=1\n"
            "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    nodes.append(Node(combined_properties(tmp_path / "server.properties", log_dir), tmp_path / "node.log"))
    producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap, acks="all")
    assert [producer.send("fresh", f"m{i}".encode()).get(30).offset for i in range(3)] == [0, 1, 2]
    producer.close()
    assert [r.value for r in read_all(nodes[0].bootstrap, "fresh")] == [b"m0", b"m1", b"m2"]
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap)
    try:
        cluster_id = admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()
    meta = (log_dir / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta and "node.id=1\n" in meta
    if formatted:
        assert cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"
    assert nodes[0].stop() == 0
    assert_no_errors(tmp_path / "node.log")


def test_a_combined_node_whose_controller_listener_is_ssl_talks_to_its_controller_over_mutual_tls(tmp_path, nodes):
    control = make_control_certificates(tmp_path / "certs", [])
    properties = combined_properties(tmp_path / "server.properties", tmp_path / "logs",
                                     **{"listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT",
                                        **control.broker_settings("CONTROLLER")})
    nodes.append(Node(properties, tmp_path / "node.log"))
    producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap, acks="all")
    assert producer.send("secured", b"one").get(30).offset == 0  # the topic was created through the controller
    producer.close()
    serving = re.search(r"serving on 127\.0\.0\.1:(\d+) \(mutual TLS\)", (tmp_path / "node.log").read_text())
    assert serving, (tmp_path / "node.log").read_text()
    with pytest.raises(ControlError, match="closed"):
        call_sync("127.0.0.1", int(serving.group(1)), "status", timeout=5)
    assert nodes[0].stop() == 0
    assert_no_errors(tmp_path / "node.log")


def test_a_controller_only_node_and_a_broker_only_node(tmp_path, nodes):
    controller_properties = tmp_path / "controller.properties"
    controller_properties.write_text(
        "process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:0\n"
        "listeners=CONTROLLER://127.0.0.1:0\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'controller'}\n")
    controller, ready = start_process([sys.executable, "-m", "node", str(controller_properties)],
                                      tmp_path / "controller.log")
    try:
        broker_properties = tmp_path / "broker.properties"
        broker_properties.write_text(
            f"process.roles=broker\nnode.id=2\ncontroller.quorum.bootstrap.servers=127.0.0.1:{ready['port']}\n"
            f"listeners=PLAINTEXT://127.0.0.1:0\ncontroller.listener.names=CONTROLLER\n"
            f"log.dirs={tmp_path / 'broker'}\n")
        nodes.append(Node(broker_properties, tmp_path / "broker.log"))
        producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap)
        assert producer.send("split", b"one").get(30).offset == 0
        producer.close()
        assert [r.value for r in read_all(nodes[0].bootstrap, "split")] == [b"one"]
        assert (tmp_path / "controller" / "__cluster_metadata-0").is_dir()
    finally:
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait()


def refusal(tmp_path: Path, text: str) -> str:
    properties = tmp_path / "server.properties"
    properties.write_text(text + f"log.dirs={tmp_path / 'logs'}\n")
    done = subprocess.run([sys.executable, "-m", "node", str(properties)], capture_output=True, timeout=60)
    assert done.returncode != 0 and not done.stdout
    return done.stderr.decode()


def test_combined_mode_with_several_voters_is_refused_with_a_clear_message(tmp_path):
    error = refusal(tmp_path, "process.roles=broker,controller\nnode.id=1\n"
                              "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097\n"
                              "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0\n"
                              "controller.listener.names=CONTROLLER\n")
    assert "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097 names 3 voters: " \
           "kraftwerk runs combined mode (process.roles=broker,controller) with this node's controller as the only " \
           "voter; run the quorum's controllers with process.roles=controller, or `kraftwerk up --controllers 3`" \
           in error


def test_a_broker_without_a_controller_is_refused_as_kafka_refuses_it(tmp_path):
    error = refusal(tmp_path, "process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    assert "either controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or " \
           "controller.quorum.voters must contain a parseable set of voters" in error


def test_the_controller_dies_with_its_node_and_a_controller_crash_stops_the_node(tmp_path, nodes):
    properties = combined_properties(tmp_path / "server.properties", tmp_path / "logs")
    nodes.append(Node(properties, tmp_path / "first.log"))
    controller = nodes[0].controller_pid()
    os.kill(nodes[0].process.pid, signal.SIGKILL)
    nodes[0].process.wait()
    assert wait_gone(controller)

    nodes.append(Node(properties, tmp_path / "second.log"))
    os.kill(nodes[1].controller_pid(), signal.SIGKILL)
    assert nodes[1].process.wait(timeout=30) == 1
    assert "ERROR node: the controller process" in (tmp_path / "second.log").read_text()


def wait_gone(pid: int) -> bool:
    """True once pid has exited (the pidfd turns readable), within 30 s."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], 30)[0])
    finally:
        os.close(fd)
