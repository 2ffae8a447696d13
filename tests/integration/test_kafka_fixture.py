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


@pytest.fixture
def fixture_node(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"the Kafka 3.7 fixture log dir is not beside this checkout ({FIXTURE})")
    log_dir = tmp_path / "logs"
    shutil.copytree(FIXTURE, log_dir)
    for path in log_dir.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    properties = tmp_path / "server.properties"
    # Kafka's own property names; no controller: the node serves its local metadata log.
    properties.write_text(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={log_dir}\n"
                          "auto.create.topics.enable=false\n")
    process = subprocess.Popen([sys.executable, "-m", "node", str(properties)], stdout=subprocess.PIPE,
                               stderr=open(tmp_path / "node.log", "wb"), start_new_session=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, (tmp_path / "node.log").read_text()
        line = process.stdout.readline()
        assert line, (tmp_path / "node.log").read_text()
        yield f"127.0.0.1:{json.loads(line)['port']}"
    finally:
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
