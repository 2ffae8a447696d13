"""Share groups (KIP-932) on the partition leaders: ShareFetch and ShareAcknowledge against a 3-node
cluster. Each record goes to one member at a time; released and lock-expired records come back with
their delivery count raised; rejected ones and those past the delivery limit never come back;
errors are Kafka's and leave the node serving."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from cluster.launch import Cluster
from tests.integration.share_wire import ACCEPT, GAP, RELEASE, REJECT, ShareMember
from tests.integration.txn_wire import leader_address, leader_of, node_addresses
from tests.integration.wire import exchange, exchange_once

LOCK_MS = 1000  # the shortest group.share.record.lock.duration.ms Kafka allows
DELIVERY_LIMIT = 3
NOT_LEADER_OR_FOLLOWER = 6
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, node_config={"group.share.record.lock.duration.ms": str(LOCK_MS),
                                       "group.share.delivery.count.limit": str(DELIVERY_LIMIT)}) as running:
        yield running


def new_topic(cluster, name: str, partitions: int = 1):
    """(topic id, address of partition 0's leader)."""
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    assert cluster.wait_in_sync(name, timeout=60)
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    metadata = exchange_once((host, int(port)), MetadataRequest[12](
        topics=[MetadataRequest[12].MetadataRequestTopic(name=name)], allow_auto_topic_creation=False),
        MetadataResponse, 12)
    return metadata.topics[0].topic_id, leader_address(cluster, name, 0)


def produce(cluster, topic: str, values: list[bytes], partition: int = 0, batches: int = 1) -> None:
    """values in `batches` record batches (each flushed before the next begins)."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=50)
    size = -(-len(values) // batches)
    for start in range(0, len(values), size):
        for future in [producer.send(topic, value, partition=partition) for value in values[start:start + size]]:
            future.get(30)
    producer.close()


def opened(address, group: str, topic_id) -> ShareMember:
    """A member whose share session is open on topic_id's partition 0 (its first fetch starts the
    share-partition at the log end: share.auto.offset.reset=latest)."""
    member = ShareMember(address, group)
    assert member.fetch(topic_id).acquired == []
    return member


def values(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_one_member_gets_each_record_once_in_order(cluster):
    topic_id, address = new_topic(cluster, "share-one")
    with opened(address, "share-one-group", topic_id) as member:
        produce(cluster, "share-one", values(6), batches=2)
        got = member.fetch(topic_id, max_wait_ms=5000)
        assert got.error_code == 0
        assert got.acquired == [(0, 5, 1)]
        assert [got.values[o] for o in range(6)] == values(6)
        # Accepted with the next fetch: nothing comes again.
        again = member.fetch(topic_id, acks={0: [(0, 5, ACCEPT)]}, max_wait_ms=300)
        assert (again.acknowledge_error_code, again.acquired) == (0, [])
        produce(cluster, "share-one", [b"later"])
        later = member.fetch(topic_id, max_wait_ms=5000)
        assert later.acquired == [(6, 6, 1)] and later.values == {6: b"later"}


def test_members_of_one_group_share_the_records(cluster):
    topic_id, address = new_topic(cluster, "share-split")
    members = [opened(address, "share-split-group", topic_id) for _ in range(4)]
    try:
        produce(cluster, "share-split", values(40), batches=8)  # batches of 5 records
        seen: dict[int, bytes] = {}
        while len(seen) < 40:
            progressed = False
            for member in members:
                got = member.fetch(topic_id, max_records=5, max_wait_ms=200)
                assert not set(got.values) & set(seen), "a record went to two members"
                seen.update(got.values)
                if got.acquired:
                    progressed = True
                    member.acknowledge(topic_id, {0: [(first, last, ACCEPT) for first, last, _ in got.acquired]})
            assert progressed or len(seen) == 40
        assert [seen[o] for o in range(40)] == values(40)
        assert all(m.fetch(topic_id, max_wait_ms=100).acquired == [] for m in members)
    finally:
        for member in members:
            member.close()


def test_release_redelivers_and_reject_does_not(cluster):
    topic_id, address = new_topic(cluster, "share-release")
    with opened(address, "share-release-group", topic_id) as first, \
            opened(address, "share-release-group", topic_id) as second:
        produce(cluster, "share-release", values(4))
        assert first.fetch(topic_id, max_wait_ms=5000).acquired == [(0, 3, 1)]
        # Per-offset types: 0 accepted, 1 released, 2 rejected, 3 released.
        answer = first.acknowledge(topic_id, {0: [(0, 3, [ACCEPT, RELEASE, REJECT, RELEASE])]})
        assert answer.responses[0].partitions[0].error_code == 0
        got = second.fetch(topic_id, max_wait_ms=2000)
        assert got.acquired == [(1, 1, 2), (3, 3, 2)]
        assert got.values == {1: b"m1", 3: b"m3"}


def test_delivery_count_limit_archives(cluster):
    topic_id, address = new_topic(cluster, "share-limit")
    with opened(address, "share-limit-group", topic_id) as member:
        produce(cluster, "share-limit", values(2))
        for delivery in range(1, DELIVERY_LIMIT + 1):
            got = member.fetch(topic_id, max_wait_ms=5000)
            assert got.acquired == [(0, 1, delivery)]
            member.acknowledge(topic_id, {0: [(0, 1, RELEASE)]})
        # Released at the limit: archived, never delivered again, and the start offset moves past.
        assert member.fetch(topic_id, max_wait_ms=300).acquired == []
        produce(cluster, "share-limit", [b"next"])
        assert member.fetch(topic_id, max_wait_ms=5000).acquired == [(2, 2, 1)]


def test_expired_locks_go_to_another_member(cluster):
    topic_id, address = new_topic(cluster, "share-expiry")
    with opened(address, "share-expiry-group", topic_id) as silent, \
            opened(address, "share-expiry-group", topic_id) as other:
        produce(cluster, "share-expiry", values(3))
        assert silent.fetch(topic_id, max_wait_ms=5000).acquired == [(0, 2, 1)]
        assert other.fetch(topic_id, max_wait_ms=200).acquired == []
        started = time.monotonic()
        # The waiting fetch is woken by the lock's expiry, not by its own timeout.
        got = other.fetch(topic_id, max_wait_ms=10_000)
        assert got.acquired == [(0, 2, 2)] and got.values == {0: b"m0", 1: b"m1", 2: b"m2"}
        assert time.monotonic() - started < 5
        # The silent member's lock is gone: its late acknowledgement is refused.
        late = silent.fetch(topic_id, acks={0: [(0, 2, ACCEPT)]}, max_wait_ms=0)
        assert late.acknowledge_error_code == INVALID_RECORD_STATE
        assert other.fetch(topic_id, acks={0: [(0, 2, ACCEPT)]}).acknowledge_error_code == 0


def test_gaps_and_closing_the_session(cluster):
    topic_id, address = new_topic(cluster, "share-close")
    with opened(address, "share-close-group", topic_id) as closing, \
            opened(address, "share-close-group", topic_id) as other:
        produce(cluster, "share-close", values(4))
        assert closing.fetch(topic_id, max_wait_ms=5000).acquired == [(0, 3, 1)]
        # Offset 0 as a gap (archived), the rest still held; epoch -1 gives them back at once.
        closed = closing.fetch_raw(topic_id, acks={0: [(0, 0, GAP)]}, epoch=-1)
        assert closed.error_code == 0
        assert closed.responses[0].partitions[0].acknowledge_error_code == 0
        assert other.fetch(topic_id, max_wait_ms=500).acquired == [(1, 3, 2)]
        assert closing.fetch_raw(topic_id, epoch=1).error_code == SHARE_SESSION_NOT_FOUND


def test_bad_input_gets_kafkas_errors(cluster):
    topic_id, address = new_topic(cluster, "share-bad", partitions=3)
    group = "share-bad-group"
    with opened(address, group, topic_id) as member:
        produce(cluster, "share-bad", values(2))
        assert member.fetch(topic_id, max_wait_ms=5000).acquired == [(0, 1, 1)]
        # Records never acquired, or acquired by someone else.
        assert member.acknowledge(topic_id, {0: [(5, 9, ACCEPT)]}).responses[0].partitions[0].error_code \
            == INVALID_RECORD_STATE
        with ShareMember(address, group) as stranger:
            assert stranger.fetch(topic_id).acquired == []
            assert stranger.acknowledge(topic_id, {0: [(0, 1, ACCEPT)]}).responses[0].partitions[0].error_code \
                == INVALID_RECORD_STATE
        # A bad acknowledge type; types that do not match the range.
        assert member.acknowledge(topic_id, {0: [(0, 1, 7)]}).responses[0].partitions[0].error_code == INVALID_REQUEST
        assert member.acknowledge(topic_id, {0: [(0, 1, [1, 1, 1])]}).responses[0].partitions[0].error_code \
            == INVALID_REQUEST
        # Wrong epochs: a fetch or acknowledgement out of turn, an acknowledgement opening a session.
        assert member.fetch_raw(topic_id, epoch=member.epoch + 5).error_code == INVALID_SHARE_SESSION_EPOCH
        assert member.acknowledge(topic_id, {0: [(0, 1, ACCEPT)]}, epoch=0).error_code == INVALID_SHARE_SESSION_EPOCH
        assert member.acknowledge(topic_id, {0: [(0, 1, ACCEPT)]}, epoch=99).error_code == INVALID_SHARE_SESSION_EPOCH
        # After all that the records are still the member's to accept.
        assert member.acknowledge(topic_id, {0: [(0, 1, ACCEPT)]}).responses[0].partitions[0].error_code == 0
    with ShareMember(address, group) as nobody:
        assert nobody.fetch_raw(topic_id, epoch=3).error_code == SHARE_SESSION_NOT_FOUND
        assert nobody.acknowledge(topic_id, {0: []}, epoch=3).error_code == SHARE_SESSION_NOT_FOUND
        # Acknowledgements in the request that opens a session.
        assert nobody.fetch_raw(topic_id, acks={0: [(0, 0, ACCEPT)]}, epoch=0).error_code == INVALID_REQUEST
        unknown = nobody.fetch(uuid.UUID(int=1))
        assert unknown.error_code == UNKNOWN_TOPIC_ID
    # A partition led elsewhere names its leader and where to reach it.
    elsewhere = next(p for p in range(3) if leader_of(cluster, "share-bad", p) != leader_of(cluster, "share-bad", 0))
    with ShareMember(address, group) as misrouted:
        got = misrouted.fetch(topic_id, partition=elsewhere)
        leader = leader_of(cluster, "share-bad", elsewhere)
        assert got.error_code == NOT_LEADER_OR_FOLLOWER and got.leader[0] == leader
        assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(leader, *node_addresses(cluster)[leader])]
    for host, port in node_addresses(cluster).values():
        with socket.create_connection((host, port), timeout=10) as sock:
            assert exchange(sock, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                            ApiVersionsResponse, 3).error_code == 0
