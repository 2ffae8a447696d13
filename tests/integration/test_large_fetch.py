"""Fetches of large values: every byte written comes back exactly, under the clients' fetch
size limits, across segment boundaries and from an offset inside a batch. Record sets go to
the socket beside the encoded Fetch response (node.spliced_response), and reads this large
straight from the segment file (node.socket_writes): these are the reads that would show a
spliced length prefix or record set out of place."""
from __future__ import annotations

import os
import socket
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.record import MemoryRecords

from tests.integration.wire import fetch_values, read_response, send_request

PARTITIONS = 3
VALUES_PER_PARTITION = 6
VALUE_BYTES = 1_000_000
# Three values a segment: reads start, cross and end at segment boundaries.
SEGMENT_BYTES = 3 * VALUE_BYTES + 500


@pytest.fixture(scope="module")
def cluster():
    from cluster.launch import Cluster

    with Cluster(nodes=3) as running:
        yield running


@pytest.fixture(scope="module")
def large_topic(cluster):
    """(topic, {partition: [values in offset order]}), written with acks=all."""
    topic = "large-values"
    cluster.create_topic(topic, PARTITIONS, 3, config={"segment.bytes": str(SEGMENT_BYTES)})
    written = {p: [os.urandom(VALUE_BYTES) for _ in range(VALUES_PER_PARTITION)] for p in range(PARTITIONS)}
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", max_request_size=2 << 20)
    try:
        for partition, values in written.items():
            for value in values:
                producer.send(topic, value, partition=partition).get(30)
    finally:
        producer.close()
    return topic, written


def test_kafka_python_reads_every_large_value_under_its_fetch_limits(cluster, large_topic):
    topic, written = large_topic
    # Limits below one value: each fetch answers one value a partition, the first partition's
    # past the limit (KIP-74).
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=20_000, max_partition_fetch_bytes=VALUE_BYTES // 2,
                             fetch_max_bytes=VALUE_BYTES + VALUE_BYTES // 2)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        read = {p: [] for p in range(PARTITIONS)}
        for message in consumer:
            read[message.partition].append((message.offset, message.value))
            if sum(map(len, read.values())) == PARTITIONS * VALUES_PER_PARTITION:
                break
    finally:
        consumer.close()
    assert read == {p: list(enumerate(values)) for p, values in written.items()}


def test_confluent_reads_every_large_value(cluster, large_topic):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, written = large_topic
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": "large-values", "enable.auto.commit": False,
        "fetch.max.bytes": 4 * VALUE_BYTES, "max.partition.fetch.bytes": 2 * VALUE_BYTES})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        read = {p: [] for p in range(PARTITIONS)}
        while sum(map(len, read.values())) < PARTITIONS * VALUES_PER_PARTITION:
            batch = consumer.consume(num_messages=100, timeout=20)
            assert batch, f"the stream went quiet after {sum(map(len, read.values()))} values"
            for message in batch:
                assert message.error() is None, message.error()
                read[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert read == {p: list(enumerate(values)) for p, values in written.items()}


def test_a_large_fetch_ends_with_its_segment_and_the_next_starts_the_following_one(cluster, large_topic):
    topic, written = large_topic
    leader = _leader_of(cluster, topic, 0)
    # Offset 2 is the last value of the first segment. A read this large is sent from the file
    # (sendfile), one segment a fetch as Kafka's log reads; the 8 MB limit would hold all four.
    assert fetch_values(leader, topic, 0, offset=2) == written[0][2:3]
    assert fetch_values(leader, topic, 0, offset=3) == written[0][3:6]


def test_a_slow_reader_gets_large_answers_whole_and_in_order(cluster, large_topic):
    """Together the answers (6 MB) are more than the socket's buffers hold (4 MB at most here,
    with the reader's shrunk), so the node finds the socket full mid-send; pipelined answers must
    come whole and in request order. The spill path itself is checked in test_file_regions.py."""
    topic, written = large_topic
    with socket.create_connection(_leader_of(cluster, topic, 1), timeout=20) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        send_request(sock, _fetch_of(topic, 1, offset=3), 12, correlation_id=1)
        send_request(sock, _fetch_of(topic, 1, offset=0), 12, correlation_id=2)
        send_request(sock, ApiVersionsRequest[3](client_software_name="tests", client_software_version="1"), 3,
                     correlation_id=3)
        time.sleep(0.5)  # the node writes into a full socket meanwhile
        answers = [read_response(sock, FetchResponse, 12), read_response(sock, FetchResponse, 12)]
        versions_id, versions = read_response(sock, ApiVersionsResponse, 3)
    assert [(correlation_id, _values_of(answer)) for correlation_id, answer in answers] == [
        (1, written[1][3:6]), (2, written[1][0:3])]
    assert (versions_id, versions.error_code) == (3, 0)


def _fetch_of(topic: str, partition: int, offset: int):
    return FetchRequest[12](
        cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=8 << 20)])])


def _values_of(answer) -> list[bytes]:
    data = answer.responses[0].partitions[0]
    assert data.error_code == 0
    records = MemoryRecords(bytes(data.records))
    values = []
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    return values


def test_a_fetch_from_inside_a_batch_starts_at_that_offset(cluster):
    topic = "batched"
    cluster.create_topic(topic, 1, 3)
    values = [b"value %d" % i for i in range(10)]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=1000)
    try:
        futures = [producer.send(topic, value, partition=0) for value in values]
        producer.flush()
        assert {f.get().offset for f in futures} == set(range(10))
    finally:
        producer.close()
    # The node answers with the whole batch that holds offset 5; the client skips what precedes it.
    assert fetch_values(_leader_of(cluster, topic, 0), topic, 0, offset=5) == values
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 5)
        read = [(m.offset, m.value) for _, m in zip(range(5), consumer)]
    finally:
        consumer.close()
    assert read == list(enumerate(values))[5:]


def _leader_of(cluster, topic: str, partition: int) -> tuple[str, int]:
    from kafka import KafkaConsumer as MetadataClient

    client = MetadataClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        client.topics()
        metadata = client._client.cluster
        broker = metadata.broker_metadata(metadata.leader_for_partition(TopicPartition(topic, partition)))
        return broker.host, broker.port
    finally:
        client.close()
