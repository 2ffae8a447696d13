"""The group coordinator against a real `__consumer_offsets` partition log, on a node that leads it."""
import asyncio
from types import SimpleNamespace

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import PartitionLog
from node.groups.classic import DEAD, EMPTY, STABLE
from node.groups.coordinator import GroupCoordinator
from node.fetch_sessions import FetchSessionCache
from node.groups.placement import OFFSETS_TOPIC
from node.groups.records import CommittedOffset
from node.partition import Partition
from node.producer_state import PartitionProducers

NODE_ID = 1
SESSION_MS = 10_000


class OneReplica:
    """The replica manager of a node that is the only replica of the one `__consumer_offsets` partition."""

    def __init__(self, partition_log: PartitionLog, broker):
        key = (OFFSETS_TOPIC, 0)
        self.partitions = {key: Partition(key, partition_log, PartitionProducers(), broker)}


class LeaderBroker:
    def __init__(self, partition_log: PartitionLog):
        self.node_id = NODE_ID
        self.config = BrokerConfig({"node.id": str(NODE_ID), "offsets.topic.num.partitions": "1"})
        self.fetch_sessions = FetchSessionCache()
        self.replicas = OneReplica(partition_log, self)
        self.authorizer = None

    def topic(self, name):
        return None

    def topic_config(self, topic, name):
        return self.config.topic_default(name)

    def partition(self, topic, index):
        return SimpleNamespace(leader=NODE_ID, leader_epoch=0, isr=[NODE_ID], replicas=[NODE_ID])


def coordinator_of(partition_log: PartitionLog) -> GroupCoordinator:
    coordinator = GroupCoordinator(LeaderBroker(partition_log))
    coordinator.load_partition(0, partition_log)
    return coordinator


async def join_and_sync(coordinator: GroupCoordinator, group_id: str, assignment: bytes) -> str:
    joined = await coordinator.classic.join(group_id, "", None, "client", "/127.0.0.1", SESSION_MS, SESSION_MS, "consumer",
                                    [("range", b"subscription")], require_known_member=False)
    assert joined.error == ErrorCode.NONE and joined.leader == joined.member_id
    error, assigned = await coordinator.classic.sync(group_id, joined.generation, joined.member_id,
                                             {joined.member_id: assignment})
    assert (error, assigned) == (ErrorCode.NONE, assignment)
    return joined.member_id


def test_a_new_coordinator_replays_generations_and_offsets(tmp_path):
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")

    async def write():
        coordinator = coordinator_of(partition_log)
        member_id = await join_and_sync(coordinator, "g", b"assignment")
        await coordinator.commit("g", {("t", 0): CommittedOffset(5, 0, "m", 1), ("t", 1): CommittedOffset(7)})
        coordinator.delete_offsets("g", [("t", 1)])
        await coordinator.commit("gone", {("t", 0): CommittedOffset(1)})
        assert coordinator.delete_group("gone") == ErrorCode.NONE
        return member_id

    async def read(member_id):
        coordinator = coordinator_of(partition_log)
        group = coordinator.group("g")
        assert (group.state, group.generation, list(group.members)) == (STABLE, 1, [member_id])
        assert group.members[member_id].assignment == b"assignment"
        assert coordinator.committed("g") == {("t", 0): CommittedOffset(5, 0, "m", 1)}
        assert coordinator.group("gone") is None and coordinator.committed("gone") == {}

    member_id = asyncio.run(write())
    asyncio.run(read(member_id))


def test_offsets_of_empty_groups_expire_and_then_the_group(tmp_path):
    async def run():
        coordinator = coordinator_of(PartitionLog(tmp_path / "__consumer_offsets-0"))
        await coordinator.commit("g", {("t", 0): CommittedOffset(5, commit_timestamp=1_000),
                                       ("t", 1): CommittedOffset(6, commit_timestamp=9_000)})
        assert coordinator.expire_offsets(retention_ms=5_000, now_ms=10_000) == 1
        assert list(coordinator.committed("g")) == [("t", 1)] and coordinator.group("g").state == EMPTY
        coordinator.forget_deleted_topics({"t"})
        assert coordinator.committed("g") == {}
        assert coordinator.expire_offsets(retention_ms=5_000, now_ms=10_000) == 0
        assert coordinator.group("g") is None

    asyncio.run(run())


def test_losing_the_partition_sends_waiting_members_to_the_new_coordinator(tmp_path):
    async def run():
        coordinator = coordinator_of(PartitionLog(tmp_path / "__consumer_offsets-0"))
        await join_and_sync(coordinator, "g", b"a")
        await coordinator.commit("g", {("t", 0): CommittedOffset(5)})
        group = coordinator.group("g")
        # A second member's join waits for the first member to rejoin.
        second = asyncio.ensure_future(coordinator.classic.join(
            "g", "", None, "client", "/127.0.0.1", SESSION_MS, SESSION_MS, "consumer", [("range", b"")],
            require_known_member=False))
        await asyncio.sleep(0)
        coordinator.unload_partition(0)
        assert (await second).error == ErrorCode.NOT_COORDINATOR
        assert group.state == DEAD and coordinator.group("g") is None and coordinator.committed("g") == {}
        assert coordinator.owns("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    asyncio.run(run())


def coordinator_with_initial_delay(tmp_path, delay_ms: int) -> GroupCoordinator:
    partition_log = PartitionLog(tmp_path / "__consumer_offsets-0")
    broker = LeaderBroker(partition_log)
    broker.config = BrokerConfig({"node.id": str(NODE_ID), "offsets.topic.num.partitions": "1",
                                  "group.initial.rebalance.delay.ms": str(delay_ms)})
    coordinator = GroupCoordinator(broker)
    coordinator.load_partition(0, partition_log)
    return coordinator


def test_members_joining_during_the_first_rebalance_share_its_generation(tmp_path):
    """Each member that joins while the group's first rebalance waits out its initial delay is in
    the group's first generation, not refused with INCONSISTENT_GROUP_PROTOCOL."""
    async def run():
        coordinator = coordinator_with_initial_delay(tmp_path, 50)

        def join(client):
            return coordinator.classic.join("g", "", None, client, "/127.0.0.1", SESSION_MS, SESSION_MS, "consumer",
                                            [("cooperative-sticky", b"s"), ("range", b"r")], require_known_member=False)

        joined = await asyncio.gather(*(join(f"client-{i}") for i in range(3)))
        assert [j.error for j in joined] == [ErrorCode.NONE] * 3
        assert {(j.generation, j.protocol_type, j.protocol) for j in joined} == {(1, "consumer", "cooperative-sticky")}
        assert len({j.member_id for j in joined}) == 3
        coordinator.group("g").cancel_timers()

    asyncio.run(run())


def test_the_initial_delay_starts_again_while_members_keep_arriving(tmp_path):
    """As Kafka's InitialDelayedJoin: a member arriving during the delay extends it by another delay."""
    async def run():
        coordinator = coordinator_with_initial_delay(tmp_path, 100)
        loop = asyncio.get_running_loop()

        async def join(client):
            joined = await coordinator.classic.join("g", "", None, client, "/127.0.0.1", SESSION_MS, SESSION_MS,
                                                    "consumer", [("range", b"")], require_known_member=False)
            return joined, loop.time()

        started = loop.time()
        first = asyncio.ensure_future(join("first"))
        await asyncio.sleep(0.08)
        (joined_first, first_at), (joined_second, _) = await asyncio.gather(first, join("second"))
        assert (joined_first.generation, joined_second.generation) == (1, 1)
        assert first_at - started >= 0.19  # one delay from the first join, then another for the second
        coordinator.group("g").cancel_timers()

    asyncio.run(run())
