"""Malformed, truncated, unknown, corrupt and oversized requests: each gets Kafka's error
code or a closed connection, and the node keeps serving everyone else."""
from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from cluster.formats.records import encode_batch
from tests.integration.wire import fetch_values, read_response, send_frame, send_request

CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_ID = 100


@pytest.fixture(scope="module")
def single_node():
    from cluster.launch import Cluster

    with Cluster(nodes=1, node_config={"socket.request.max.bytes": str(1 << 20)}) as cluster:
        yield cluster


def connect(cluster) -> socket.socket:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def assert_closed(sock) -> None:
    sock.settimeout(10)
    try:
        assert sock.recv(1) == b""
    except ConnectionResetError:
        pass


def assert_node_serves(cluster) -> None:
    with connect(cluster) as sock:
        send_request(sock, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
        _, response = read_response(sock, ApiVersionsResponse, 3)
        assert response.error_code == 0
        assert {k.api_key for k in response.api_keys} >= {0, 1, 2, 3, 18, 19, 20}


def test_malformed_frame_closes_only_that_connection(single_node):
    with connect(single_node) as sock:
        send_frame(sock, b"\x00\x03")  # shorter than any request header
        assert_closed(sock)
    assert_node_serves(single_node)


def test_truncated_request_closes_the_connection(single_node):
    request = MetadataRequest[9](topics=[MetadataRequest[9].MetadataRequestTopic(name="some-topic")],
                                 allow_auto_topic_creation=False)
    request.with_header(correlation_id=1, client_id="bad-input-test")
    encoded = bytes(request.encode(version=9, header=True))
    with connect(single_node) as sock:
        send_frame(sock, encoded[:-6])
        assert_closed(sock)
    assert_node_serves(single_node)


def test_unknown_api_key_closes_the_connection(single_node):
    with connect(single_node) as sock:
        send_frame(sock, struct.pack(">hhih", 999, 0, 1, -1))
        assert_closed(sock)
    assert_node_serves(single_node)


def test_unsupported_api_versions_version_answers_in_v0_layout(single_node):
    with connect(single_node) as sock:
        send_frame(sock, struct.pack(">hhih", 18, 99, 42, -1) + b"\x00")
        correlation_id, response = read_response(sock, ApiVersionsResponse, 0)
    assert correlation_id == 42
    assert response.error_code == UNSUPPORTED_VERSION
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[18] == (0, 4)
    assert versions[0] == (0, 13)


def test_unsupported_version_of_another_api_closes_the_connection(single_node):
    with connect(single_node) as sock:
        send_frame(sock, struct.pack(">hhih", 0, 14, 1, -1) + b"\x00" * 16)  # Produce v14: not served
        assert_closed(sock)
    assert_node_serves(single_node)


def test_oversized_frame_closes_the_connection(single_node):
    with connect(single_node) as sock:
        sock.sendall(struct.pack(">i", (1 << 20) + 1) + struct.pack(">hhih", 3, 9, 1, -1))
        assert_closed(sock)
    with connect(single_node) as sock:
        sock.sendall(struct.pack(">i", -5))
        assert_closed(sock)
    assert_node_serves(single_node)


def produce_raw(sock, topic: str, batch: bytes, version: int = 9):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=batch)])])
    send_request(sock, request, version)
    _, response = read_response(sock, ProduceResponse, version)
    return response.responses[0].partition_responses[0]


def test_corrupt_crc_is_rejected_and_acknowledged_data_survives(single_node):
    topic = f"crc-{uuid.uuid4().hex[:8]}"
    single_node.create_topic(topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=single_node.bootstrap_servers, acks=1)
    for i in range(3):
        producer.send(topic, key=b"k", value=f"good-{i}".encode(), partition=0).get(10)
    producer.close()

    batch = bytearray(encode_batch([(b"k", b"evil")], timestamp=1_700_000_000_000))
    batch[-1] ^= 0xFF  # flip a bit covered by the CRC
    with connect(single_node) as sock:
        bad = produce_raw(sock, topic, bytes(batch))
        assert bad.error_code == CORRUPT_MESSAGE
        truncated = produce_raw(sock, topic, bytes(encode_batch([(b"k", b"cut")], timestamp=1))[:-3])
        assert truncated.error_code == INVALID_RECORD  # no whole batch at all, as Kafka sees it
        good = produce_raw(sock, topic, encode_batch([(b"k", b"good-3")], timestamp=1_700_000_000_000))
        assert (good.error_code, good.base_offset) == (0, 3)

    consumer = KafkaConsumer(bootstrap_servers=single_node.bootstrap_servers, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = [(r.offset, r.value) for r in consumer]
    consumer.close()
    assert values == [(0, b"good-0"), (1, b"good-1"), (2, b"good-2"), (3, b"good-3")]


def with_magic(batch: bytes, magic: int) -> bytes:
    return batch[:16] + bytes([magic]) + batch[17:]


def test_a_partition_takes_exactly_one_magic_2_batch_as_kafka_validates_produce_requests(single_node):
    topic = f"shape-{uuid.uuid4().hex[:8]}"
    single_node.create_topic(topic, partitions=1)
    one = encode_batch([(None, b"one")], timestamp=1_700_000_000_000)
    zstd_flagged = encode_batch([(None, b"z")], timestamp=1_700_000_000_000, attributes=4)
    with connect(single_node) as sock:
        assert produce_raw(sock, topic, b"").error_code == INVALID_RECORD
        assert produce_raw(sock, topic, one + one).error_code == INVALID_RECORD
        assert produce_raw(sock, topic, with_magic(one, 1)).error_code == INVALID_RECORD
        assert produce_raw(sock, topic, with_magic(one, 3)).error_code == CORRUPT_MESSAGE
        assert produce_raw(sock, topic, zstd_flagged, version=6).error_code == UNSUPPORTED_COMPRESSION_TYPE
        # An unknown partition is reported before its records are looked at, as in Kafka.
        assert produce_raw(sock, "no-such-topic", b"").error_code == UNKNOWN_TOPIC_OR_PARTITION
        # Stray bytes after one whole batch are dropped, as Kafka trims them.
        kept = produce_raw(sock, topic, one + b"\0\0\0")
        assert (kept.error_code, kept.base_offset) == (0, 0)
        assert fetch_values((single_node.host, single_node.nodes[1].port), topic) == [b"one"]


def test_unknown_topics_get_the_codes_of_their_api_version(single_node):
    with connect(single_node) as sock:
        assert produce_raw(sock, "no-such-topic", encode_batch([(None, b"x")], timestamp=1)).error_code \
            == UNKNOWN_TOPIC_OR_PARTITION

        request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name="no-such-topic")],
                                      allow_auto_topic_creation=False)
        send_request(sock, request, 12)
        _, metadata = read_response(sock, MetadataResponse, 12)
        assert [(t.name, t.error_code) for t in metadata.topics] == [("no-such-topic", UNKNOWN_TOPIC_OR_PARTITION)]

        Topic = FetchRequest.FetchTopic
        fetch = FetchRequest[13](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                 session_id=0, session_epoch=-1, topics=[Topic(topic_id=uuid.uuid4(), partitions=[
                                     Topic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                                 forgotten_topics_data=[], rack_id="")
        send_request(sock, fetch, 13)
        _, response = read_response(sock, FetchResponse, 13)
        assert response.responses[0].partitions[0].error_code == UNKNOWN_TOPIC_ID
        assert response.responses[0].partitions[0].records == b""


def test_pipelined_requests_are_answered_in_order(single_node):
    with connect(single_node) as sock:
        for correlation_id in range(100, 150):
            send_request(sock, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3,
                         correlation_id=correlation_id)
        got = [read_response(sock, ApiVersionsResponse, 3)[0] for _ in range(50)]
    assert got == list(range(100, 150))


def _api_versions_frame(correlation_id: int) -> bytes:
    request = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
    request.with_header(correlation_id=correlation_id, client_id="kraftwerk-tests")
    payload = bytes(request.encode(version=3, header=True))
    return struct.pack(">i", len(payload)) + payload


def test_frames_split_anywhere_and_joined_in_one_write_are_all_answered_in_order(single_node):
    frames = b"".join(_api_versions_frame(correlation_id) for correlation_id in range(10, 14))
    with connect(single_node) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The first frame a byte at a time (its size prefix split too), the rest in one write.
        first_size = len(_api_versions_frame(10))
        for index in range(first_size):
            sock.sendall(frames[index:index + 1])
            if index < 6:
                time.sleep(0.01)  # separate segments, so that the node sees the prefix in pieces
        sock.sendall(frames[first_size:])
        got = [read_response(sock, ApiVersionsResponse, 3) for _ in range(4)]
    assert [correlation_id for correlation_id, _ in got] == [10, 11, 12, 13]
    assert all(response.error_code == 0 for _, response in got)


def test_more_pipelined_requests_than_may_be_in_flight_are_all_answered_in_order(single_node):
    count = 3000  # above the node's limit of requests in flight per connection (1024)
    frames = b"".join(_api_versions_frame(correlation_id) for correlation_id in range(count))
    with connect(single_node) as sock:
        sender = threading.Thread(target=sock.sendall, args=(frames,))
        sender.start()  # while this thread reads: the node's answers fill the socket meanwhile
        got = [read_response(sock, ApiVersionsResponse, 3)[0] for _ in range(count)]
        sender.join(10)
    assert got == list(range(count))


def test_a_client_that_closes_its_sending_side_still_gets_every_answer(single_node):
    with connect(single_node) as sock:
        sock.sendall(b"".join(_api_versions_frame(correlation_id) for correlation_id in range(5)))
        sock.shutdown(socket.SHUT_WR)
        got = [read_response(sock, ApiVersionsResponse, 3)[0] for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
        assert_closed(sock)
