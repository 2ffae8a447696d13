"""A node started on a copy of a log dir written by a real Kafka 3.7 broker serves its data."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kafka-3.7-kraft-logdir"


def start_process(command: list[str], log_path: Path) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(log_path, "wb"), start_new_session=True)
    ready, _, _ = select.select([process.stdout], [], [], 30)
    line = process.stdout.readline() if ready else b""
    assert line, log_path.read_text()
    return process, json.loads(line)


def copy_fixture(target: Path) -> Path:
    shutil.copytree(FIXTURE, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


@pytest.fixture
def fixture_node(tmp_path):
    """Our controller on one copy of Kafka's log dir (it replays Kafka's metadata log) and a
    node on another, configured through a server.properties with Kafka's property names."""
    if not FIXTURE.is_dir():
        pytest.skip(f"the Kafka 3.7 fixture log dir is not beside this checkout ({FIXTURE})")
    processes = []
    try:
        controller, ready = start_process(
            [sys.executable, "-m", "controller", "--data-dir", str(copy_fixture(tmp_path / "controller")), "--port", "0"],
            tmp_path / "controller.log")
        processes.append(controller)
        properties = tmp_path / "server.properties"
        properties.write_text(
            f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={copy_fixture(tmp_path / 'node')}\n"
            f"controller.quorum.bootstrap.servers=127.0.0.1:{ready['port']}\nauto.create.topics.enable=false\n")
        node, ready = start_process([sys.executable, "-m", "node", str(properties)], tmp_path / "node.log")
        processes.append(node)
        yield f"127.0.0.1:{ready['port']}"
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_node_lists_kafka_topics_and_serves_their_records(fixture_node):
    consumer = KafkaConsumer(bootstrap_servers=fixture_node, consumer_timeout_ms=5000)
    try:
        assert "TestTopicPatient" in consumer.topics()
        consumer.assign([TopicPartition("TestTopicPatient", 0)])
        consumer.seek_to_beginning()
        records = list(consumer)
    finally:
        consumer.close()
    assert [r.offset for r in records] == [0, 1, 2]
    originals = (FIXTURE / "TestTopicPatient-0" / "00000000000000000000.log").read_bytes()
    for record in records:
        assert record.key is None
        assert record.value.lstrip().startswith(b"{") and record.value in originals
    assert [r.timestamp for r in records] == [1769792698283, 1769793423115, 1769793578165]
    assert b'"resourceType": "Bundle"' in records[2].value
