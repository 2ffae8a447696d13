"""Transactional offset commits (TxnOffsetCommit, KIP-98/447) in the group coordinator: pending until
the transaction's marker, committed or aborted there, Kafka's rule between plain and transactional
commits, replay of a log holding both and their markers, and OffsetFetch's require_stable."""
import asyncio
from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.producer import TxnOffsetCommitRequest

from cluster.formats.control_records import end_txn_marker
from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch
from node.apis import offset_fetch, txn_offset_commit
from node.groups.coordinator import GroupCoordinator
from node.groups.persistence import GroupError
from node.groups.placement import OFFSETS_TOPIC
from node.groups.records import CommittedOffset, offset_key, offset_value
from tests.unit.test_group_coordinator import NODE_ID, LeaderBroker, coordinator_of, join_and_sync
from tests.unit.headers import request_header

T0, T1 = ("t", 0), ("t", 1)
PRODUCER, OTHER_PRODUCER = (1000, 3), (2000, 0)


def offsets_log(tmp_path) -> PartitionLog:
    return PartitionLog(tmp_path / f"{OFFSETS_TOPIC}-0")


def write_marker(partition_log: PartitionLog, producer: tuple[int, int], commit: bool) -> None:
    """What the transaction markers' writer appends to the partition before it calls complete_transaction."""
    partition_log.append(end_txn_marker(*producer, commit, coordinator_epoch=0, timestamp=1), leader_epoch=0)


def offsets_of(coordinator: GroupCoordinator, group_id: str) -> dict:
    return {position: offset.offset for position, offset in coordinator.committed(group_id).items()}


def test_a_transactional_commit_is_pending_until_its_transaction_commits(tmp_path):
    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = coordinator_of(partition_log)
        await coordinator.commit("g", {T0: CommittedOffset(1)})
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5, 2, "txn"),
                                                               T1: CommittedOffset(7)})
        assert offsets_of(coordinator, "g") == {T0: 1}
        assert coordinator.has_pending("g", T0) and coordinator.has_pending("g", T1)
        write_marker(partition_log, PRODUCER, commit=True)
        coordinator.complete_transaction(PRODUCER[0], [0], committed=True)
        committed = coordinator.committed("g")
        assert (committed[T0].offset, committed[T0].leader_epoch, committed[T0].metadata) == (5, 2, "txn")
        assert offsets_of(coordinator, "g") == {T0: 5, T1: 7}
        assert not coordinator.has_pending("g", T0) and not coordinator.offsets.has_open_transactions("g")

    asyncio.run(run())


def test_an_aborted_transaction_leaves_the_offsets_committed_before_it(tmp_path):
    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = coordinator_of(partition_log)
        await coordinator.commit("g", {T0: CommittedOffset(1)})
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5), T1: CommittedOffset(7)})
        write_marker(partition_log, PRODUCER, commit=False)
        coordinator.complete_transaction(PRODUCER[0], [0], committed=False)
        assert offsets_of(coordinator, "g") == {T0: 1} and not coordinator.has_pending("g", T0)

    asyncio.run(run())


def test_the_offsets_are_one_transactional_batch_the_partitions_producer_state_hears_of(tmp_path):
    recorded = []

    class Producers:
        def record(self, header, first_offset):
            recorded.append((header, first_offset))

    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = coordinator_of(partition_log)
        coordinator.broker.replicas.partitions[(OFFSETS_TOPIC, 0)].producers = Producers()
        await coordinator.commit("g", {T0: CommittedOffset(1)})
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5), T1: CommittedOffset(7)})
        plain, transactional = [header for _, _, header in partition_log.batch_headers()]
        assert not plain.is_transactional and plain.producer_id == -1
        assert transactional.is_transactional and not transactional.is_control
        assert (transactional.producer_id, transactional.producer_epoch) == PRODUCER
        assert (transactional.base_sequence, transactional.record_count) == (0, 2)
        assert recorded == [(transactional, transactional.base_offset)]  # only the transactional write, as written

    asyncio.run(run())


def test_a_transaction_ends_only_in_the_partitions_its_markers_reached(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)})
        coordinator.complete_transaction(PRODUCER[0], [1, 7], committed=True)  # groups coordinated elsewhere
        coordinator.complete_transaction(OTHER_PRODUCER[0], [0], committed=True)  # another transaction
        assert coordinator.committed("g") == {} and coordinator.has_pending("g", T0)
        coordinator.complete_transaction(PRODUCER[0], [0], committed=True)
        assert offsets_of(coordinator, "g") == {T0: 5}

    asyncio.run(run())


def test_of_a_plain_and_a_transactional_commit_the_later_record_wins(tmp_path):
    """Kafka's CommitRecordMetadataAndOffset rule: the offset written later in the log stays, whichever
    of the plain commit and the transaction's marker completes last."""
    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = coordinator_of(partition_log)
        # A plain commit written after the transaction's record outlives the transaction's commit.
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)})
        await coordinator.commit("g", {T0: CommittedOffset(9)})
        write_marker(partition_log, PRODUCER, commit=True)
        coordinator.complete_transaction(PRODUCER[0], [0], committed=True)
        assert offsets_of(coordinator, "g") == {T0: 9}
        # A transaction's record written after the plain commit replaces it when it commits.
        await coordinator.commit("g", {T1: CommittedOffset(20)})
        await coordinator.commit_transactional("g", OTHER_PRODUCER, {T1: CommittedOffset(15)})
        write_marker(partition_log, OTHER_PRODUCER, commit=True)
        coordinator.complete_transaction(OTHER_PRODUCER[0], [0], committed=True)
        assert offsets_of(coordinator, "g") == {T0: 9, T1: 15}
        # A new coordinator reading the same log comes to the same offsets.
        assert offsets_of(coordinator_of(partition_log), "g") == {T0: 9, T1: 15}

    asyncio.run(run())


def test_an_older_producer_epoch_than_the_pending_commits_is_fenced(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        producer_id, epoch = PRODUCER
        await coordinator.commit_transactional("g", (producer_id, epoch), {T0: CommittedOffset(5)})
        with pytest.raises(GroupError) as refused:
            await coordinator.commit_transactional("other-group", (producer_id, epoch - 1), {T0: CommittedOffset(6)})
        assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        await coordinator.commit_transactional("g", (producer_id, epoch + 1), {T1: CommittedOffset(7)})
        assert set(coordinator.offsets.pending(producer_id, "g")) == {T0, T1}
        assert coordinator.offsets.pending(producer_id, "other-group") == {}

    asyncio.run(run())


class TwoReplicaBroker(LeaderBroker):
    """A leader whose follower never fetches: acks=all writes wait until they are failed."""

    def partition(self, topic, index):
        return SimpleNamespace(leader=NODE_ID, leader_epoch=0, isr=[NODE_ID, NODE_ID + 1],
                               replicas=[NODE_ID, NODE_ID + 1])


def test_a_transactional_write_that_fails_leaves_nothing_pending(tmp_path):
    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = GroupCoordinator(TwoReplicaBroker(partition_log))
        coordinator.load_partition(0, partition_log)
        partition_log.auto_high_watermark = False
        write = asyncio.ensure_future(coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)}))
        await asyncio.sleep(0)
        assert coordinator.has_pending("g", T0)  # in the log, waiting for the follower
        coordinator.broker.replicas.partitions[(OFFSETS_TOPIC, 0)].fail_commit_waiters()  # leadership lost
        with pytest.raises(GroupError) as failed:
            await write
        assert failed.value.code == ErrorCode.NOT_COORDINATOR
        assert not coordinator.has_pending("g", T0) and not coordinator.offsets.has_open_transactions("g")

    asyncio.run(run())


# --- replay ---

def transactional_batch(producer: tuple[int, int], group: str, offsets: dict) -> bytes:
    return encode_batch([(offset_key(group, *position), offset_value(CommittedOffset(offset)))
                         for position, offset in offsets.items()], timestamp=1, attributes=ATTR_TRANSACTIONAL,
                        producer_id=producer[0], producer_epoch=producer[1], base_sequence=0)


def plain_batch(group: str, offsets: dict) -> bytes:
    return encode_batch([(offset_key(group, *position), offset_value(CommittedOffset(offset)))
                         for position, offset in offsets.items()], timestamp=1)


def test_replay_completes_transactions_at_their_markers_and_keeps_the_open_ones_pending(tmp_path):
    partition_log = offsets_log(tmp_path)
    committing, aborting, open_one = (10, 0), (11, 0), (12, 1)
    for batch in (plain_batch("g", {T0: 1, T1: 1}),
                  transactional_batch(committing, "g", {T0: 5}),
                  transactional_batch(aborting, "g", {T1: 6}),
                  transactional_batch(open_one, "h", {T0: 7}),
                  transactional_batch(committing, "h", {T1: 8}),  # one transaction, two groups of the partition
                  end_txn_marker(*committing, True, coordinator_epoch=0, timestamp=1),
                  end_txn_marker(*aborting, False, coordinator_epoch=0, timestamp=1)):
        partition_log.append(batch, leader_epoch=0)
    coordinator = coordinator_of(partition_log)
    assert offsets_of(coordinator, "g") == {T0: 5, T1: 1}
    assert offsets_of(coordinator, "h") == {T1: 8}
    assert coordinator.has_pending("h", T0) and not coordinator.has_pending("g", T1)
    assert coordinator.offsets.groups_pending_for(open_one[0]) == ["h"]
    # The coordinator took over between the commit and the marker: the marker's writer completes it here.
    write_marker(partition_log, open_one, commit=True)
    coordinator.complete_transaction(open_one[0], [0], committed=True)
    assert offsets_of(coordinator, "h") == {T0: 7, T1: 8}
    assert offsets_of(coordinator_of(partition_log), "h") == {T0: 7, T1: 8}


def test_replay_applies_kafkas_ordering_rule_and_the_producer_epoch(tmp_path):
    partition_log = offsets_log(tmp_path)
    producer = (10, 4)
    for batch in (transactional_batch(producer, "g", {T0: 5}),
                  plain_batch("g", {T0: 9}),  # later than the transaction's record: it stays
                  end_txn_marker(*producer, True, coordinator_epoch=0, timestamp=1),
                  transactional_batch(producer, "g", {T1: 3})):
        partition_log.append(batch, leader_epoch=0)
    coordinator = coordinator_of(partition_log)
    assert offsets_of(coordinator, "g") == {T0: 9} and coordinator.has_pending("g", T1)

    async def fenced():
        with pytest.raises(GroupError) as refused:
            await coordinator.commit_transactional("g", (producer[0], producer[1] - 1), {T1: CommittedOffset(1)})
        return refused.value.code

    assert asyncio.run(fenced()) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_coordinator_taking_over_after_the_commit_holds_the_offsets_pending(tmp_path):
    async def run():
        partition_log = offsets_log(tmp_path)
        await coordinator_of(partition_log).commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)})
        successor = coordinator_of(partition_log)
        assert successor.committed("g") == {} and successor.has_pending("g", T0)
        write_marker(partition_log, PRODUCER, commit=False)
        successor.complete_transaction(PRODUCER[0], [0], committed=False)
        assert not successor.has_pending("g", T0)
        assert coordinator_of(partition_log).committed("g") == {}
        assert not coordinator_of(partition_log).has_pending("g", T0)

    asyncio.run(run())


# --- deleting and expiring ---

def test_expiry_leaves_pending_offsets_and_their_group_alone(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        await coordinator.commit("g", {T0: CommittedOffset(1, commit_timestamp=1_000),
                                       T1: CommittedOffset(2, commit_timestamp=1_000)})
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)})
        assert coordinator.expire_offsets(retention_ms=5_000, now_ms=10_000) == 1  # T1 only
        assert offsets_of(coordinator, "g") == {T0: 1}
        await coordinator.commit_transactional("pending-only", PRODUCER, {T0: CommittedOffset(5)})
        coordinator.expire_offsets(retention_ms=5_000, now_ms=10_000)
        assert coordinator.group("pending-only") is not None and coordinator.has_pending("pending-only", T0)

    asyncio.run(run())


def test_deleting_offsets_or_the_group_takes_its_pending_offsets_too(tmp_path):
    async def run():
        partition_log = offsets_log(tmp_path)
        coordinator = coordinator_of(partition_log)
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5), T1: CommittedOffset(6)})
        coordinator.delete_offsets("g", [T0])
        assert not coordinator.has_pending("g", T0) and coordinator.has_pending("g", T1)
        assert not coordinator_of(partition_log).has_pending("g", T0)  # a tombstone was written for it
        assert coordinator.delete_group("g") == ErrorCode.NONE
        write_marker(partition_log, PRODUCER, commit=True)
        coordinator.complete_transaction(PRODUCER[0], [0], committed=True)
        assert coordinator.group("g") is None and coordinator.committed("g") == {}
        assert coordinator_of(partition_log).committed("g") == {}

    asyncio.run(run())


# --- the APIs ---

def serving(coordinator: GroupCoordinator):
    coordinator.broker.groups = coordinator
    return coordinator.broker


def fetch_request(version: int, group: str, require_stable: bool, topics=(("t", [0, 1]),)):
    if version < 8:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        return OffsetFetchRequest[version](group_id=group, require_stable=require_stable,
                                           topics=[T(name=n, partition_indexes=p) for n, p in topics])
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    T = G.OffsetFetchRequestTopics
    return OffsetFetchRequest[version](require_stable=require_stable, groups=[G(
        group_id=group, member_id=None, member_epoch=-1, topics=[T(name=n, partition_indexes=p) for n, p in topics])])


async def fetched(broker, version: int, group: str, require_stable: bool):
    response = await offset_fetch.handle(broker, request_header(version),
                                         fetch_request(version, group, require_stable))
    topics = response.topics if version < 8 else response.groups[0].topics
    return [(p.partition_index, p.committed_offset, p.error_code) for t in topics for p in t.partitions]


@pytest.mark.parametrize("version", [7, 8])
def test_offset_fetch_answers_unstable_where_a_transaction_is_pending_if_asked(tmp_path, version):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        broker = serving(coordinator)
        await coordinator.commit("g", {T0: CommittedOffset(1), T1: CommittedOffset(2)})
        await coordinator.commit_transactional("g", PRODUCER, {T0: CommittedOffset(5)})
        assert await fetched(broker, version, "g", require_stable=False) == [(0, 1, 0), (1, 2, 0)]
        assert await fetched(broker, version, "g", require_stable=True) == [
            (0, -1, ErrorCode.UNSTABLE_OFFSET_COMMIT), (1, 2, 0)]
        coordinator.complete_transaction(PRODUCER[0], [0], committed=True)
        assert await fetched(broker, version, "g", require_stable=True) == [(0, 5, 0), (1, 2, 0)]

    asyncio.run(run())


def txn_commit(version: int, producer=PRODUCER, generation=-1, member="", instance=None, metadata=""):
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    return TxnOffsetCommitRequest[version](
        transactional_id="txn", group_id="g", producer_id=producer[0], producer_epoch=producer[1],
        generation_id=generation, member_id=member, group_instance_id=instance, topics=[T(name="t", partitions=[
            T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_leader_epoch=1,
                                              committed_metadata=metadata),
            T.TxnOffsetCommitRequestPartition(partition_index=1, committed_offset=6, committed_leader_epoch=1,
                                              committed_metadata="")])])


async def txn_commit_errors(broker, version: int, **fields) -> list[int]:
    response = await txn_offset_commit.handle(broker, request_header(version),
                                              txn_commit(version, **fields))
    return [p.error_code for t in response.topics for p in t.partitions]


def test_txn_offset_commit_checks_the_member_of_a_classic_group_from_v3(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        broker = serving(coordinator)
        member = await join_and_sync(coordinator, "g", b"")
        generation = coordinator.group("g").generation
        assert await txn_commit_errors(broker, 3, generation=generation + 1, member=member) == [
            ErrorCode.ILLEGAL_GENERATION] * 2
        assert await txn_commit_errors(broker, 3, generation=generation, member="ghost") == [
            ErrorCode.UNKNOWN_MEMBER_ID] * 2
        assert await txn_commit_errors(broker, 5, generation=generation, member="ghost", instance="i") == [
            ErrorCode.UNKNOWN_MEMBER_ID] * 2
        assert not coordinator.offsets.has_open_transactions("g")
        assert await txn_commit_errors(broker, 2) == [0, 0]  # v0-2 name no member: a producer outside the group
        assert await txn_commit_errors(broker, 3) == [0, 0]  # generation -1, no member: the same
        assert await txn_commit_errors(broker, 3, generation=generation, member=member) == [0, 0]
        pending = coordinator.offsets.pending(PRODUCER[0], "g")[T0]
        assert (pending.offset, pending.leader_epoch, pending.metadata) == (5, 1, "")

    asyncio.run(run())


def test_a_static_member_replaced_by_another_is_fenced(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        broker = serving(coordinator)
        joined = await coordinator.classic.join("g", "", "instance", "client", "/127.0.0.1", 10_000, 10_000,
                                                "consumer", [("range", b"")], require_known_member=False)
        generation = joined.generation
        assert await txn_commit_errors(broker, 3, generation=generation, member="old-id", instance="instance") == [
            ErrorCode.FENCED_INSTANCE_ID] * 2
        assert await txn_commit_errors(broker, 3, generation=generation, member=joined.member_id,
                                       instance="instance") == [0, 0]

    asyncio.run(run())


def test_txn_offset_commit_refuses_large_metadata_per_partition_and_older_epochs(tmp_path):
    async def run():
        coordinator = coordinator_of(offsets_log(tmp_path))
        broker = serving(coordinator)
        too_long = "m" * (broker.config.get_int("offset.metadata.max.bytes") + 1)
        assert await txn_commit_errors(broker, 5, metadata=too_long) == [ErrorCode.OFFSET_METADATA_TOO_LARGE, 0]
        assert set(coordinator.offsets.pending(PRODUCER[0], "g")) == {T1}
        older = (PRODUCER[0], PRODUCER[1] - 1)
        assert await txn_commit_errors(broker, 5, producer=older, metadata=too_long) == [
            ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.INVALID_PRODUCER_EPOCH]

    asyncio.run(run())


def test_txn_offset_commit_before_v2_answers_loading_as_not_available(tmp_path):
    async def run():
        coordinator = GroupCoordinator(LeaderBroker(offsets_log(tmp_path)))  # its partition not loaded yet
        broker = serving(coordinator)
        assert await txn_commit_errors(broker, 1) == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
        assert await txn_commit_errors(broker, 2) == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2

    asyncio.run(run())
