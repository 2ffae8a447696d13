"""Share groups (KIP-932) on the partition leaders: ShareFetch and ShareAcknowledge against a 3-node
cluster, one request at a time and through confluent-kafka's ShareConsumer. Each record goes to one
member at a time; released and lock-expired records come back with their delivery count raised;
rejected ones and those past the delivery limit never come back; errors are Kafka's and leave the
node serving."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from cluster.launch import Cluster
from tests.integration.share_wire import ACCEPT, GAP, RELEASE, REJECT, ShareMember
from tests.integration.txn_wire import leader_address, leader_of, node_addresses
from tests.integration.wire import exchange, exchange_once

LOCK_MS = 2000  # group.share.record.lock.duration.ms: long enough for a client between polls
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
        assert logged_errors(running) == []


def logged_errors(cluster) -> list[str]:
    """Lines any process logged at ERROR: bad input and faults a node answers must not be among them."""
    return [f"{path.stem}: {line}" for path in sorted((cluster.data_dir / "logs").glob("*.log"))
            for line in path.read_text(errors="replace").splitlines() if " ERROR " in line]


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
        assert time.monotonic() - started < LOCK_MS / 1000 + 2
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


# --- through confluent-kafka's ShareConsumer ---

def start_share_partitions(cluster, topic: str, topic_id, group: str, partitions: int) -> None:
    """Make the group's share-partitions start at offset 0 of the empty topic (latest, as the group
    reads share.auto.offset.reset), before anything is produced, as a consumer's first fetch would."""
    for partition in range(partitions):
        with ShareMember(leader_address(cluster, topic, partition), group) as member:
            assert member.fetch(topic_id, partition=partition).error_code == 0


def share_consumer(cluster, group: str, topic: str, **config) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, **config})
    consumer.subscribe([topic])
    return consumer


def poll_until(consumers: list, count: int, timeout_s: float = 60, on_message=None, settle_s: float = 1.0) -> list:
    """(consumer index, message) polled round-robin from consumers until count came, and settle_s
    more (to see that nothing else does)."""
    got = []
    deadline = time.monotonic() + timeout_s
    settled_at = None
    while time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            for message in consumer.poll(0.1):
                assert message.error() is None, message.error()
                got.append((index, message))
                if on_message:
                    on_message(consumer, message)
        if len(got) >= count:
            settled_at = settled_at or time.monotonic() + settle_s
            if time.monotonic() >= settled_at:
                break
    return got


def closing(consumers: list) -> None:
    for consumer in consumers:
        consumer.close()


def test_a_share_consumer_gets_the_messages_in_order(cluster):
    topic_id, _ = new_topic(cluster, "sc-one")
    start_share_partitions(cluster, "sc-one", topic_id, "sc-one-group", 1)
    consumer = share_consumer(cluster, "sc-one-group", "sc-one")
    try:
        produce(cluster, "sc-one", values(30), batches=3)
        got = poll_until([consumer], 30)
        assert [(m.offset(), m.value(), m.delivery_count()) for _, m in got] == \
            [(o, f"m{o}".encode(), 1) for o in range(30)]
    finally:
        closing([consumer])


def test_four_share_consumers_get_each_message_once(cluster):
    topic_id, _ = new_topic(cluster, "sc-four", partitions=2)
    start_share_partitions(cluster, "sc-four", topic_id, "sc-four-group", 2)
    consumers = [share_consumer(cluster, "sc-four-group", "sc-four") for _ in range(4)]
    try:
        for partition in range(2):
            produce(cluster, "sc-four", values(100, f"p{partition}-"), partition=partition, batches=10)
        got = poll_until(consumers, 200)
        delivered = sorted((m.partition(), m.offset(), m.value()) for _, m in got)
        assert delivered == [(p, o, f"p{p}-{o}".encode()) for p in range(2) for o in range(100)]
        assert len({index for index, _ in got}) > 1, "one consumer got everything"
    finally:
        closing(consumers)


def test_explicit_release_redelivers_and_reject_does_not(cluster):
    topic_id, _ = new_topic(cluster, "sc-explicit")
    start_share_partitions(cluster, "sc-explicit", topic_id, "sc-explicit-group", 1)
    consumer = share_consumer(cluster, "sc-explicit-group", "sc-explicit", **{"share.acknowledgement.mode": "explicit"})
    try:
        produce(cluster, "sc-explicit", values(2))
        decisions = {(0, 1): AcknowledgeType.RELEASE, (1, 1): AcknowledgeType.REJECT, (0, 2): AcknowledgeType.ACCEPT}

        def acknowledge(consumer, message):
            consumer.acknowledge(message, decisions[(message.offset(), message.delivery_count())])
            consumer.commit_sync()
        got = poll_until([consumer], 3, on_message=acknowledge)
        assert [(m.offset(), m.value(), m.delivery_count()) for _, m in got] == [
            (0, b"m0", 1), (1, b"m1", 1), (0, b"m0", 2)]
    finally:
        closing([consumer])


def test_records_past_the_delivery_limit_are_archived(cluster):
    topic_id, _ = new_topic(cluster, "sc-limit")
    start_share_partitions(cluster, "sc-limit", topic_id, "sc-limit-group", 1)
    consumer = share_consumer(cluster, "sc-limit-group", "sc-limit", **{"share.acknowledgement.mode": "explicit"})
    try:
        produce(cluster, "sc-limit", [b"poison"])

        def release(consumer, message):
            consumer.acknowledge(message, AcknowledgeType.RELEASE)
            consumer.commit_sync()
        got = poll_until([consumer], DELIVERY_LIMIT + 1, timeout_s=15, on_message=release)
        assert [(m.offset(), m.delivery_count()) for _, m in got] == [(0, n) for n in range(1, DELIVERY_LIMIT + 1)]
    finally:
        closing([consumer])


def test_a_consumer_that_stops_acknowledging_loses_its_records(cluster):
    topic_id, _ = new_topic(cluster, "sc-stalled")
    start_share_partitions(cluster, "sc-stalled", topic_id, "sc-stalled-group", 1)
    stalled = share_consumer(cluster, "sc-stalled-group", "sc-stalled", **{"share.acknowledgement.mode": "explicit"})
    other = share_consumer(cluster, "sc-stalled-group", "sc-stalled")
    try:
        produce(cluster, "sc-stalled", values(5))
        first = poll_until([stalled], 1, timeout_s=30, settle_s=0)
        # The stalled consumer holds its acquisition and polls no more; the lock runs out and the
        # records go to the other member with their second delivery.
        got = poll_until([other], 5, timeout_s=30)
        assert sorted((m.offset(), m.value(), m.delivery_count()) for _, m in got) == \
            [(o, f"m{o}".encode(), 2) for o in range(5)]
        assert first[0][1].delivery_count() == 1
    finally:
        closing([other, stalled])


def delete_group(cluster, group: str) -> None:
    """DeleteGroups, once the group's members have left."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=30)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NON_EMPTY_GROUP or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def set_group_config(cluster, group: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                               incremental_configs=[entry])]).values()
    future.result(timeout=30)


def test_a_deleted_share_group_created_again_starts_afresh(cluster):
    """DeleteGroups deletes the share group's state: consumers of a group with that id start again at
    share.auto.offset.reset, not where the deleted group had got to."""
    topic_id, _ = new_topic(cluster, "sc-deleted")
    start_share_partitions(cluster, "sc-deleted", topic_id, "sc-deleted-group", 1)
    produce(cluster, "sc-deleted", values(10), batches=2)
    consumers = [share_consumer(cluster, "sc-deleted-group", "sc-deleted")]
    try:
        got = poll_until(consumers, 10)
        assert [(m.offset(), m.delivery_count()) for _, m in got] == [(o, 1) for o in range(10)]
    finally:
        closing(consumers)
    delete_group(cluster, "sc-deleted-group")
    set_group_config(cluster, "sc-deleted-group", "share.auto.offset.reset", "earliest")
    consumers = [share_consumer(cluster, "sc-deleted-group", "sc-deleted")]
    try:
        got = poll_until(consumers, 10)
        assert [(m.offset(), m.value(), m.delivery_count()) for _, m in got] == \
            [(o, f"m{o}".encode(), 1) for o in range(10)]
    finally:
        closing(consumers)


def test_a_new_leader_goes_on_from_the_persisted_state():
    """The leader dies holding acknowledged, released and acquired records: its successor reads the
    share coordinator's state, delivers the released and acquired ones again with their delivery
    counts raised, and never the acknowledged ones."""
    with Cluster(nodes=3, node_config={"group.share.record.lock.duration.ms": "60000"}) as cluster:
        topic_id, address = new_topic(cluster, "share-failover")
        old_leader = leader_of(cluster, "share-failover", 0)
        with opened(address, "share-failover-group", topic_id) as member:
            produce(cluster, "share-failover", values(6))
            assert member.fetch(topic_id, max_wait_ms=5000).acquired == [(0, 5, 1)]
            answer = member.acknowledge(topic_id, {0: [(0, 2, [ACCEPT, ACCEPT, RELEASE])]})
            assert answer.responses[0].partitions[0].error_code == 0
        cluster.kill_node(old_leader)
        deadline = time.monotonic() + 30
        while leader_of(cluster, "share-failover", 0) in (old_leader, -1):
            assert time.monotonic() < deadline, "no new leader"
            time.sleep(0.1)
        new_leader = leader_of(cluster, "share-failover", 0)
        successor = (cluster.host, cluster.nodes[new_leader].port)
        with ShareMember(successor, "share-failover-group") as member:
            got = member.fetch(topic_id, max_wait_ms=5000)
            while got.error_code == NOT_LEADER_OR_FOLLOWER:  # (the new term still being taken)
                assert time.monotonic() < deadline
                time.sleep(0.1)
                got = member.fetch(topic_id, max_wait_ms=5000)
            assert got.acquired == [(2, 5, 2)]
            assert got.values == {o: f"m{o}".encode() for o in range(2, 6)}
            assert member.fetch(topic_id, acks={0: [(2, 5, ACCEPT)]}, max_wait_ms=300).acquired == []
        assert [line for line in logged_errors(cluster) if f"node-{old_leader}" not in line] == []
