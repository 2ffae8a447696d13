"""Share groups: the simple assignor, the records' layouts, and membership against a real
`__consumer_offsets` partition log, replayed by a coordinator that takes over."""
import asyncio
import uuid
from types import SimpleNamespace

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage, TopicInfo
from cluster.formats.partition_log import PartitionLog
from node.groups import share_records as rec
from node.groups.persistence import GroupError
from node.groups.share import DEAD, EMPTY, STABLE
from node.groups.share_assignor import assign
from tests.unit.test_group_coordinator import LeaderBroker

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


# --- the assignor ---

def test_one_member_is_given_every_partition():
    assert assign({"a": {T1}}, {T1: 3}, {}) == {"a": {T1: {0, 1, 2}}}


def test_members_share_when_there_are_more_of_them_than_partitions():
    assert assign({"a": {T1}, "b": {T1}, "c": {T1}}, {T1: 1}, {}) == {m: {T1: {0}} for m in "abc"}


def test_a_member_joining_takes_places_from_the_others_and_they_keep_the_rest():
    first = assign({"a": {T1}}, {T1: 3}, {})
    second = assign({"a": {T1}, "b": {T1}}, {T1: 3}, first)
    assert second == {"a": {T1: {0, 1}}, "b": {T1: {2}}}
    third = assign({"a": {T1}, "b": {T1}, "c": {T1}}, {T1: 3}, second)
    assert third == {"a": {T1: {0}}, "b": {T1: {2}}, "c": {T1: {1}}}
    # Four members over three partitions: six places, every partition held by two members.
    fourth = assign({m: {T1} for m in "abcd"}, {T1: 3}, third)
    assert fourth == {"a": {T1: {0, 2}}, "b": {T1: {2}}, "c": {T1: {0, 1}}, "d": {T1: {1}}}


def test_a_member_leaving_gives_its_partitions_to_the_others():
    assert assign({"b": {T1}}, {T1: 3}, {"a": {T1: {0, 1}}, "b": {T1: {2}}}) == {"b": {T1: {0, 1, 2}}}


def test_the_same_subscriptions_pool_every_topic():
    assert assign({"a": {T1, T2}, "b": {T1, T2}}, {T1: 1, T2: 1}, {}) == {"a": {T1: {0}}, "b": {T2: {0}}}


def test_different_subscriptions_spread_each_topic_over_its_subscribers():
    assert assign({"a": {T1}, "b": {T1, T2}}, {T1: 2, T2: 2}, {}) == {"a": {T1: {0}}, "b": {T1: {1}, T2: {0, 1}}}


def test_partitions_of_unsubscribed_or_deleted_topics_are_taken_away():
    assert assign({"a": {T1}}, {T1: 1}, {"a": {T1: {0, 5}, T2: {0}}}) == {"a": {T1: {0}}}
    assert assign({"a": set()}, {}, {"a": {T1: {0}}}) == {"a": {}}


# --- records ---

def test_keys_carry_the_record_type_and_the_ids():
    assert rec.share_key(rec.CURRENT_MEMBER_ASSIGNMENT, "g", "m") == b"\x00\x0e\x00\x01g\x00\x01m"
    assert rec.share_key(rec.GROUP_METADATA, "g") == b"\x00\x0b\x00\x01g"
    assert rec.decode_share_key(rec.share_key(rec.MEMBER_METADATA, "g", "m")) == rec.ShareKey(10, "g", "m")
    assert rec.decode_share_key(rec.share_key(rec.STATE_PARTITION_METADATA, "g")) == rec.ShareKey(15, "g", None)
    assert rec.decode_share_key(b"\x00\x02\x00\x01g") is None  # a classic group's key
    assert rec.decode_share_key(b"\x00\x03\x00\x01g") is None  # a consumer group's


def test_values_in_the_flexible_layouts():
    metadata = rec.MemberMetadata(None, "client", "/127.0.0.1", ["a", "b"])
    assert rec.member_metadata_value(metadata) == b"\x00\x00\x00\x07client\x0b/127.0.0.1\x03\x02a\x02b\x00"
    assert rec.decode_member_metadata(rec.member_metadata_value(metadata)) == metadata
    assert rec.group_metadata_value(3, -2) == b"\x00\x00\x00\x00\x00\x03" + b"\xff" * 7 + b"\xfe\x00"
    assert rec.decode_group_metadata(rec.group_metadata_value(3, -2)) == (3, -2)
    assert rec.decode_target_metadata(rec.target_metadata_value(7)) == 7
    assert rec.target_member_value({T1: {1, 0}}) == \
        b"\x00\x00\x02" + T1.bytes + b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00"
    assert rec.decode_target_member(rec.target_member_value({T1: {1, 0}, T2: set()})) == {T1: {0, 1}, T2: set()}
    current = rec.CurrentAssignment(4, 3, rec.MEMBER_STATE_STABLE, {T2: {5}})
    assert rec.decode_current_assignment(rec.current_assignment_value(current)) == current


def test_tagged_fields_a_newer_writer_adds_are_skipped():
    value = rec.target_metadata_value(7)[:-1] + b"\x01\x05\x02hi"  # one tagged field, tag 5, two bytes
    assert rec.decode_target_metadata(value) == 7


# --- membership ---

class ShareBroker(LeaderBroker):
    def __init__(self, partition_log, **config):
        super().__init__(partition_log)
        self.config = BrokerConfig({"node.id": "1", "offsets.topic.num.partitions": "1", **config})
        self.image = MetadataImage()

    def add_topic(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        topic = TopicInfo(name, topic_id, {p: SimpleNamespace() for p in range(partitions)})
        self.image.topics[name] = self.image.topics_by_id[topic_id] = topic

    def topic_by_id(self, topic_id):
        return self.image.topics_by_id.get(topic_id)


def share_coordinator(partition_log, topics=(("t", T1, 3),), **config):
    from node.groups.coordinator import GroupCoordinator

    broker = ShareBroker(partition_log, **config)
    for topic in topics:
        broker.add_topic(*topic)
    coordinator = GroupCoordinator(broker)
    coordinator.load_partition(0, partition_log)
    return coordinator


async def beat(coordinator, member: str, epoch: int, topics=None, group="g"):
    return await coordinator.share.heartbeat(group, member, epoch, None, topics, "client", "/127.0.0.1")


def test_members_join_leave_and_a_new_coordinator_replays_them(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def write():
        coordinator = share_coordinator(partition_log)
        first = await beat(coordinator, "a", 0, ["t"])
        assert (first.error, first.member_epoch, first.heartbeat_interval_ms, first.assignment) == \
            (ErrorCode.NONE, 1, 500, {T1: {0, 1, 2}})
        assert (await beat(coordinator, "a", 1)).assignment is None
        assert (await beat(coordinator, "b", 0, ["t"])).assignment == {T1: {2}}
        assert (await beat(coordinator, "c", 0, ["t"])).assignment == {T1: {1}}
        assert (await beat(coordinator, "c", -1)).member_epoch == -1
        group = coordinator.groups["g"]
        assert (group.state, group.group_epoch, group.assignment_epoch, list(group.members)) == \
            (STABLE, 4, 3, ["a", "b"])
        coordinator.share.on_loaded(99)  # no partition of ours: nothing armed, nothing broken
        group.cancel_timers()

    async def read():
        coordinator = share_coordinator(partition_log)
        group = coordinator.groups["g"]
        assert (group.group_type, group.state, group.group_epoch, group.assignment_epoch) == ("share", STABLE, 4, 3)
        assert {m.member_id: (m.member_epoch, m.previous_member_epoch, m.assigned, m.subscribed_topic_names,
                              m.client_id, m.client_host) for m in group.members.values()} == {
            "a": (1, 0, {T1: {0, 1, 2}}, ["t"], "client", "/127.0.0.1"),
            "b": (2, 0, {T1: {2}}, ["t"], "client", "/127.0.0.1")}
        assert group.target == {"a": {T1: {0}}, "b": {T1: {2}}}
        # a moves to epoch 4, and is told of the partition it lost to the leaving c (now back).
        moved = await beat(coordinator, "a", 1)
        assert (moved.member_epoch, moved.assignment) == (4, {T1: {0, 1}})
        group.cancel_timers()

    asyncio.run(write())
    asyncio.run(read())


def test_kafka_refusals(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"),
                                        **{"group.share.max.size": "1"})
        missing = await beat(coordinator, "a", 1)
        assert (missing.error, missing.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Share group g not found.")
        assert (await beat(coordinator, "a", 0, ["t"])).error == ErrorCode.NONE
        fenced = await beat(coordinator, "a", 5)
        assert fenced.error == ErrorCode.FENCED_MEMBER_EPOCH
        assert (await beat(coordinator, "a", 0, ["t"])).error == ErrorCode.NONE  # the previous epoch, 0
        full = await beat(coordinator, "b", 0, ["t"])
        assert (full.error, full.message) == \
            (ErrorCode.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 1 members.")
        # Kafka checks the size before the member: an unknown member of a full group is told the group is full.
        assert (await beat(coordinator, "b", 1)).error == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert (await beat(coordinator, "b", -1)).error == ErrorCode.UNKNOWN_MEMBER_ID
        coordinator.groups["g"].cancel_timers()

    asyncio.run(scenario())


def test_a_topic_created_later_bumps_the_epoch_at_the_next_heartbeat(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"))
        assert (await beat(coordinator, "a", 0, ["t", "u"])).assignment == {T1: {0, 1, 2}}
        same = await beat(coordinator, "a", 1)
        assert (same.member_epoch, same.assignment) == (1, None)
        coordinator.broker.add_topic("u", T2, 1)
        grown = await beat(coordinator, "a", 1)
        assert (grown.member_epoch, grown.assignment) == (2, {T1: {0, 1, 2}, T2: {0}})
        # A subscription that drops a topic takes its partitions away.
        narrowed = await beat(coordinator, "a", 2, ["u"])
        assert (narrowed.member_epoch, narrowed.assignment) == (3, {T2: {0}})
        coordinator.groups["g"].cancel_timers()

    asyncio.run(scenario())


def test_a_silent_member_is_removed_after_its_session(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"),
                                        **{"group.share.session.timeout.ms": "50"})
        await beat(coordinator, "a", 0, ["t"])
        await asyncio.sleep(0.2)
        group = coordinator.groups["g"]
        assert (group.state, group.members, group.group_epoch) == (EMPTY, {}, 2)
        assert (await beat(coordinator, "a", 1)).error == ErrorCode.UNKNOWN_MEMBER_ID

    asyncio.run(scenario())


def test_deleting_an_empty_group_tombstones_every_record(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def write():
        coordinator = share_coordinator(partition_log)
        await beat(coordinator, "a", 0, ["t"])
        assert coordinator.delete_group("g") == ErrorCode.NON_EMPTY_GROUP
        await beat(coordinator, "a", -1)
        group = coordinator.groups["g"]
        assert coordinator.delete_group("g") == ErrorCode.NONE
        assert group.state == DEAD and "g" not in coordinator.groups

    asyncio.run(write())
    assert "g" not in share_coordinator(partition_log).groups


def test_a_member_whose_removal_was_not_written_keeps_a_session(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"),
                                        **{"group.share.session.timeout.ms": "50"})
        await beat(coordinator, "a", 0, ["t"])
        await beat(coordinator, "b", 0, ["t"])
        group_log = coordinator.share.group_log
        append = group_log.append_replicated

        async def refused(*args, **kwargs):
            raise GroupError(ErrorCode.NOT_ENOUGH_REPLICAS)

        group_log.append_replicated = refused
        assert (await beat(coordinator, "a", -1)).error == ErrorCode.NOT_ENOUGH_REPLICAS
        await asyncio.sleep(0.1)  # b's session expired too, and its removal was not written either
        group = coordinator.groups["g"]
        assert sorted(group.members) == ["a", "b"]
        assert all(member.expiry is not None for member in group.members.values())
        group_log.append_replicated = append
        await asyncio.sleep(0.2)  # the sessions run out again, and now the removals are written
        assert (group.state, group.members) == (EMPTY, {})

    asyncio.run(scenario())


def test_the_same_topics_in_another_order_are_the_same_subscription(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"),
                                        topics=(("t", T1, 1), ("u", T2, 1)))
        assert (await beat(coordinator, "a", 0, ["u", "t"])).member_epoch == 1
        again = await beat(coordinator, "a", 1, ["t", "u", "t"])
        assert (again.error, again.member_epoch) == (ErrorCode.NONE, 1)
        assert coordinator.groups["g"].group_epoch == 1
        coordinator.groups["g"].cancel_timers()

    asyncio.run(scenario())


def test_a_share_group_has_no_rebalance_to_start(tmp_path):
    async def scenario():
        coordinator = share_coordinator(PartitionLog(tmp_path / "__consumer_offsets-0"))
        await beat(coordinator, "a", 0, ["t"])
        assert coordinator.force_rebalance("g") == (ErrorCode.INVALID_REQUEST, None)
        assert coordinator.groups["g"].group_epoch == 1
        coordinator.groups["g"].cancel_timers()

    asyncio.run(scenario())


def test_the_group_remembers_every_topic_subscribed_to_for_deleting_its_state(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def write():
        coordinator = share_coordinator(partition_log, topics=(("t", T1, 1), ("u", T2, 1)))
        await beat(coordinator, "a", 0, ["t"])
        await beat(coordinator, "b", 0, ["u"])
        await beat(coordinator, "a", -1)
        await beat(coordinator, "b", -1)
        group = coordinator.groups["g"]
        assert (group.state, group.state_topics) == (EMPTY, {"t", "u"})

    asyncio.run(write())
    assert share_coordinator(partition_log).groups["g"].state_topics == {"t", "u"}
