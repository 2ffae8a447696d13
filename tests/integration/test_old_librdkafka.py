"""librdkafka told its brokers are old: `api.version.request=false` with a `broker.version.fallback`.

Such a client never asks for ApiVersions and speaks the fallback release's protocol: 0.9.0
means Metadata v0, Produce v1, Fetch v1, ListOffsets v0 and the v0 group APIs; 0.8.2 means
Produce v0 and Fetch v0 and no group membership (librdkafka has no JoinGroup for it, so its
consumers assign partitions themselves). A fallback of 0.10.0 or later makes librdkafka ask
for ApiVersions anyway, so that client is a modern one.

librdkafka parses Metadata v0 into a scratch buffer sized at four times the response, which
its structs outgrow on a short-named topic entry without partitions: "tmpabuf memory
shortage". Kafka sends such entries for unknown topics, invalid names and topics it is still
auto-creating; the node sends the same bytes for the first two (so no client test asks for
them) and answers an auto-created topic once it exists, with its partitions.
"""
from __future__ import annotations

import logging
import socket
import struct
import uuid

import pytest

from tests.integration.wire import exchange_once, recv_exactly, send_request

PARTITIONS = 6
COUNT = 60
INVALID_TOPIC_EXCEPTION = 17
FALLBACKS = ["0.9.0", "0.10.0"]


@pytest.fixture(scope="module")
def three_nodes():
    from cluster.launch import Cluster

    with Cluster(nodes=3) as cluster:
        yield cluster


class ClientLog(logging.Handler):
    """What librdkafka logs, kept to check which request versions it sent and that it parsed every reply."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"librdkafka.{uuid.uuid4().hex[:8]}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def sent(self, request: str) -> set[str]:
        """Versions of `request` sent, e.g. {"v0"} for "Metadata"."""
        marker = f"Sent {request}Request ("
        return {line.split(marker, 1)[1].split(",", 1)[0] for line in self.lines if marker in line}

    def parse_failures(self) -> list[str]:
        return [line for line in self.lines if "parse failure" in line or "tmpabuf" in line]


def old_client_config(cluster, fallback: str, log: ClientLog) -> dict:
    return {"bootstrap.servers": cluster.bootstrap_servers, "api.version.request": False,
            "broker.version.fallback": fallback, "debug": "protocol", "logger": log.logger}


def new_topic(cluster, partitions: int = PARTITIONS) -> str:
    topic = f"old-rdkafka-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=2)
    return topic


def partition_leaders(cluster, topic: str) -> set[int]:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    request = MetadataRequest[0](topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    return {p.leader_id for p in exchange_once((host, int(port)), request, MetadataResponse, 0).topics[0].partitions}


def produce(config: dict, topic: str, count: int = COUNT) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) of every acknowledged message -> (key, value)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer(dict(config, acks="all"))
    acknowledged, failed = {}, []

    def delivered(error, message):
        if error is not None:
            failed.append(error)
        else:
            acknowledged[(message.partition(), message.offset())] = (message.key(), message.value())

    for i in range(count):
        producer.produce(topic, key=b"key-%d" % i, value=b"value %d " % i * (1 + i % 4), on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failed == []
    return acknowledged


def consume(consumer, count: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> (key, value) of what the consumer reads until count arrived (or some 30 s)."""
    read = {}
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                position = (message.partition(), message.offset())
                assert position not in read, f"{position} read twice"
                read[position] = (message.key(), message.value())
            if len(read) >= count:
                break
    finally:
        consumer.close()
    return read


def assert_dense_offsets(acknowledged) -> None:
    used = {partition for partition, _ in acknowledged}
    assert used == set(range(PARTITIONS)), f"keys should spread over all partitions, got {sorted(used)}"
    for partition in used:
        offsets = sorted(o for p, o in acknowledged if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} offsets are not dense from 0"


@pytest.mark.parametrize("fallback", FALLBACKS)
def test_group_consumer_reads_back_exactly_what_the_producer_wrote(three_nodes, fallback):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = new_topic(three_nodes)
    assert len(partition_leaders(three_nodes, topic)) > 1, "leaders should be on several nodes"
    log = ClientLog()
    config = old_client_config(three_nodes, fallback, log)
    acknowledged = produce(config, topic)
    assert len(acknowledged) == COUNT
    assert_dense_offsets(acknowledged)
    consumer = confluent_kafka.Consumer(dict(config, **{
        "group.id": f"old-rdkafka-{fallback}-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    assert consume(consumer, COUNT) == acknowledged
    assert log.parse_failures() == []
    if fallback == "0.9.0":
        assert (log.sent("Metadata"), log.sent("Produce"), log.sent("Fetch")) == ({"v0"}, {"v1"}, {"v1"})
        assert log.sent("ApiVersion") == set()
    else:  # 0.10 and later brokers answer ApiVersions, so librdkafka asks whatever it was told
        assert log.sent("ApiVersion")


def test_0_8_2_producer_and_assigning_consumer_read_back_exactly(three_nodes):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = new_topic(three_nodes)
    log = ClientLog()
    config = old_client_config(three_nodes, "0.8.2", log)
    acknowledged = produce(config, topic)
    assert len(acknowledged) == COUNT
    assert_dense_offsets(acknowledged)
    # 0.8.2 had no group membership: the consumer assigns itself every partition.
    consumer = confluent_kafka.Consumer(dict(config, **{"group.id": "old-rdkafka-0.8.2", "enable.auto.commit": False}))
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    assert consume(consumer, COUNT) == acknowledged
    assert log.parse_failures() == []
    assert (log.sent("Metadata"), log.sent("Produce"), log.sent("Fetch")) == ({"v0"}, {"v0"}, {"v0"})


@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])
def test_producing_to_a_topic_not_yet_created_auto_creates_it(three_nodes, fallback):
    # Metadata v0 cannot refuse auto-creation; the node answers once the topic exists, with its
    # partitions, which librdkafka's v0 parser has room for.
    topic = f"old-rdkafka-auto-{uuid.uuid4().hex[:8]}"
    log = ClientLog()
    acknowledged = produce(old_client_config(three_nodes, fallback, log), topic, count=5)
    assert acknowledged == {(0, i): (b"key-%d" % i, b"value %d " % i * (1 + i % 4)) for i in range(5)}
    assert log.parse_failures() == []


def kafka_metadata_v0(brokers, topics) -> bytes:
    """Kafka's MetadataResponse v0 body: brokers (node_id, host, port), topics (error_code, name,
    partitions (error_code, partition_index, leader_id, replica_nodes, isr_nodes)), nothing else."""
    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    def int32s(values) -> bytes:
        return struct.pack(f">i{len(values)}i", len(values), *values)

    out = struct.pack(">i", len(brokers)) + b"".join(
        struct.pack(">i", node) + string(host) + struct.pack(">i", port) for node, host, port in brokers)
    out += struct.pack(">i", len(topics))
    for error, name, partitions in topics:
        out += struct.pack(">h", error) + string(name) + struct.pack(">i", len(partitions))
        for p_error, index, leader, replicas, isr in partitions:
            out += struct.pack(">hii", p_error, index, leader) + int32s(replicas) + int32s(isr)
    return out


def test_metadata_v0_has_exactly_kafkas_layout(three_nodes):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    topic = new_topic(three_nodes, partitions=3)
    host, port = three_nodes.bootstrap_servers.split(",")[0].rsplit(":", 1)
    modern = exchange_once((host, int(port)), MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(
        name=topic)]), MetadataResponse, 1)
    partitions = [(p.error_code, p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
                  for p in sorted(modern.topics[0].partitions, key=lambda p: p.partition_index)]
    brokers = [(b.node_id, b.host, b.port) for b in modern.brokers]
    # An invalid name is neither created nor described: an entry without partitions, as Kafka sends it.
    expected = kafka_metadata_v0(brokers, [(0, topic, partitions), (INVALID_TOPIC_EXCEPTION, "bad name!", [])])
    request = MetadataRequest[0](topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in (topic, "bad name!")])
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        send_request(sock, request, 0, correlation_id=11)
        body = recv_exactly(sock, struct.unpack(">i", recv_exactly(sock, 4))[0])
    assert body == struct.pack(">i", 11) + expected
