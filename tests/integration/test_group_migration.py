"""Online migration between classic groups and KIP-848 consumer groups, with confluent-kafka members
on a 3-node cluster: a rolling upgrade of a classic group's members to group.protocol=consumer, a
consumer group that becomes classic again when its last consumer-protocol member leaves, and the
`group.consumer.migration.policy` that forbids it.

Members run as processes (tests/integration/kip848_member.py; GROUP_PROTOCOL=classic for the classic
ones, with the eager range assignor), commit what they read of a partition before giving it up, and
report their rebalance callbacks: every test checks the exact messages read, that none was read
twice, and that no partition was owned by two members at once.
"""
from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from cluster.formats.errors import ErrorCode
from cluster.launch import Cluster
from tests.integration.observe import committed, logged_errors
from tests.integration.test_consumer_groups import (  # members: the fixture that kills what a test started
    MemberProcess, all_assigned, assert_never_owned_twice, coordinator, heartbeat, join_fields, members, new_topic,
    produce, read_by, wait_until,
)
from tests.integration.wire import exchange_once

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running



def start(members: list, cluster, group: str, topic: str, protocol: str) -> MemberProcess:
    member = MemberProcess(cluster, group, topic, protocol=protocol)
    members.append(member)
    return member


def listed(cluster, group: str) -> tuple[str, str, str] | None:
    """(group type, protocol type, state) of the group as its coordinator's ListGroups v5 lists it."""
    address, _ = coordinator(cluster, group)
    answer = exchange_once(address, ListGroupsRequest[5](states_filter=[], types_filter=[]), ListGroupsResponse, 5)
    assert answer.error_code == 0
    return next(((g.group_type, g.protocol_type, g.group_state) for g in answer.groups if g.group_id == group), None)


def owned_partitions(member: MemberProcess, topic: str) -> list[int]:
    return sorted(p for t, p in member.owned() if t == topic)


def assert_read_exactly_once(group: list[MemberProcess], written: set) -> None:
    read = read_by(group)
    assert len(read) == len(set(read)), "a message read twice"
    assert set(read) == written


def test_a_rolling_upgrade_turns_a_classic_group_into_a_consumer_group(cluster, members):
    topic, group = new_topic(cluster, PARTITIONS), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, PARTITIONS, 10)
    first = start(members, cluster, group, topic, "classic")
    second = start(members, cluster, group, topic, "classic")
    wait_until(lambda: len(read_by([first, second])) >= len(written) and first.owned() and second.owned()
               and all_assigned([first, second], topic, PARTITIONS), what="two classic members reading everything")
    assert listed(cluster, group) == ("classic", "consumer", "Stable")

    # The first member restarts with the consumer protocol: it leaves the classic group, and joins
    # the group again with ConsumerGroupHeartbeat, which upgrades it.
    first.stop()
    wait_until(lambda: owned_partitions(second, topic) == [0, 1, 2, 3],
               what="the classic member taking every partition")
    upgraded = start(members, cluster, group, topic, "consumer")
    wait_until(lambda: owned_partitions(upgraded, topic) and all_assigned([upgraded, second], topic, PARTITIONS),
               what="the partitions split between the consumer-protocol member and the classic one")
    assert listed(cluster, group)[:2] == ("consumer", "consumer")
    more = produce(cluster, topic, PARTITIONS, 10, start_at=10)
    wait_until(lambda: len(read_by([first, second, upgraded])) >= len(written | more),
               what="the messages after the upgrade")
    assert len(owned_partitions(upgraded, topic)) == 2 and len(owned_partitions(second, topic)) == 2

    # The second member restarts with the consumer protocol too.
    second.stop()
    wait_until(lambda: owned_partitions(upgraded, topic) == [0, 1, 2, 3],
               what="the consumer member taking every partition")
    last = start(members, cluster, group, topic, "consumer")
    wait_until(lambda: owned_partitions(last, topic) and all_assigned([upgraded, last], topic, PARTITIONS),
               what="the two consumer-protocol members splitting the partitions")
    latest = produce(cluster, topic, PARTITIONS, 10, start_at=20)
    everyone = [first, second, upgraded, last]
    wait_until(lambda: len(read_by(everyone)) >= len(written | more | latest), what="every message")
    time.sleep(1)
    assert_read_exactly_once(everyone, written | more | latest)
    assert_never_owned_twice(everyone)
    assert listed(cluster, group) == ("consumer", "consumer", "Stable")
    assert not [e for m in everyone for e in m.errors()]
    upgraded.stop()
    last.stop()
    assert committed(cluster, group) == {p: 30 for p in range(PARTITIONS)}
    assert not any(logged_errors(cluster).values())


def test_the_last_consumer_protocol_member_leaving_makes_the_group_classic_again(cluster, members):
    topic, group = new_topic(cluster, PARTITIONS), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, PARTITIONS, 10)
    modern = start(members, cluster, group, topic, "consumer")
    wait_until(lambda: owned_partitions(modern, topic) == [0, 1, 2, 3],
               what="the consumer member taking every partition")
    classic = start(members, cluster, group, topic, "classic")
    wait_until(lambda: owned_partitions(classic, topic) and all_assigned([modern, classic], topic, PARTITIONS),
               what="a classic member joining the consumer group")
    assert listed(cluster, group)[:2] == ("consumer", "consumer")
    assert len(owned_partitions(classic, topic)) == 2

    modern.stop()
    wait_until(lambda: owned_partitions(classic, topic) == [0, 1, 2, 3],
               what="the classic member taking every partition of the downgraded group")
    assert listed(cluster, group) == ("classic", "consumer", "Stable")
    more = produce(cluster, topic, PARTITIONS, 10, start_at=10)
    wait_until(lambda: len(read_by([modern, classic])) >= len(written | more), what="every message")
    time.sleep(1)
    assert_read_exactly_once([modern, classic], written | more)
    assert_never_owned_twice([modern, classic])
    assert not modern.errors() and not classic.errors()
    classic.stop()
    assert committed(cluster, group) == {p: 20 for p in range(PARTITIONS)}
    assert listed(cluster, group) == ("classic", "consumer", "Empty")
    assert not any(logged_errors(cluster).values())


# --- group.consumer.migration.policy=disabled ---

@pytest.fixture(scope="module")
def no_migration_cluster():
    with Cluster(nodes=3, node_config={"group.consumer.migration.policy": "disabled"}) as running:
        yield running


def test_with_migration_disabled_a_classic_group_refuses_consumer_members(no_migration_cluster, members):
    cluster = no_migration_cluster
    topic, group = new_topic(cluster, 2), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 2, 5)
    classic = start(members, cluster, group, topic, "classic")
    wait_until(lambda: len(classic.records()) >= len(written), what="the classic member reading everything")
    before = listed(cluster, group)
    address, _ = coordinator(cluster, group)
    refused = heartbeat(address, **join_fields(group, uuid.uuid4().hex, topic))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Cannot upgrade classic group {group} to consumer group because online upgrade is disabled.")
    assert before == listed(cluster, group) == ("classic", "consumer", "Stable")
    more = produce(cluster, topic, 2, 5, start_at=5)
    wait_until(lambda: len(classic.records()) >= len(written | more), what="the classic member reading on")
    assert sorted(classic.records()) == sorted(written | more)
    assert owned_partitions(classic, topic) == [0, 1] and not classic.errors()

    # An empty classic group is replaced by a consumer group whatever the policy, its offsets kept.
    classic.stop()
    assert listed(cluster, group) == ("classic", "consumer", "Empty")
    latest = produce(cluster, topic, 2, 5, start_at=10)
    modern = start(members, cluster, group, topic, "consumer")
    wait_until(lambda: len(modern.records()) >= len(latest), what="the consumer member reading from the offsets")
    time.sleep(1)
    assert sorted(modern.records()) == sorted(latest)
    assert listed(cluster, group) == ("consumer", "consumer", "Stable")
    assert not any(logged_errors(cluster).values())


def test_a_group_with_members_of_both_protocols_survives_its_coordinator_dying(members):
    with Cluster(nodes=3) as own:
        topic, group = new_topic(own, PARTITIONS), f"g-{uuid.uuid4().hex[:8]}"
        written = produce(own, topic, PARTITIONS, 10)
        classic = start(members, own, group, topic, "classic")
        wait_until(lambda: owned_partitions(classic, topic) == [0, 1, 2, 3], what="the classic member's partitions")
        modern = start(members, own, group, topic, "consumer")
        pair = [classic, modern]
        wait_until(lambda: owned_partitions(modern, topic) and all_assigned(pair, topic, PARTITIONS),
                   what="the upgraded group splitting the partitions")
        wait_until(lambda: len(read_by(pair)) >= len(written), what="every message")
        _, coordinator_id = coordinator(own, group)
        own.kill_node(coordinator_id)
        survivor = next(node_id for node_id in own.nodes if node_id != coordinator_id)
        written |= produce(own, topic, PARTITIONS, 10, start_at=10)
        wait_until(lambda: len(read_by(pair)) >= len(written), timeout=60, what="every message after the failover")
        # The new coordinator replayed the consumer group with its classic member in it.
        address, new_coordinator = coordinator(own, group, via=survivor)
        assert new_coordinator != coordinator_id
        answer = exchange_once(address, ListGroupsRequest[5](states_filter=[], types_filter=["consumer"]),
                               ListGroupsResponse, 5)
        assert [g.group_id for g in answer.groups if g.group_id == group] == [group]
        wait_until(lambda: all_assigned(pair, topic, PARTITIONS) and len(owned_partitions(classic, topic)) == 2,
                   what="both members holding two partitions again")
        time.sleep(1)
        assert_read_exactly_once(pair, written)
        assert_never_owned_twice(pair)
        assert [[e for e in m.errors() if "_TRANSPORT" not in e] for m in pair] == [[], []]
        classic.stop()
        modern.stop()
        assert committed(own, group) == {p: 20 for p in range(PARTITIONS)}
