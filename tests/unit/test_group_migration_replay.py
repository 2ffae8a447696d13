"""Groups converted between the protocols by a coordinator writing to a real `__consumer_offsets`
partition log, and a new coordinator replaying that log (a failover): the last records win."""
import asyncio
import uuid
from types import SimpleNamespace

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo, TopicInfo
from cluster.formats.partition_log import PartitionLog
from node.groups import consumer_records
from node.groups.classic import PREPARING, STABLE, ClassicGroup
from node.groups.consumer import ClassicMemberMetadata, ConsumerGroup
from node.groups.consumer_membership import Heartbeat
from node.groups.coordinator import GroupCoordinator
from node.groups.records import CommittedOffset, decode_assignment
from tests.unit.test_group_coordinator import NODE_ID, SESSION_MS, LeaderBroker

TOPIC_ID = uuid.UUID(int=42)
OFFSETS = {("t", 0): CommittedOffset(5), ("t", 1): CommittedOffset(7)}


class BrokerWithTopic(LeaderBroker):
    """The one-replica node of test_group_coordinator, whose metadata holds topic "t" (4 partitions)."""

    def __init__(self, partition_log, policy: str):
        super().__init__(partition_log)
        self.config = BrokerConfig({"node.id": str(NODE_ID), "offsets.topic.num.partitions": "1",
                                    "group.consumer.migration.policy": policy})
        topic = TopicInfo("t", TOPIC_ID, {p: PartitionInfo(p, NODE_ID, [NODE_ID], [NODE_ID], 0) for p in range(4)})
        self.image = SimpleNamespace(topics={"t": topic}, topics_by_id={TOPIC_ID: topic}, configs={})

    def topic(self, name):
        return self.image.topics.get(name)

    def topic_by_id(self, topic_id):
        return self.image.topics_by_id.get(topic_id)


def coordinator_of(partition_log: PartitionLog, policy: str = "bidirectional") -> GroupCoordinator:
    coordinator = GroupCoordinator(BrokerWithTopic(partition_log, policy))
    coordinator.load_partition(0, partition_log)
    return coordinator


SUBSCRIPTION = ConsumerProtocolSubscription(version=1, topics=["t"], user_data=None,
                                            owned_partitions=[]).encode(version=1)


def assignment(partitions: list[int]) -> bytes:
    return ConsumerProtocolAssignment(version=1, user_data=None, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=partitions)]).encode(version=1)


async def classic_member(coordinator: GroupCoordinator) -> str:
    joined = await coordinator.classic.join("g", "", None, "classic-client", "/10.0.0.1", SESSION_MS, 20_000,
                                            "consumer", [("range", SUBSCRIPTION)], require_known_member=False)
    error, _ = await coordinator.classic.sync("g", joined.generation, joined.member_id,
                                              {joined.member_id: assignment([0, 1, 2, 3])})
    assert (error, joined.generation) == (ErrorCode.NONE, 1)
    await coordinator.commit("g", OFFSETS)
    return joined.member_id


def joining(member_id: str) -> Heartbeat:
    return Heartbeat("g", member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], owned={})


def test_an_upgrade_and_a_downgrade_replay_as_they_happened(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def upgrade() -> str:
        coordinator = coordinator_of(partition_log)
        classic_id = await classic_member(coordinator)
        joined = await coordinator.consumer.heartbeat(joining("modern"))
        # The classic member still holds every partition: the new one waits for their release.
        assert (joined.error, joined.member_epoch, joined.assignment) == (ErrorCode.NONE, 2, {})
        group = coordinator.groups["g"]
        assert isinstance(group, ConsumerGroup) and group.group_epoch == 2
        assert group.members[classic_id].member_epoch == 1
        assert group.members[classic_id].classic == ClassicMemberMetadata(SESSION_MS, [("range", SUBSCRIPTION)])
        assert coordinator.classic_members.heartbeat(group, 1, classic_id, None) == ErrorCode.REBALANCE_IN_PROGRESS
        coordinator.unload_partition(0)
        return classic_id

    async def replayed_upgrade(classic_id: str):
        coordinator = coordinator_of(partition_log)
        group = coordinator.groups["g"]
        assert isinstance(group, ConsumerGroup) and (group.group_epoch, group.assignment_epoch) == (2, 2)
        assert sorted(group.members) == sorted([classic_id, "modern"])
        member = group.members[classic_id]
        assert member.classic == ClassicMemberMetadata(SESSION_MS, [("range", SUBSCRIPTION)])
        assert (member.member_epoch, member.rebalance_timeout_ms) == (1, 20_000)
        assert member.assigned == {TOPIC_ID: {0, 1, 2, 3}}
        assert group.members["modern"].classic is None
        assert coordinator.committed("g") == OFFSETS
        # The classic member rejoins: it reconciles to the new epoch and syncs half the partitions.
        joined = await coordinator.classic_members.join(group, classic_id, None, "classic-client", "/10.0.0.1",
                                                        SESSION_MS, 20_000, "consumer", [("range", SUBSCRIPTION)],
                                                        require_known_member=True)
        # (A new coordinator recomputes the subscribed topics' metadata, which may move the epoch again.)
        epoch = group.group_epoch
        assert (joined.error, joined.generation, joined.leader, joined.protocol) == (ErrorCode.NONE, epoch, "", "range")
        error, data = coordinator.classic_members.sync(group, epoch, classic_id, None, "consumer", "range")
        kept = decode_assignment(data)["t"]
        assert error == ErrorCode.NONE and len(kept) == 2 and data[:2] == b"\x00\x01"
        # The member of the consumer protocol leaves: the classic member is alone, the group classic.
        left = await coordinator.consumer.heartbeat(Heartbeat("g", "modern", -1))
        assert left.error == ErrorCode.NONE
        classic = coordinator.groups["g"]
        assert isinstance(classic, ClassicGroup) and (classic.state, classic.generation) == (PREPARING, epoch)
        assert list(classic.members) == [classic_id] and classic.protocol == "range"
        coordinator.unload_partition(0)
        return epoch, kept

    async def replayed_downgrade(classic_id: str, epoch: int, kept: list[int]):
        coordinator = coordinator_of(partition_log)
        group = coordinator.groups["g"]
        assert isinstance(group, ClassicGroup) and (group.state, group.generation) == (STABLE, epoch)
        assert (group.protocol_type, group.protocol, list(group.members)) == ("consumer", "range", [classic_id])
        # Its target assignment when the group was converted (the rebalance that follows gives it all).
        assert decode_assignment(group.members[classic_id].assignment) == {"t": kept}
        assert coordinator.committed("g") == OFFSETS
        coordinator.unload_partition(0)

    classic_id = asyncio.run(upgrade())
    epoch, kept = asyncio.run(replayed_upgrade(classic_id))
    asyncio.run(replayed_downgrade(classic_id, epoch, kept))


def test_a_classic_group_whose_subscriptions_cannot_be_read_is_not_upgraded(tmp_path):
    async def run():
        coordinator = coordinator_of(PartitionLog(tmp_path / "__consumer_offsets-0"))
        joined = await coordinator.classic.join("g", "", None, "client", "/10.0.0.1", SESSION_MS, 20_000, "consumer",
                                                [("range", b"\x00\x01\x00")], require_known_member=False)
        refused = await coordinator.consumer.heartbeat(joining("modern"))
        assert (refused.error, refused.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group g to "
                                                    "consumer group because the embedded consumer protocol is "
                                                    "malformed.")
        group = coordinator.groups["g"]
        assert isinstance(group, ClassicGroup) and list(group.members) == [joined.member_id]
        coordinator.unload_partition(0)

    asyncio.run(run())


def test_migration_disabled_leaves_the_classic_group_as_it_was(tmp_path):
    async def run():
        coordinator = coordinator_of(PartitionLog(tmp_path / "__consumer_offsets-0"), policy="disabled")
        classic_id = await classic_member(coordinator)
        refused = await coordinator.consumer.heartbeat(joining("modern"))
        assert (refused.error, refused.message) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group g to consumer group because online upgrade is "
                                          "disabled.")
        group = coordinator.groups["g"]
        assert isinstance(group, ClassicGroup) and (group.state, group.generation, list(group.members)) == (
            STABLE, 1, [classic_id])
        # An empty classic group becomes a consumer group whatever the policy.
        assert coordinator.classic.leave("g", [(classic_id, None)]) == [ErrorCode.NONE]
        await asyncio.sleep(0)
        joined = await coordinator.consumer.heartbeat(joining("modern"))
        assert (joined.error, joined.assignment) == (ErrorCode.NONE, {TOPIC_ID: {0, 1, 2, 3}})
        assert isinstance(coordinator.groups["g"], ConsumerGroup) and coordinator.committed("g") == OFFSETS
        coordinator.unload_partition(0)

    asyncio.run(run())


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def run():
        coordinator = coordinator_of(partition_log)
        joined = await coordinator.consumer.heartbeat(Heartbeat(
            "g", "modern", 0, instance_id="instance", rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
            owned={}))
        assert joined.assignment == {TOPIC_ID: {0, 1, 2, 3}}
        group = coordinator.groups["g"]
        rejoined = await coordinator.classic_members.join(
            group, "", "instance", "classic-client", "/10.0.0.1", SESSION_MS, 20_000, "consumer",
            [("range", SUBSCRIPTION)], require_known_member=True)
        assert (rejoined.error, rejoined.generation) == (ErrorCode.NONE, group.group_epoch)
        classic = coordinator.groups["g"]
        assert isinstance(classic, ClassicGroup) and (classic.state, classic.generation) == (STABLE, group.group_epoch)
        assert list(classic.members) == [rejoined.member_id]
        assert coordinator.classic.heartbeat("g", rejoined.generation, rejoined.member_id) == ErrorCode.NONE
        error, data = await coordinator.classic.sync("g", rejoined.generation, rejoined.member_id, {})
        assert (error, decode_assignment(data)) == (ErrorCode.NONE, {"t": [0, 1, 2, 3]})
        coordinator.unload_partition(0)
        return rejoined.member_id, group.group_epoch

    async def replayed(member_id: str, generation: int):
        coordinator = coordinator_of(partition_log)
        group = coordinator.groups["g"]
        assert isinstance(group, ClassicGroup) and (group.state, group.generation) == (STABLE, generation)
        assert group.members[member_id].group_instance_id == "instance"
        coordinator.unload_partition(0)

    asyncio.run(replayed(*asyncio.run(run())))


def test_classic_member_metadata_is_member_metadata_tag_0_as_kafka_writes_it():
    # ConsumerGroupMemberMetadataValue v0 as kafka.protocol, built from Kafka's schema, encodes it.
    kafka_bytes = bytes.fromhex("00000002720263032f6803026102620000007530000100140100002710020672616e676506000178797a"
                                "0000")
    metadata = consumer_records.MemberMetadata(None, "r", "c", "/h", ["a", "b"], None, 30_000, None,
                                               ClassicMemberMetadata(10_000, [("range", b"\x00\x01xyz")]))
    assert consumer_records.member_metadata_value(metadata) == kafka_bytes
    assert consumer_records.decode_member_metadata(kafka_bytes) == metadata
