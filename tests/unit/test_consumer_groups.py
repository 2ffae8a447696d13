"""KIP-848 consumer groups, without processes: the assignors, reconciliation, the records' bytes, and
the membership writing to a real `__consumer_offsets` partition log."""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import uuid
from types import SimpleNamespace

import pytest

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo, TopicInfo
from cluster.formats.partition_log import PartitionLog
from node.groups import consumer_records as records
from node.groups.assignors import MemberSubscription, range_, uniform
from node.groups.consumer_membership import Heartbeat
from node.groups.consumer_reconciliation import FencedMember, Reconciled, reconcile
from node.groups.coordinator import GroupCoordinator
from tests.unit.test_group_coordinator import NODE_ID, SESSION_MS
from tests.unit.test_group_migration_replay import SUBSCRIPTION, TOPIC_ID, BrokerWithTopic, classic_member

A = uuid.UUID("00000000-0000-0000-0000-00000000000a")
B = uuid.UUID("00000000-0000-0000-0000-00000000000b")


# --- assignors ---

def test_uniform_gives_every_partition_once_and_balances():
    members = {m: MemberSubscription({A}) for m in ("m1", "m2", "m3")}
    target = uniform(members, {A: 8})
    assert sorted(p for a in target.values() for p in a.get(A, ())) == list(range(8))
    assert sorted(len(a.get(A, ())) for a in target.values()) == [2, 3, 3]


def test_uniform_keeps_partitions_where_they_are():
    current = {"m1": {A: {0, 1, 2, 3, 4, 5}}}
    target = uniform({"m1": MemberSubscription({A}, current["m1"]), "m2": MemberSubscription({A})}, {A: 6})
    assert target["m1"] == {A: {0, 1, 2}} and target["m2"] == {A: {3, 4, 5}}
    # A third member takes one from each; nobody else's partitions move.
    again = uniform({"m1": MemberSubscription({A}, target["m1"]), "m2": MemberSubscription({A}, target["m2"]),
                     "m3": MemberSubscription({A})}, {A: 6})
    assert again == {"m1": {A: {0, 1}}, "m2": {A: {3, 4}}, "m3": {A: {2, 5}}}


def test_uniform_with_different_subscriptions_gives_only_subscribed_topics():
    members = {"m1": MemberSubscription({A}), "m2": MemberSubscription({A, B})}
    target = uniform(members, {A: 2, B: 2})
    assert target["m1"] == {A: {0, 1}} and target["m2"] == {B: {0, 1}}


def test_uniform_drops_partitions_of_topics_no_longer_subscribed_or_gone():
    members = {"m1": MemberSubscription({A}, {A: {0, 5}, B: {0}})}
    assert uniform(members, {A: 2}) == {"m1": {A: {0, 1}}}


def test_range_splits_each_topic_in_member_order():
    members = {m: MemberSubscription({A, B}) for m in ("m2", "m1")}
    target = range_(members, {A: 5, B: 2})
    assert target == {"m1": {A: {0, 1, 2}, B: {0}}, "m2": {A: {3, 4}, B: {1}}}


def test_range_orders_static_members_by_instance_id_before_the_others_by_member_id():
    members = {"m0": MemberSubscription({A}), "m1": MemberSubscription({A}, instance_id="i2"),
               "m9": MemberSubscription({A}, instance_id="i1")}
    assert range_(members, {A: 5}) == {"m9": {A: {0, 1}}, "m1": {A: {2, 3}}, "m0": {A: {4}}}
    # i1 comes back under a member id that sorts last: it keeps its range.
    members["a0"] = members.pop("m9")
    assert range_(members, {A: 5}) == {"a0": {A: {0, 1}}, "m1": {A: {2, 3}}, "m0": {A: {4}}}


def test_range_leaves_members_without_partitions_when_there_are_fewer():
    members = {m: MemberSubscription({A}) for m in ("m1", "m2", "m3")}
    assert range_(members, {A: 2}) == {"m1": {A: {0}}, "m2": {A: {1}}, "m3": {}}


# --- reconciliation ---

def free(_topic, _partition):
    return -1


def test_a_new_member_takes_free_partitions_at_the_target_epoch():
    nxt = reconcile(Reconciled(0, 0, "STABLE", {}, {}), 3, {A: {0, 1}}, {}, free)
    assert nxt == Reconciled(3, 0, "STABLE", {A: {0, 1}}, {})


def test_a_partition_held_by_another_member_waits_for_its_release():
    nxt = reconcile(Reconciled(0, 0, "STABLE", {}, {}), 3, {A: {0, 1}}, {},
                    lambda t, p: 2 if p == 1 else -1)
    assert nxt == Reconciled(3, 0, "UNRELEASED_PARTITIONS", {A: {0}}, {})
    released = reconcile(nxt, 3, {A: {0, 1}}, {A: {0}}, free)
    assert released == Reconciled(3, 3, "STABLE", {A: {0, 1}}, {})


def test_an_owner_revokes_before_its_epoch_moves():
    owner = Reconciled(2, 1, "STABLE", {A: {0, 1}}, {})
    revoking = reconcile(owner, 3, {A: {0}}, {A: {0, 1}}, free)
    assert revoking == Reconciled(2, 2, "UNREVOKED_PARTITIONS", {A: {0}}, {A: {1}})
    # Still owning partition 1: nothing changes.
    assert reconcile(revoking, 3, {A: {0}}, {A: {0, 1}}, free) == revoking
    # Unknown ownership (owned not sent) counts as still owning.
    assert reconcile(revoking, 3, {A: {0}}, None, free) == revoking
    done = reconcile(revoking, 3, {A: {0}}, {A: {0}}, free)
    assert done == Reconciled(3, 2, "STABLE", {A: {0}}, {})


def test_a_member_that_owns_nothing_of_what_it_must_revoke_moves_at_once():
    owner = Reconciled(2, 1, "STABLE", {A: {0, 1}}, {})
    assert reconcile(owner, 3, {A: {0, 2}}, {A: {0}}, free) == Reconciled(3, 2, "STABLE", {A: {0, 2}}, {})


def test_a_member_in_unknown_state_with_partitions_is_fenced():
    with pytest.raises(FencedMember):
        reconcile(Reconciled(2, 1, "UNKNOWN", {}, {}), 3, {}, {A: {0}}, free)


# --- records, against the bytes of Kafka's JSON layouts ---

def test_group_metadata_key_and_value_bytes():
    assert records.key(records.GROUP_METADATA, "g") == b"\x00\x03\x00\x01g"
    # version 0, Epoch int32, empty tagged fields
    assert records.group_metadata_value(7) == b"\x00\x00\x00\x00\x00\x07\x00"
    assert records.decode_key(b"\x00\x03\x00\x01g") == (3, "g", None)


def test_member_keys_carry_the_member_id():
    key = records.key(records.CURRENT_MEMBER_ASSIGNMENT, "g", "m1")
    assert key == b"\x00\x08\x00\x01g\x00\x02m1"
    assert records.decode_key(key) == (8, "g", "m1")
    assert records.decode_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00") is None


def test_member_metadata_value_bytes_and_round_trip():
    value = records.MemberMetadata(None, "r", "c", "/h", ["t"], "x.*", 300, "uniform")
    data = records.member_metadata_value(value)
    assert data == (b"\x00\x00" + b"\x00" + b"\x02r" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x04x.*"
                    + b"\x00\x00\x01\x2c" + b"\x08uniform" + b"\x00")
    assert records.decode_member_metadata(data) == value


def test_current_assignment_value_bytes_and_round_trip():
    value = records.MemberAssignment(5, 4, "UNREVOKED_PARTITIONS", {A: {1, 0}}, {B: {2}})
    data = records.current_assignment_value(value)
    assert data == (b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x01"
                    + b"\x02" + A.bytes + b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00"
                    + b"\x02" + B.bytes + b"\x02\x00\x00\x00\x02\x00" + b"\x00")
    assert records.decode_current_assignment(data) == value


def test_target_assignment_records_round_trip():
    data = records.target_assignment_member_value({A: {0, 3}})
    assert data == b"\x00\x00\x02" + A.bytes + b"\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00"
    assert records.decode_target_assignment_member(data) == {A: {0, 3}}
    assert records.decode_target_assignment_metadata(records.target_assignment_metadata_value(9)) == 9


def test_values_with_tagged_fields_are_read():
    # MetadataHash (tag 0, int64) after the epoch, as Kafka 4.1 writes it.
    data = b"\x00\x00\x00\x00\x00\x07" + b"\x01\x00\x08" + b"\x00" * 8
    assert records.decode_group_metadata(data) == 7


# --- the membership on a partition log ---

class ShortOfReplicas(BrokerWithTopic):
    """The node leads `__consumer_offsets`-0 with replicas 1-3 of which only itself is in sync:
    writes are refused while min.insync.replicas is 2."""

    def __init__(self, partition_log):
        super().__init__(partition_log, "bidirectional")
        self.min_isr = "1"

    def partition(self, topic, index):
        return SimpleNamespace(leader=NODE_ID, leader_epoch=0, isr=[NODE_ID], replicas=[NODE_ID, 2, 3])

    def topic_config(self, topic, name):
        return self.min_isr if name == "min.insync.replicas" else super().topic_config(topic, name)


def joining(group_id: str, member_id: str) -> Heartbeat:
    return Heartbeat(group_id, member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], owned={})


def as_stored(group) -> dict:
    """Everything of a group but its timers."""
    members = {member_id: {f.name: copy.deepcopy(getattr(m, f.name)) for f in dataclasses.fields(m) if f.compare}
               for member_id, m in group.members.items()}
    return {f.name: copy.deepcopy(getattr(group, f.name)) for f in dataclasses.fields(group)
            if f.name != "members"} | {"members": members}


def test_a_heartbeat_refused_for_min_isr_leaves_the_group_as_it_was_and_its_retry_writes(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def run():
        broker = ShortOfReplicas(partition_log)
        coordinator = GroupCoordinator(broker)
        coordinator.load_partition(0, partition_log)
        first = await coordinator.consumer.heartbeat(joining("g", "m1"))
        assert (first.error, first.member_epoch) == (ErrorCode.NONE, 1)
        group = coordinator.groups["g"]
        before, end = as_stored(group), partition_log.log_end_offset
        broker.min_isr = "2"
        refused = await coordinator.consumer.heartbeat(joining("g", "m2"))
        assert refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert as_stored(group) == before and partition_log.log_end_offset == end
        # A group the refused heartbeat would have created is not left behind.
        assert (await coordinator.consumer.heartbeat(joining("new", "m1"))).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "new" not in coordinator.groups
        # m1, stable at its target, writes nothing: its heartbeat is answered.
        stable = await coordinator.consumer.heartbeat(Heartbeat("g", "m1", 1))
        assert (stable.error, stable.member_epoch) == (ErrorCode.NONE, 1)
        broker.min_isr = "1"
        retried = await coordinator.consumer.heartbeat(joining("g", "m2"))
        assert (retried.error, retried.member_epoch, group.group_epoch) == (ErrorCode.NONE, 2, 2)
        assert partition_log.log_end_offset > end
        coordinator.unload_partition(0)
        # What a new coordinator reads back is the group as the retry left it.
        replayed = GroupCoordinator(ShortOfReplicas(partition_log))
        replayed.load_partition(0, partition_log)
        group = replayed.groups["g"]
        assert (sorted(group.members), group.group_epoch, group.assignment_epoch) == (["m1", "m2"], 2, 2)
        assert sorted(p for a in group.target.values() for p in a[TOPIC_ID]) == [0, 1, 2, 3]
        group.cancel_timers()

    asyncio.run(run())


def test_only_a_change_of_subscribed_topics_has_the_group_resolve_its_subscription_again(tmp_path, monkeypatch):
    from node.groups import consumer_membership

    resolved: list[str] = []
    counts = consumer_membership.subscribed_partition_counts
    monkeypatch.setattr(consumer_membership, "subscribed_partition_counts",
                        lambda group, topics: resolved.append(group.group_id) or counts(group, topics))
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def run():
        broker = BrokerWithTopic(partition_log, "bidirectional")
        coordinator = GroupCoordinator(broker)
        coordinator.load_partition(0, partition_log)
        membership = coordinator.consumer
        for member_id in ("m1", "m2"):
            assert (await membership.heartbeat(joining("g", member_id))).error == ErrorCode.NONE
        group = coordinator.groups["g"]
        for _ in range(3):  # each revokes and receives its share
            for member in list(group.members.values()):
                result = await membership.heartbeat(Heartbeat("g", member.member_id, member.member_epoch,
                                                              owned=member.assigned))
                assert result.error == ErrorCode.NONE
        assert (group.state, group.group_epoch) == ("Stable", 2)
        membership.metadata_changed([group])  # the first look at the topics resolves every group once
        resolved.clear()
        for _ in range(3):
            for member_id in ("m1", "m2"):
                assert (await membership.heartbeat(Heartbeat("g", member_id, 2))).member_epoch == 2
        other = TopicInfo("other", uuid.UUID(int=7), {0: PartitionInfo(0, NODE_ID, [NODE_ID], [NODE_ID], 0)})
        broker.image.topics["other"] = broker.image.topics_by_id[other.topic_id] = other
        membership.metadata_changed([group])
        assert (resolved, group.group_epoch) == ([], 2)
        # "t" grows: the group resolves its subscription and moves to a new epoch and target.
        broker.image.topics["t"].partitions[4] = PartitionInfo(4, NODE_ID, [NODE_ID], [NODE_ID], 0)
        membership.metadata_changed([group])
        assert (resolved, group.group_epoch) == (["g", "g"], 3)
        assert sorted(p for a in group.target.values() for p in a[TOPIC_ID]) == [0, 1, 2, 3, 4]
        group.cancel_timers()

    asyncio.run(run())


def test_a_classic_members_join_or_leave_refused_for_min_isr_leaves_the_consumer_group_as_it_was(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def run():
        broker = ShortOfReplicas(partition_log)
        coordinator = GroupCoordinator(broker)
        coordinator.load_partition(0, partition_log)
        classic_id = await classic_member(coordinator)
        assert (await coordinator.consumer.heartbeat(joining("g", "modern"))).error == ErrorCode.NONE
        group = coordinator.groups["g"]
        before, end = as_stored(group), partition_log.log_end_offset
        broker.min_isr = "2"
        joined = await coordinator.classic_members.join(group, "", None, "c", "/10.0.0.2", SESSION_MS, 20_000,
                                                         "consumer", [("range", SUBSCRIPTION)], False)
        assert joined.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await coordinator.classic_members.leave(group, [(classic_id, None)]) == \
            [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        assert as_stored(group) == before and partition_log.log_end_offset == end
        assert coordinator.groups["g"] is group
        broker.min_isr = "1"
        assert await coordinator.classic_members.leave(group, [(classic_id, None)]) == [ErrorCode.NONE]
        assert list(group.members) == ["modern"] and partition_log.log_end_offset > end
        group.cancel_timers()

    asyncio.run(run())
