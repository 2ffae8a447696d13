"""DeleteRecords from confluent-kafka, kafka-python and KafkaJS: the log start moves on the leader and
its followers, readers start there, and it survives restarts; bad requests get Kafka's errors."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse

from cluster.formats.errors import ErrorCode
from cluster.launch import Cluster
from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.wire import exchange

MESSAGES = 200
SEGMENT_BYTES = 4096  # a few messages per segment, so that deletions remove whole segments


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("delete-records") / "kraftwerk") as running:
        yield running


def filled_topic(cluster, name: str, config: dict | None = None) -> list[bytes]:
    cluster.create_topic(name, partitions=1, replication_factor=3,
                         config={"segment.bytes": str(SEGMENT_BYTES), **(config or {})})
    values = [b"%04d" % i + b"." * 96 for i in range(MESSAGES)]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0, batch_size=1)
    for value in values:
        producer.send(name, value, partition=0)
    producer.flush(30)
    producer.close()
    assert cluster.wait_in_sync(name)
    return values


def replica_starts(cluster, topic: str) -> dict[int, tuple[int, int]]:
    """Per node: (log start offset, base offset of its first segment file) of topic-0."""
    starts = {}
    for node_id, state in cluster.replica_states().items():
        for partition in state["partitions"]:
            if partition["topic"] == topic:
                bases = sorted(int(p.stem) for p in (cluster.nodes[node_id].data_dir / f"{topic}-0").glob("*.log"))
                starts[node_id] = (partition["log_start_offset"], bases[0])
    return starts


def read_from_beginning(cluster, topic: str) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(topic, 0, -2)])
    low, high = consumer.get_watermark_offsets(ConfluentPartition(topic, 0), timeout=10)
    read = []
    while len(read) < high - low:
        message = consumer.poll(10)
        assert message is not None and not message.error(), message and message.error()
        read.append((message.offset(), message.value()))
    consumer.close()
    return read


def test_confluent_delete_records_moves_the_start_on_every_replica(cluster):
    values = filled_topic(cluster, "confluent-deleted")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.delete_records([ConfluentPartition("confluent-deleted", 0, 120)], request_timeout=30)
    result = futures[ConfluentPartition("confluent-deleted", 0, 120)].result()
    assert result.low_watermark == 120
    assert read_from_beginning(cluster, "confluent-deleted") == list(enumerate(values))[120:]
    starts = replica_starts(cluster, "confluent-deleted")
    assert sorted(starts) == [1, 2, 3]
    for log_start, first_base in starts.values():
        # Every segment wholly below the start is gone; the one holding it stays.
        assert log_start == 120 and 0 < first_base <= 120


def test_kafka_python_delete_records_to_the_high_watermark_empties_the_partition(cluster):
    filled_topic(cluster, "kafka-python-deleted")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        result = admin.delete_records({TopicPartition("kafka-python-deleted", 0): -1}, timeout_ms=30_000)
    finally:
        admin.close()
    assert result[TopicPartition("kafka-python-deleted", 0)]["low_watermark"] == MESSAGES
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "x"})
    assert consumer.get_watermark_offsets(ConfluentPartition("kafka-python-deleted", 0), timeout=10) == (MESSAGES,
                                                                                                        MESSAGES)
    consumer.close()
    assert {start for start, _ in replica_starts(cluster, "kafka-python-deleted").values()} == {MESSAGES}


@pytest.mark.skipif(kafkajs_missing() is not None, reason=kafkajs_missing() or "")
def test_kafkajs_delete_topic_records(cluster):
    values = filled_topic(cluster, "kafkajs-deleted")
    done = subprocess.run(["node", str(JS_DIR / "delete_records.js"), cluster.bootstrap_servers, "kafkajs-deleted",
                           "0", "77"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"partition": 0, "low": 77, "high": MESSAGES}]
    assert read_from_beginning(cluster, "kafkajs-deleted") == list(enumerate(values))[77:]


def test_the_start_survives_restarts_and_reaches_a_follower_that_was_down(cluster):
    values = filled_topic(cluster, "restarted-deleted")
    leader = next(p for t in cluster.status()["topics"] if t["name"] == "restarted-deleted"
                  for p in t["partitions"])["leader"]
    follower = next(n for n in sorted(cluster.nodes) if n != leader)
    cluster.kill_node(follower)
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        tp = ConfluentPartition("restarted-deleted", 0, 90)
        # A replica on a node that is down does not hold the answer back (Kafka's low watermark).
        assert admin.delete_records([tp], request_timeout=30)[tp].result().low_watermark == 90
    finally:
        cluster.restart_node(follower)
    assert cluster.wait_in_sync("restarted-deleted")
    cluster.kill_node(leader)
    cluster.restart_node(leader)
    assert cluster.wait_in_sync("restarted-deleted")
    starts = replica_starts(cluster, "restarted-deleted")
    assert {start for start, _ in starts.values()} == {90}, (starts, leader, follower)
    assert read_from_beginning(cluster, "restarted-deleted") == list(enumerate(values))[90:]


def leader_socket(cluster, topic: str, leader: bool = True) -> socket.socket:
    state = next(p for t in cluster.status()["topics"] if t["name"] == topic for p in t["partitions"])
    node_id = state["leader"] if leader else next(r for r in state["replicas"] if r != state["leader"])
    return socket.create_connection((cluster.host, cluster.nodes[node_id].port), timeout=30)


def delete_records(sock, topic: str, offset: int, version: int = 2, partition: int = 0) -> tuple[int, int]:
    Topic = DeleteRecordsRequest[version].DeleteRecordsTopic
    request = DeleteRecordsRequest[version](topics=[Topic(name=topic, partitions=[
        Topic.DeleteRecordsPartition(partition_index=partition, offset=offset)])], timeout_ms=10_000)
    response = exchange(sock, request, DeleteRecordsResponse, version)
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.low_watermark


@pytest.mark.parametrize("version", [0, 1, 2])
def test_bad_requests_get_kafkas_errors_and_change_nothing(cluster, version):
    topic = f"refused-deletes-v{version}"
    filled_topic(cluster, topic)
    cluster.create_topic(f"{topic}-compacted", partitions=1, replication_factor=3,
                         config={"cleanup.policy": "compact"})
    with leader_socket(cluster, topic) as sock:
        assert delete_records(sock, topic, MESSAGES + 1, version) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
        assert delete_records(sock, topic, -2, version) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
        assert delete_records(sock, "no-such-topic", 1, version) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert delete_records(sock, topic, 1, version, partition=5) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
        assert delete_records(sock, "__consumer_offsets", 0, version) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    with leader_socket(cluster, f"{topic}-compacted") as sock:
        assert delete_records(sock, f"{topic}-compacted", 0, version) == (ErrorCode.POLICY_VIOLATION, -1)
    with leader_socket(cluster, topic, leader=False) as sock:
        assert delete_records(sock, topic, 1, version) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    assert {start for start, _ in replica_starts(cluster, topic).values()} == {0}
    with leader_socket(cluster, topic) as sock:
        assert delete_records(sock, topic, 10, version) == (ErrorCode.NONE, 10)
        assert delete_records(sock, topic, 5, version) == (ErrorCode.NONE, 10)  # never moves back


def test_a_fetch_below_the_start_is_out_of_range(cluster):
    filled_topic(cluster, "fetched-below")
    with leader_socket(cluster, "fetched-below") as sock:
        assert delete_records(sock, "fetched-below", 50) == (ErrorCode.NONE, 50)
        Topic = FetchRequest[11].FetchTopic
        request = FetchRequest[11](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                   session_id=0, session_epoch=-1, topics=[Topic(topic="fetched-below", partitions=[
                                       Topic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=49,
                                                            last_fetched_epoch=-1, log_start_offset=-1,
                                                            partition_max_bytes=1 << 20)])],
                                   forgotten_topics_data=[], rack_id="")
        answer = exchange(sock, request, FetchResponse, 11).responses[0].partitions[0]
    assert (answer.error_code, answer.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 50)


def kraftwerk(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args, "--data-dir", str(cluster.data_dir)],
                          capture_output=True, text=True, timeout=60)


def test_the_cli_deletes_records_of_every_partition_or_one(cluster):
    cluster.create_topic("cli-deleted", partitions=2, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(20):
        producer.send("cli-deleted", b"%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    done = kraftwerk(cluster, "topic", "delete-records", "cli-deleted", "--partition", "1", "--before", "4")
    assert (done.returncode, done.stdout, done.stderr) == (0, "cli-deleted-1: records before offset 4 deleted\n", "")
    done = kraftwerk(cluster, "topic", "delete-records", "cli-deleted", "--before", "-1")
    assert (done.returncode, done.stdout) == (0, "cli-deleted-0: records before offset 10 deleted\n"
                                                 "cli-deleted-1: records before offset 10 deleted\n")
    refused = kraftwerk(cluster, "topic", "delete-records", "cli-deleted", "--partition", "0", "--before", "11")
    assert (refused.returncode, refused.stderr) == (1, (
        "Error: topic 'cli-deleted' partition 0: cannot delete before offset 11: The requested offset is outside "
        "the range of offsets maintained by the server for the given topic/partition. (OFFSET_OUT_OF_RANGE)\n"))
    missing = kraftwerk(cluster, "topic", "delete-records", "no-such-topic", "--before", "1")
    assert (missing.returncode, missing.stderr) == (1, "Error: topic 'no-such-topic' does not exist.\n")


def log_bytes(cluster, node_id: int, topic: str) -> int:
    return sum(p.stat().st_size for p in (cluster.nodes[node_id].data_dir / f"{topic}-0").glob("*.log"))


def test_log_dirs_describe_each_replicas_size_before_and_after_a_deletion(cluster):
    filled_topic(cluster, "described-sizes")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        def sizes() -> dict[int, int]:
            found = {}
            for answer in admin.describe_log_dirs(["described-sizes"]):
                (log_dir,) = answer["log_dirs"]
                assert log_dir["error_code"] == 0
                assert log_dir["log_dir"] == str(cluster.nodes[answer["broker"]].data_dir)
                for topic in log_dir["topics"]:
                    assert topic["name"] == "described-sizes"
                    found.update({answer["broker"]: p["partition_size"] for p in topic["partitions"]})
            return found

        before = sizes()
        assert before == {n: log_bytes(cluster, n, "described-sizes") for n in (1, 2, 3)}
        admin.delete_records({TopicPartition("described-sizes", 0): 150}, timeout_ms=30_000)
        after = sizes()
    finally:
        admin.close()
    assert after == {n: log_bytes(cluster, n, "described-sizes") for n in (1, 2, 3)}
    assert all(after[n] < before[n] for n in (1, 2, 3))
    described = kraftwerk(cluster, "topic", "describe", "described-sizes", "--sizes", "--json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["partitions"][0]["sizes"] == {str(n): after[n] for n in (1, 2, 3)}
