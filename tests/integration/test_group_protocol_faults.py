"""The new group protocols under coordinator faults: the node coordinating a KIP-848 consumer group or
a KIP-932 share group is moved, stopped, paused or isolated while its members heartbeat and read.

Consumer groups: the members keep reading, every message written is read, no partition is owned by
two members at once, the commits reach the partitions' ends at the new coordinator, and no error
reaches the application but lost connections. Share groups: every record is delivered and
accepted, and a record delivered more than once (its acknowledgement lost with the old leader or
coordinator) comes back with its delivery count raised, never past the limit. (A coordinator
killed outright, and a share partition's leader killed with records acquired, are covered in
test_consumer_groups.py, test_share_groups.py and test_share_consumers.py.)
"""
from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from cluster.launch import Cluster
from tests.integration.observe import committed, logged_errors
from tests.integration.test_consumer_groups import (  # members: the fixture that kills what a test started
    all_assigned, assert_never_owned_twice, coordinator, members, new_topic, produce, read_by, start, wait_until,
)

FAULTS = ("move", "stop", "pause", "isolate")
HOLD_S = 4  # how long a fault lasts: shorter than the members' session (group.consumer.session.timeout.ms)
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running
        # Coordinators moving is what failover is: nothing about it is worth an ERROR line.
        assert {name: lines for name, lines in logged_errors(running).items() if lines} == {}



def inject(cluster, fault: str, group: str, topic: str, preferred_leaders_after: bool = False) -> None:
    """The fault on the group's coordinator, held for HOLD_S, then undone; returns once the cluster
    is whole again (with preferred_leaders_after, once the preferred replicas lead again too)."""
    _, node_id = coordinator(cluster, group)
    if fault == "move":
        cluster.move_group_coordinator(group)
    elif fault == "stop":
        cluster.stop_node(node_id)
        time.sleep(HOLD_S)
        cluster.restart_node(node_id)
    elif fault == "pause":
        cluster.pause_node(node_id)
        time.sleep(HOLD_S)
        cluster.resume_node(node_id)
    else:
        cluster.isolate_node(node_id)
        time.sleep(HOLD_S)
        cluster.heal_node(node_id)
    for healed in (topic, "__consumer_offsets"):
        assert cluster.wait_in_sync(healed, timeout=60)
    if preferred_leaders_after:
        _preferred_leaders_lead_again(cluster)


def _preferred_leaders_lead_again(cluster) -> None:
    """Leaders the fault moved go back to their first replicas now rather than at the controller's next
    imbalance check (leader.imbalance.check.interval.seconds), which could fall while the test reads.
    That move is a leader change of its own: a share-partition's new leader makes the records acquired
    on the old one available again with the delivery count last written (acquisitions are not
    persisted, as in Kafka), so they would come back with an unchanged count."""
    cluster.control("elect_leaders", election_type=0, partitions=None)
    cluster.wait_ready()


@pytest.mark.parametrize("fault", FAULTS)
def test_consumer_group_members_read_on_through_a_coordinator_fault(cluster, members, fault):
    topic, group = new_topic(cluster, 4, prefix=f"kip848-{fault}"), f"g-{fault}-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 4, 10)
    pair = [start(members, cluster, group, topic), start(members, cluster, group, topic)]
    wait_until(lambda: [len(m.owned()) for m in pair] == [2, 2] and all_assigned(pair, topic, 4),
               what="two partitions each")
    wait_until(lambda: len(read_by(pair)) >= len(written), what="every message")
    inject(cluster, fault, group, topic)
    written |= produce(cluster, topic, 4, 10, start_at=10)
    wait_until(lambda: set(read_by(pair)) >= written, timeout=60, what=f"every message after the {fault}")
    wait_until(lambda: committed(cluster, group) == {p: 20 for p in range(4)}, timeout=30,
               what="the commits at the coordinator after the fault")
    assert set(read_by(pair)) == written
    assert_never_owned_twice(pair)
    assert all_assigned(pair, topic, 4)
    assert [[e for e in m.errors() if "_TRANSPORT" not in e] for m in pair] == [[], []]
    for member in pair:
        member.stop()


def _earliest(cluster, group: str) -> None:
    """The share group starts at each partition's beginning (share.auto.offset.reset, a group config)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _poll_into(consumers: list, deliveries: dict, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            for message in consumer.poll(0.1):
                if message.error() is None:
                    deliveries[(message.partition(), message.offset())].append(
                        (message.value(), message.delivery_count()))


@pytest.mark.parametrize("fault", FAULTS)
def test_share_group_delivers_everything_through_a_coordinator_fault(cluster, fault):
    from confluent_kafka import Producer

    topic, group = f"share-{fault}-{uuid.uuid4().hex[:8]}", f"sg-{fault}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    _earliest(cluster, group)
    consumers = [ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
                 for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    deliveries: dict[tuple[int, int], list] = defaultdict(list)
    try:
        for i in range(100):
            producer.produce(topic, value=f"m{i}".encode(), partition=i % 2)
        producer.flush(30)
        _poll_into(consumers, deliveries, 3)
        inject(cluster, fault, group, topic, preferred_leaders_after=True)
        for i in range(100, 200):
            producer.produce(topic, value=f"m{i}".encode(), partition=i % 2)
        producer.flush(30)
        deadline = time.monotonic() + 60
        while len(deliveries) < 200 and time.monotonic() < deadline:
            _poll_into(consumers, deliveries, 1)
        _poll_into(consumers, deliveries, 2)  # anything delivered again comes now
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(deliveries) == sorted((i % 2, i // 2) for i in range(200))
    for (partition, offset), got in deliveries.items():
        assert {value for value, _ in got} == {f"m{offset * 2 + partition}".encode()}
        assert [count for _, count in got] == list(range(1, len(got) + 1)), (partition, offset, got)
        assert len(got) <= DELIVERY_LIMIT
