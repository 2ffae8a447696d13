"""Fetch sessions (KIP-227): incremental fetches name and answer only what changed, their errors are
Kafka's, and a follower of many partitions replicates exactly through one."""
from __future__ import annotations

import socket
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.record import MemoryRecords

from cluster.launch import Cluster
from tests.integration.wire import exchange

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
LEADER, FOLLOWER = 1, 2


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=2) as running:
        yield running


def create_led_by_node_1(cluster, name: str, partitions: int) -> None:
    """A topic whose partitions all have node 1 as leader and node 2 as follower."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=120_000)
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments={p: [LEADER, FOLLOWER]
                                                                        for p in range(partitions)})],
                            timeout_ms=120_000)
    finally:
        admin.close()
    assert cluster.wait_in_sync(name, timeout=120)


def produce(cluster, topic: str, values: dict[int, bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for future in [producer.send(topic, value, partition=p) for p, value in values.items()]:
        future.get(30)
    producer.close()


def fetch(sock, version: int, session_id: int, epoch: int, topic, offsets: dict[int, int],
          forgotten: list[int] = ()):
    """One consumer Fetch naming `offsets` (partition -> fetch offset); topic is a name (v12) or an id (v13)."""
    partitions = [FetchRequest.FetchTopic.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=1 << 20) for p, offset in offsets.items()]
    by_name = version < 13
    request = FetchRequest[version](
        cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic if by_name else None, topic_id=None if by_name else topic,
                                        partitions=partitions)] if partitions else [],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=topic if by_name else None,
                                                           topic_id=None if by_name else topic,
                                                           partitions=list(forgotten))] if forgotten else [])
    return exchange(sock, request, FetchResponse, version, correlation_id=epoch + 100)


def answered(response) -> dict[int, list[bytes]]:
    """partition -> the values its answer carries, for every partition the answer names."""
    values = {}
    for topic in response.responses:
        for data in topic.partitions:
            assert data.error_code == 0
            records = MemoryRecords(bytes(data.records or b""))
            values[data.partition_index] = []
            while records.has_next():
                values[data.partition_index].extend(r.value for r in records.next_batch())
    return values


@pytest.fixture(scope="module")
def session_topic(cluster):
    topic = f"sessions-{uuid.uuid4().hex[:6]}"
    create_led_by_node_1(cluster, topic, 3)
    produce(cluster, topic, {0: b"a0", 1: b"b0", 2: b"c0"})
    return topic


@pytest.fixture
def leader_socket(cluster):
    with socket.create_connection((cluster.host, cluster.nodes[LEADER].port), timeout=10) as sock:
        yield sock


def test_an_incremental_fetch_answers_only_partitions_with_news_and_forgets_what_it_is_told(
        cluster, session_topic, leader_socket):
    full = fetch(leader_socket, 12, 0, 0, session_topic, {0: 0, 1: 0, 2: 0})
    assert full.error_code == 0 and full.session_id != 0
    assert answered(full) == {0: [b"a0"], 1: [b"b0"], 2: [b"c0"]}
    session = full.session_id
    # Moving on past what it read is news to the session, but the partitions have none to tell.
    moved = fetch(leader_socket, 12, session, 1, session_topic, {0: 1, 1: 1, 2: 1})
    assert (moved.error_code, moved.session_id, answered(moved)) == (0, session, {})
    produce(cluster, session_topic, {1: b"b1"})
    news = fetch(leader_socket, 12, session, 2, session_topic, {})
    assert (news.session_id, answered(news)) == (session, {1: [b"b1"]})
    produce(cluster, session_topic, {0: b"a1", 2: b"c1"})
    after_forgetting = fetch(leader_socket, 12, session, 3, session_topic, {1: 2}, forgotten=[2])
    assert answered(after_forgetting) == {0: [b"a1"]}


def test_a_session_refuses_the_wrong_epoch_an_unknown_id_and_a_switch_to_topic_ids(
        cluster, session_topic, leader_socket):
    full = fetch(leader_socket, 12, 0, 0, session_topic, {0: 0})
    session = full.session_id
    assert fetch(leader_socket, 12, session, 1, session_topic, {}).error_code == 0
    replayed = fetch(leader_socket, 12, session, 1, session_topic, {})
    assert (replayed.error_code, replayed.session_id, replayed.responses) == (INVALID_FETCH_SESSION_EPOCH, 0, [])
    unknown = fetch(leader_socket, 12, session ^ 0x5A5A5A, 1, session_topic, {})
    assert (unknown.error_code, unknown.responses) == (FETCH_SESSION_ID_NOT_FOUND, [])
    topic_id = cluster_topic_id(cluster, session_topic)
    by_id = fetch(leader_socket, 13, session, 2, topic_id, {})
    assert (by_id.error_code, by_id.responses) == (FETCH_SESSION_TOPIC_ID_ERROR, [])
    # The session survives refused requests: its expected epoch is still 2.
    assert fetch(leader_socket, 12, session, 2, session_topic, {}).error_code == 0


def test_a_full_fetch_with_the_final_epoch_closes_its_session(cluster, session_topic, leader_socket):
    session = fetch(leader_socket, 12, 0, 0, session_topic, {0: 0}).session_id
    closing = fetch(leader_socket, 12, session, -1, session_topic, {0: 0})
    assert (closing.error_code, closing.session_id, list(answered(closing))) == (0, 0, [0])
    assert answered(closing)[0][0] == b"a0"
    assert fetch(leader_socket, 12, session, 1, session_topic, {}).error_code == FETCH_SESSION_ID_NOT_FOUND


def cluster_topic_id(cluster, topic: str) -> uuid.UUID:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from tests.integration.wire import exchange_once

    request = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name=topic)],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    response = exchange_once((cluster.host, cluster.nodes[LEADER].port), request, MetadataResponse, 12)
    return response.topics[0].topic_id


def test_kafka_python_consumes_exactly_through_incremental_sessions(cluster):
    topic = f"consumed-{uuid.uuid4().hex[:6]}"
    create_led_by_node_1(cluster, topic, 4)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_incremental_fetch_sessions=True,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, p) for p in range(4)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(4)}
    for round_ in range(3):
        # Each round writes to some partitions only: the others have no news for the session.
        written = {p: f"r{round_}-p{p}".encode() for p in range(4) if (p + round_) % 2 == 0}
        produce(cluster, topic, written)
        for message in consumer:
            seen[message.partition].append(message.value)
            if sum(map(len, seen.values())) == 2 * (round_ + 1):
                break
    consumer.close()
    assert seen == {p: [f"r{r}-p{p}".encode() for r in range(3) if (p + r) % 2 == 0] for p in range(4)}


def test_a_follower_of_1000_partitions_replicates_them_exactly(cluster):
    from confluent_kafka import Producer

    topic = f"wide-{uuid.uuid4().hex[:6]}"
    create_led_by_node_1(cluster, topic, 1000)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
    failures = []
    # A second round to every seventh partition: the follower's session must name just those again.
    writes = [(p, f"first-{p}".encode()) for p in range(1000)] + [(p, f"second-{p}".encode())
                                                                   for p in range(0, 1000, 7)]
    for partition, value in writes:
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda error, _: failures.append(error) if error else None)
        producer.poll(0)
    assert producer.flush(180) == 0 and failures == []
    for partition in range(1000):
        leader_copy, follower_copy = (segment_bytes(cluster, node, topic, partition) for node in (LEADER, FOLLOWER))
        expected = [f"first-{partition}".encode()] + ([f"second-{partition}".encode()] if partition % 7 == 0 else [])
        assert follower_copy == leader_copy, f"partition {partition}: the follower's copy differs"
        assert values_of(leader_copy) == expected


def segment_bytes(cluster, node_id: int, topic: str, partition: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def values_of(segment: bytes) -> list[bytes]:
    records = MemoryRecords(segment)
    values = []
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    return values
