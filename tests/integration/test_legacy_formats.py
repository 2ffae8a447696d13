"""Message formats v0 and v1: Produce v0-2 and Fetch v0-3 as Kafka 3.9 serves them.

Old clients (kafka-python pinned to 0.9 / 0.10.0 / 0.10.1) write legacy message sets that
modern consumers read back exactly, and read modern producers' batches down-converted;
raw requests check the exact fields of each old version and what bad legacy input gets.
"""
from __future__ import annotations

import socket
import struct
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record import MemoryRecords

from cluster.formats import compression
from cluster.formats.message_sets import MAX_DECOMPRESSED_BYTES, decode_message, encode_message, frame_messages
from cluster.formats.records import (
    ATTR_TIMESTAMP_TYPE, ATTRIBUTES_OFFSET, HEADER_SIZE, compute_crc, encode_batch, iter_batch_headers,
)
from tests.integration.wire import exchange

CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
UNSUPPORTED_COMPRESSION_TYPE = 76
OLD_KAFKA_PYTHON = [(0, 9), (0, 10, 0), (0, 10, 1)]
CODECS = [None, "gzip", "snappy", "lz4"]
CODEC_IDS = {None: 0, "gzip": compression.GZIP, "snappy": compression.SNAPPY, "lz4": compression.LZ4}
T0 = 1_790_000_000_000


@pytest.fixture(scope="module")
def two_nodes():
    from cluster.launch import Cluster

    with Cluster(nodes=2) as cluster:
        yield cluster


def new_topic(cluster, prefix: str, **config) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=2, config=config or None)
    return topic


def leader_address(cluster, topic: str) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        metadata = exchange(sock, MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                            MetadataResponse, 1)
    leader = metadata.topics[0].partitions[0].leader_id
    broker = next(b for b in metadata.brokers if b.node_id == leader)
    return broker.host, broker.port


def stored_batches(cluster, topic: str) -> list:
    """Headers of the magic-2 batches the leader stores, read with a modern Fetch."""
    Topic = FetchRequest.FetchTopic
    request = FetchRequest[12](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[Topic(topic=topic, partitions=[
            Topic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                 log_start_offset=-1, last_fetched_epoch=-1)])])
    with socket.create_connection(leader_address(cluster, topic), timeout=10) as sock:
        records = exchange(sock, request, FetchResponse, 12).responses[0].partitions[0].records
    return [header for _, header in iter_batch_headers(records)]


# --- real clients ---

def poll_until(count: int, poll_once, close) -> list:
    """What repeated polls return until count items have arrived (or some 20 s have passed)."""
    found = []
    try:
        for _ in range(40):
            found += poll_once()
            if len(found) >= count:
                break
    finally:
        close()
    return found


def read_with_confluent_kafka(bootstrap: str, topic: str, count: int) -> list[tuple]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "legacy-unused",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])

    def poll_once():
        messages = consumer.consume(num_messages=100, timeout=0.5)
        assert all(m.error() is None for m in messages), [m.error() for m in messages]
        return [(m.offset(), m.key(), m.value(), m.timestamp()[1]) for m in messages]
    return poll_until(count, poll_once, consumer.close)


@pytest.mark.parametrize("api_version", OLD_KAFKA_PYTHON, ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_producers_are_read_back_exactly_by_confluent_kafka(two_nodes, api_version):
    topic = new_topic(two_nodes, "legacy-in")
    magic = 0 if api_version == (0, 9) else 1
    # kafka-python writes magic-0 lz4 only with the xxhash package, which is not a test dependency
    codecs = [c for c in CODECS if not (magic == 0 and c == "lz4")]
    sent = []
    for codec in codecs:  # one message set of three messages per codec
        producer = KafkaProducer(bootstrap_servers=two_nodes.bootstrap_servers, api_version=api_version, acks="all",
                                 compression_type=codec, linger_ms=20)
        messages = [(b"key-%d" % i, f"{codec}-{i}".encode(), T0 + len(sent) + i) for i in range(3)]
        futures = [producer.send(topic, key=k, value=v, partition=0, timestamp_ms=t) for k, v, t in messages]
        producer.flush()
        sent += [(f.get(10).offset, k, v, t if magic else -1) for f, (k, v, t) in zip(futures, messages)]
        producer.close()
    assert [offset for offset, *_ in sent] == list(range(len(sent)))
    assert read_with_confluent_kafka(two_nodes.bootstrap_servers, topic, len(sent)) == sent
    # One magic-2 batch per message set, compressed with the codec its wrapper had.
    assert [(h.magic, h.compression, h.record_count) for h in stored_batches(two_nodes, topic)] == \
        [(2, CODEC_IDS[codec], 3) for codec in codecs]


def produce_with_confluent_kafka(bootstrap: str, topic: str, codec: str, first: int, count: int) -> list[tuple]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec,
                                         "linger.ms": 20})
    messages = [(b"key-%d" % i, b"value-%d-" % i + b"x" * 40, T0 + i) for i in range(first, first + count)]
    for key, value, timestamp in messages:
        producer.produce(topic, key=key, value=value, partition=0, timestamp=timestamp,
                         headers=[("trace", b"t-" + key)])
    assert producer.flush(30) == 0
    return messages


def read_with_old_kafka_python(bootstrap: str, topic: str, api_version, count: int, **settings) -> list:
    # Old consumers find their start by offset: ListOffsets v0, which a 0.9 consumer would use
    # for seek_to_beginning, is not served, so the test seeks to offset 0 itself.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=None,
                             enable_auto_commit=False, **settings)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    return poll_until(count, lambda: [r for records in consumer.poll(500).values() for r in records], consumer.close)


@pytest.mark.parametrize("api_version", OLD_KAFKA_PYTHON, ids=lambda v: ".".join(map(str, v)))
def test_modern_producers_batches_are_read_by_old_kafka_python_consumers(two_nodes, api_version):
    topic = new_topic(two_nodes, "legacy-out")
    codecs = ["none", "gzip", "snappy"] + ([] if api_version == (0, 9) else ["lz4"])
    messages = []
    for codec in codecs:  # several batches of each
        messages += produce_with_confluent_kafka(two_nodes.bootstrap_servers, topic, codec, len(messages), 7)
    assert len(stored_batches(two_nodes, topic)) >= len(codecs)
    for settings in ({}, {"max_partition_fetch_bytes": 300}):  # all in one fetch, or a batch or so per fetch
        read = read_with_old_kafka_python(two_nodes.bootstrap_servers, topic, api_version, len(messages), **settings)
        assert [(r.offset, r.key, r.value) for r in read] == [(i, k, v) for i, (k, v, _) in enumerate(messages)]
        assert all(r.headers == [] for r in read)  # legacy messages have no headers
        expected_timestamps = [None] * len(messages) if api_version == (0, 9) else [t for _, _, t in messages]
        assert [r.timestamp for r in read] == expected_timestamps


# --- the wire, version by version ---

def produce(address, topic: str, records: bytes, version: int, acks: int = -1):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](acks=acks, timeout_ms=5000, transactional_id=None, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=records)])])
    with socket.create_connection(address, timeout=10) as sock:
        response = exchange(sock, request, ProduceResponse, version)
    return response.responses[0].partition_responses[0]


def fetch(address, topic: str, version: int, offset: int = 0, partition_max_bytes: int = 1 << 20,
          max_bytes: int = 1 << 20):
    Topic = FetchRequest.FetchTopic
    request = FetchRequest[version](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, topics=[
        Topic(topic=topic, partitions=[Topic.FetchPartition(partition=0, fetch_offset=offset,
                                                            partition_max_bytes=partition_max_bytes)])])
    with socket.create_connection(address, timeout=10) as sock:
        return exchange(sock, request, FetchResponse, version).responses[0].partitions[0]


def messages_of(message_set: bytes) -> list:
    return [decode_message(message_set, pos, size) for pos, size, _ in frame_messages(message_set)]


def legacy_message_set(magic: int, values: list[bytes], timestamp: int = T0, attributes: int = 0) -> bytes:
    return b"".join(encode_message(i, magic, attributes, timestamp + i, b"k", v) for i, v in enumerate(values))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_answer_in_their_own_layout(two_nodes, version):
    topic = new_topic(two_nodes, f"produce-v{version}")
    leader = leader_address(two_nodes, topic)
    first = produce(leader, topic, legacy_message_set(0, [b"a", b"b"]), version)
    second = produce(leader, topic, legacy_message_set(1, [b"c"]), version)
    assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 2)
    if version == 2:
        assert first.log_append_time_ms == -1  # a CreateTime topic
    partition = fetch(leader, topic, 3)
    assert [(m.offset, m.magic, m.timestamp, m.value) for m in messages_of(partition.records)] == [
        (0, 1, -1, b"a"), (1, 1, -1, b"b"), (2, 1, T0, b"c")]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_convert_to_their_magic(two_nodes, version):
    topic = new_topic(two_nodes, f"fetch-v{version}")
    leader = leader_address(two_nodes, topic)
    plain = encode_batch([(b"k0", b"v0"), (None, b"v1")], timestamp=T0, headers=[("h", b"dropped")])
    assert produce(leader, topic, plain, 9).base_offset == 0
    gzip = legacy_message_set(1, [b"v2", b"v3"])
    wrapped = encode_message(1, 1, compression.GZIP, 0, None, compression.compress(compression.GZIP, gzip))
    assert produce(leader, topic, wrapped, 2).base_offset == 2
    magic = 0 if version <= 1 else 1
    partition = fetch(leader, topic, version, offset=1)
    assert (partition.error_code, partition.high_watermark) == (0, 4)
    outer = messages_of(partition.records)
    # The uncompressed batch starts at the fetch offset; the compressed one comes whole, as one wrapper.
    assert [(m.offset, m.magic, m.codec, m.timestamp) for m in outer] == [
        (1, magic, 0, T0 if magic else -1), (3, magic, compression.GZIP, T0 + 1 if magic else -1)]
    records = MemoryRecords(partition.records)
    read = []
    while records.has_next():
        read += [(r.offset, r.key, r.value) for r in records.next_batch()]
    assert read == [(1, None, b"v1"), (2, b"k", b"v2"), (3, b"k", b"v3")]


def test_fetch_limits_on_down_converted_data_keep_at_least_one_message(two_nodes):
    topic = new_topic(two_nodes, "fetch-limits")
    leader = leader_address(two_nodes, topic)
    for i in range(3):
        produce(leader, topic, encode_batch([(None, b"%d" % i * 100)], timestamp=T0), 9)
    one = fetch(leader, topic, 1, partition_max_bytes=1)
    assert [m.offset for m in messages_of(one.records)] == [0]
    capped = fetch(leader, topic, 3, max_bytes=1)  # v3 adds the response-wide limit
    assert [m.offset for m in messages_of(capped.records)] == [0]
    every = fetch(leader, topic, 3)
    assert [m.offset for m in messages_of(every.records)] == [0, 1, 2]


def test_log_append_time_topics_stamp_legacy_messages(two_nodes):
    topic = new_topic(two_nodes, "append-time", **{"message.timestamp.type": "LogAppendTime"})
    leader = leader_address(two_nodes, topic)
    response = produce(leader, topic, legacy_message_set(1, [b"a", b"b"]), 2)
    assert response.error_code == 0 and response.log_append_time_ms > T0
    outer = messages_of(fetch(leader, topic, 2).records)
    assert [(m.timestamp, m.attributes & ATTR_TIMESTAMP_TYPE) for m in outer] == \
        [(response.log_append_time_ms, ATTR_TIMESTAMP_TYPE)] * 2


# --- bad legacy input ---

def test_bad_legacy_input_gets_kafkas_codes_and_the_node_keeps_serving(two_nodes):
    topic = new_topic(two_nodes, "legacy-bad")
    leader = leader_address(two_nodes, topic)
    good = legacy_message_set(1, [b"good"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert produce(leader, topic, bytes(corrupt), 2).error_code == CORRUPT_MESSAGE
    inner = bytearray(legacy_message_set(1, [b"inner"]))
    inner[-1] ^= 0xFF
    wrapped = encode_message(0, 1, compression.SNAPPY, 0, None, compression.compress(compression.SNAPPY, bytes(inner)))
    assert produce(leader, topic, wrapped, 1).error_code == CORRUPT_MESSAGE
    assert produce(leader, topic, legacy_message_set(0, [b"a"]) + good, 2).error_code == INVALID_RECORD
    # A set with no whole message appends nothing and is answered without error, as Kafka 3.9 does.
    nothing = produce(leader, topic, good[:-4], 0)
    assert (nothing.error_code, nothing.base_offset) == (0, -1)
    # A partial message after whole ones is dropped.
    kept = produce(leader, topic, good + good[:20], 0)
    assert (kept.error_code, kept.base_offset) == (0, 0)
    # Kafka 3.9 never refused magic 2 in Produce v0-2; one batch per partition still holds.
    batch = encode_batch([(None, b"magic 2")], timestamp=T0)
    assert (produce(leader, topic, batch, 2).error_code, produce(leader, topic, batch + batch, 2).error_code) == \
        (0, INVALID_RECORD)
    assert [m.value for m in messages_of(fetch(leader, topic, 2).records)] == [b"good", b"magic 2"]


def test_what_cannot_be_down_converted_gets_kafkas_codes(two_nodes):
    zstd = new_topic(two_nodes, "zstd-batches")
    producer = KafkaProducer(bootstrap_servers=two_nodes.bootstrap_servers, compression_type="zstd", acks="all")
    producer.send(zstd, b"squeezed" * 100, partition=0).get(10)
    producer.close()
    assert [h.compression for h in stored_batches(two_nodes, zstd)] == [compression.ZSTD]
    leader = leader_address(two_nodes, zstd)
    assert fetch(leader, zstd, 3).error_code == UNSUPPORTED_COMPRESSION_TYPE
    assert fetch(leader, zstd, 4).error_code == 0
    zstd_config = new_topic(two_nodes, "zstd-topic", **{"compression.type": "zstd"})
    assert fetch(leader_address(two_nodes, zstd_config), zstd_config, 1).error_code == UNSUPPORTED_COMPRESSION_TYPE
    disabled = new_topic(two_nodes, "no-down-conversion", **{"message.downconversion.enable": "false"})
    assert fetch(leader_address(two_nodes, disabled), disabled, 2).error_code == UNSUPPORTED_VERSION
    assert fetch(leader_address(two_nodes, disabled), disabled, 4).error_code == 0


def batch_around(body: bytes, codec: int) -> bytes:
    """A valid magic-2 batch header (one record) around any records section."""
    batch = bytearray(encode_batch([(None, b"x")], timestamp=T0)[:HEADER_SIZE]) + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, codec)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)


def test_compressed_bombs_are_refused_and_the_node_keeps_serving(two_nodes):
    topic = new_topic(two_nodes, "bombs")
    leader = leader_address(two_nodes, topic)
    zeros = compression.compress(compression.GZIP, bytes(MAX_DECOMPRESSED_BYTES + 1))  # some 33 KiB
    legacy_bomb = encode_message(0, 1, compression.GZIP, T0, None, zeros)
    assert produce(leader, topic, legacy_bomb, 2).error_code == MESSAGE_TOO_LARGE
    # A magic-2 batch is stored as sent; only an old consumer's fetch would inflate it.
    magic_2_bomb = batch_around(zeros, compression.GZIP)
    assert produce(leader, topic, magic_2_bomb, 9).error_code == 0
    assert fetch(leader, topic, 3).error_code == MESSAGE_TOO_LARGE
    assert len(fetch(leader, topic, 4).records) == len(magic_2_bomb)
    assert produce(leader, topic, legacy_message_set(1, [b"after"]), 2).base_offset == 1
    assert [m.value for m in messages_of(fetch(leader, topic, 3, offset=1).records)] == [b"after"]
