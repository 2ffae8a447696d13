"""Old Go clients that are still widely deployed — Sarama 1.22 and segmentio kafka-go 0.2.1,
as Debian bookworm packages them — against a 3-node cluster: what they write is read back
exactly (by them and by kafka-python), and consumer groups commit offsets that a second
run resumes from, no message twice and none missed.

Sarama speaks the protocol of the Kafka version its config names: its default (0.8.2)
produces magic-0 message sets with Produce v0 and fetches with Fetch v0, 0.10.2 uses magic 1
with Produce v2 and Fetch v3, 2.0 record batches; its ConsumerGroup commits with
OffsetCommit v1. kafka-go 0.2.1 creates topics with CreateTopics v0, produces with Produce v2
(magic 1), fetches with Fetch v2 and commits with OffsetCommit v2. Compressed message sets
and message timestamps are checked too.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from tests.integration import go_programs
from tests.integration.observe import committed, logged_errors

PARTITIONS = 3
# Recent enough that time-based retention keeps the messages, fixed so that tests know them.
TIMESTAMP_BASE = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def go_bin():
    with go_programs.built() as binaries:
        yield binaries


@pytest.fixture(scope="module")
def shared_cluster(go_bin, tmp_path_factory):
    from cluster.launch import Cluster

    # A data dir of our own outlives stop(), so the logs are read to the end of the shutdown.
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster
    logged = logged_errors(cluster)
    assert logged == {name: [] for name in logged}, "errors logged while serving these clients"


def new_topic(cluster, prefix: str) -> str:
    """A 3-partition topic with 3 replicas: with 3 nodes each partition has its own leader."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    assert len(set(leaders(cluster, name))) == PARTITIONS
    return name


def leaders(cluster, topic: str) -> list[int]:
    [described] = [t for t in cluster.status()["topics"] if t["name"] == topic]
    return [p["leader"] for p in sorted(described["partitions"], key=lambda p: p["partition"])]


def read_back(cluster, topic: str) -> tuple[dict[tuple[int, int], tuple[str, str]], dict[tuple[int, int], int]]:
    """Every message of the topic as kafka-python reads it: (partition, offset) -> (key, value),
    and (partition, offset) -> timestamp."""
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False)
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(partitions)
        found, timestamps = {}, {}
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    found[(r.partition, r.offset)] = (r.key.decode(), r.value.decode())
                    timestamps[(r.partition, r.offset)] = r.timestamp
        return found, timestamps
    finally:
        consumer.close()


def produce_numbered(cluster, topic: str, per_partition: int) -> dict[tuple[int, int], tuple[str, str]]:
    """per_partition messages in each partition, written by kafka-python: their known positions."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        expected = {}
        for i in range(per_partition * PARTITIONS):
            key, value = f"key-{i}", f"value {i}"
            sent = producer.send(topic, key=key.encode(), value=value.encode(), partition=i % PARTITIONS).get(30)
            expected[(sent.partition, sent.offset)] = (key, value)
        return expected
    finally:
        producer.close()


def messages_of(lines: list[dict]) -> dict[tuple[int, int], tuple[str, str]]:
    """The consumed messages of a program's output, checked to hold no message twice."""
    consumed = [line for line in lines if "offset" in line]
    positions = Counter((line["partition"], line["offset"]) for line in consumed)
    assert [p for p, n in positions.items() if n > 1] == [], "a message was consumed twice"
    return {(line["partition"], line["offset"]): (line["key"], line["value"]) for line in consumed}


def topic_config(cluster, topic: str, name: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return described["topic"][topic][name]["value"]
    finally:
        admin.close()


def timestamps_of(lines: list[dict]) -> dict[tuple[int, int], int]:
    return {(line["partition"], line["offset"]): line["timestamp"] for line in lines if "offset" in line}


def expected_timestamps(messages: dict[tuple[int, int], tuple[str, str]], base: int) -> dict[tuple[int, int], int]:
    """base + i for the message whose key ends in -i, as the Go producers stamp them."""
    return {position: base + int(key.rsplit("-", 1)[1]) for position, (key, _) in messages.items()}


def assert_prefix_per_partition(consumed: dict, committed: dict[int, int]) -> None:
    """Each partition was consumed from its start without a gap, and the commit points right after."""
    by_partition = defaultdict(list)
    for partition, offset in consumed:
        by_partition[partition].append(offset)
    for partition in range(PARTITIONS):
        offsets = sorted(by_partition[partition])
        assert offsets == list(range(len(offsets))), f"partition {partition} consumed with a gap: {offsets}"
        if offsets:
            assert committed.get(partition) == len(offsets), (partition, committed)


@pytest.mark.parametrize("version, compression", [
    ("", "none"), ("", "gzip"), ("0.10.2.0", "none"), ("0.10.2.0", "snappy"), ("0.10.2.0", "lz4"), ("2.0.0", "none"),
], ids=["default-0.8.2", "default-0.8.2-gzip", "0.10.2", "0.10.2-snappy", "0.10.2-lz4", "2.0"])
def test_sarama_sync_producer_writes_where_it_was_told(shared_cluster, go_bin, version, compression):
    topic = new_topic(shared_cluster, "sarama-produce")
    lines = go_programs.run(go_bin["sarama-produce"], "-brokers", shared_cluster.bootstrap_servers,
                            "-topic", topic, "-version", version, "-compression", compression,
                            "-count", "60", "-prefix", "sarama", "-timestamp-base", str(TIMESTAMP_BASE))
    delivered = {(line["partition"], line["offset"]): (line["key"], line["value"]) for line in lines}
    assert sorted(v for v in delivered.values()) == sorted((f"sarama-key-{i}", f"sarama value {i}") for i in range(60))
    assert len(delivered) == 60, "two messages acknowledged at one offset"
    assert len({p for p, _ in delivered}) == PARTITIONS, "the hash partitioner spread 60 keys over every partition"
    stored, timestamps = read_back(shared_cluster, topic)
    assert stored == delivered
    # Magic 0 has no timestamp: Kafka stores such messages with none (-1).
    stamped = {p: -1 for p in delivered} if version == "" else expected_timestamps(delivered, TIMESTAMP_BASE)
    assert timestamps == stamped
    # Sarama at the same version reads them back too (Fetch v0, v3 or v4), in offset order.
    lines = go_programs.run(go_bin["sarama-consume"], "-brokers", shared_cluster.bootstrap_servers,
                            "-topic", topic, "-version", version, "-messages", "60")
    assert messages_of(lines) == delivered
    assert timestamps_of(lines) == stamped
    for partition in range(PARTITIONS):
        offsets = [line["offset"] for line in lines if line["partition"] == partition]
        assert offsets == sorted(offsets)


@pytest.mark.parametrize("version", ["0.10.2.0", "2.0.0"], ids=["0.10.2", "2.0"])
def test_sarama_consumer_group_resumes_after_its_committed_offsets(shared_cluster, go_bin, version):
    topic = new_topic(shared_cluster, "sarama-group")
    expected = produce_numbered(shared_cluster, topic, per_partition=30)
    group = f"sarama-{uuid.uuid4().hex[:8]}"
    args = ("-brokers", shared_cluster.bootstrap_servers, "-topic", topic, "-group", group, "-version", version)

    first_lines = go_programs.run(go_bin["sarama-group"], *args, "-messages", "40")
    assert [line for line in first_lines if "error" in line] == []
    first = messages_of(first_lines)
    assert len(first) == 40
    assert_prefix_per_partition(first, committed(shared_cluster, group))

    second_lines = go_programs.run(go_bin["sarama-group"], *args, "-messages", str(len(expected) - 40))
    assert [line for line in second_lines if "error" in line] == []
    second = messages_of(second_lines)
    assert set(first) & set(second) == set(), "the second run read messages the first had committed"
    assert {**first, **second} == expected
    assert committed(shared_cluster, group) == {p: 30 for p in range(PARTITIONS)}


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
def test_kafka_go_creates_writes_and_reads_each_partition(shared_cluster, go_bin, compression):
    topic = f"kafka-go-{uuid.uuid4().hex[:8]}"
    first_node = shared_cluster.bootstrap_servers.split(",")[0]
    assert go_programs.run(go_bin["kafkago-create-topic"], "-broker", first_node, "-topic", topic,
                           "-partitions", str(PARTITIONS), "-replication-factor", "3",
                           "-config", "retention.ms=86400000") == [{"created": topic}]
    [created] = [t for t in shared_cluster.status()["topics"] if t["name"] == topic]
    assert [len(p["replicas"]) for p in created["partitions"]] == [3] * PARTITIONS
    assert len(set(leaders(shared_cluster, topic))) == PARTITIONS
    assert topic_config(shared_cluster, topic, "retention.ms") == "86400000"

    assert go_programs.run(go_bin["kafkago-produce"], "-brokers", shared_cluster.bootstrap_servers,
                           "-topic", topic, "-count", "60", "-prefix", "kafka-go", "-compression", compression,
                           "-timestamp-base", str(TIMESTAMP_BASE)) == [{"written": 60}]
    stored, timestamps = read_back(shared_cluster, topic)
    assert sorted(stored.values()) == sorted((f"kafka-go-key-{i}", f"kafka-go value {i}") for i in range(60))
    per_partition = Counter(p for p, _ in stored)
    for partition in range(PARTITIONS):
        # Offsets are dense from 0: magic-1 message sets got one offset per message.
        assert sorted(o for p, o in stored if p == partition) == list(range(per_partition[partition]))
    assert timestamps == expected_timestamps(stored, TIMESTAMP_BASE)

    read, read_timestamps = {}, {}
    for partition, count in per_partition.items():
        lines = go_programs.run(go_bin["kafkago-consume"], "-brokers", shared_cluster.bootstrap_servers,
                                "-topic", topic, "-partition", str(partition), "-messages", str(count))
        read.update(messages_of(lines))
        read_timestamps.update(timestamps_of(lines))
    assert read == stored
    assert read_timestamps == timestamps


def test_kafka_go_reader_group_resumes_after_its_committed_offsets(shared_cluster, go_bin):
    topic = new_topic(shared_cluster, "kafka-go-group")
    expected = produce_numbered(shared_cluster, topic, per_partition=20)
    group = f"kafka-go-{uuid.uuid4().hex[:8]}"
    args = ("-brokers", shared_cluster.bootstrap_servers, "-topic", topic, "-group", group)

    first = messages_of(go_programs.run(go_bin["kafkago-consume"], *args, "-messages", "25"))
    assert len(first) == 25
    assert_prefix_per_partition(first, committed(shared_cluster, group))

    second = messages_of(go_programs.run(go_bin["kafkago-consume"], *args, "-messages", str(len(expected) - 25)))
    assert set(first) & set(second) == set(), "the second run read messages the first had committed"
    assert {**first, **second} == expected
    assert committed(shared_cluster, group) == {p: 20 for p in range(PARTITIONS)}

