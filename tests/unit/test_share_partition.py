"""A share-partition's records: acquisition, acknowledgement, lock expiry on the event loop, the
delivery limit, the start offset, the in-flight bound, and what goes to the persister."""
from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import encode_batch
from node.apis import share_fetch
from node.share import requests as share_requests
from node.coordinator_log import CoordinatorError
from node.share.manager import SharePartitionManager
from node.share import partition as partition_module
from node.share.partition import ACCEPT, GAP, RELEASE, REJECT, Limits, SharePartition
from node.share.sessions import ShareSessionCache
from node.share_coordinator.state import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, ShareState, StateBatch,
)

TOPIC_ID = uuid.UUID(int=7)


class RecordingPersister:
    """Keeps what it is handed; fails writes while `failing` is set."""

    def __init__(self):
        self.writes: list[ShareState] = []
        self.failing: ErrorCode | None = None

    async def write(self, group_id, topic_id, partition, state):
        if self.failing is not None:
            raise CoordinatorError(self.failing)
        self.writes.append(state)


def share_partition(persister=None, lock_ms=1000, limit=3, max_locks=100) -> SharePartition:
    return SharePartition("g", TOPIC_ID, 0, Limits(lock_ms, limit, max_locks), persister)


def run(coroutine_function):
    """Run an async test body on a fresh event loop."""
    return asyncio.run(coroutine_function())


def states(sp: SharePartition) -> list[tuple[int, int, int, int]]:
    return [(r.first, r.last, r.state, r.delivery_count) for r in sp.runs]


def test_acquires_whole_batches_up_to_max_records():
    async def body():
        sp = share_partition()
        # Batches 0-4, 5-9, 10-14: four records asked, the first batch is taken whole.
        assert sp.acquire("a", [(0, 4), (5, 9), (10, 14)], 4) == [(0, 4, 1)]
        # Six asked: a whole batch more than five.
        assert sp.acquire("b", [(5, 9), (10, 14)], 6) == [(5, 14, 1)]
        assert sp.next_fetch_offset() == 15 and sp.end_offset == 15
        assert sp.acquire("c", [(0, 4)], 10) == []  # acquired already
    run(body)


def test_accept_release_reject_and_the_start_offset():
    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister)
        sp.acquire("a", [(0, 3)], 10)
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT, RELEASE, REJECT, ACCEPT])]) == ErrorCode.NONE
        # 0 done: the start offset moves to the released record.
        assert sp.start_offset == 1
        assert states(sp) == [(1, 1, AVAILABLE, 1), (2, 2, ARCHIVED, 1), (3, 3, ACKNOWLEDGED, 1)]
        assert persister.writes[-1] == ShareState(0, 0, 1, [
            StateBatch(1, 1, AVAILABLE, 1), StateBatch(2, 2, ARCHIVED, 1), StateBatch(3, 3, ACKNOWLEDGED, 1)])
        assert sp.next_fetch_offset() == 1
        assert sp.acquire("b", [(0, 3)], 10) == [(1, 1, 2)]
        assert await sp.acknowledge("b", [(1, 1, [ACCEPT])]) == ErrorCode.NONE
        assert (sp.start_offset, sp.runs) == (4, [])
        assert persister.writes[-1] == ShareState(0, 0, 4, [])
    run(body)


def test_acquired_runs_ride_along_with_each_write():
    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister)
        sp.acquire("a", [(0, 5)], 10)
        sp.acquire("b", [(6, 7)], 10)
        assert persister.writes == []  # acquiring alone writes nothing
        assert await sp.acknowledge("a", [(0, 1, [ACCEPT])]) == ErrorCode.NONE
        assert persister.writes == [ShareState(0, 0, 2, [StateBatch(2, 5, ACQUIRED, 1), StateBatch(6, 7, ACQUIRED, 1)])]
        sp.close()
    run(body)


def test_only_the_holder_may_acknowledge_acquired_records():
    async def body():
        sp = share_partition()
        sp.acquire("a", [(0, 4)], 10)
        assert await sp.acknowledge("b", [(0, 4, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
        assert await sp.acknowledge("a", [(3, 7, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
        assert await sp.acknowledge("a", [(0, 1, [ACCEPT]), (9, 9, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
        assert await sp.acknowledge("a", [(0, 1, [9])]) == ErrorCode.INVALID_REQUEST
        assert await sp.acknowledge("a", [(0, 1, [1, 1, 1])]) == ErrorCode.INVALID_REQUEST
        assert await sp.acknowledge("a", [(2, 1, [1])]) == ErrorCode.INVALID_REQUEST
        # None of that changed anything: all of it is still a's.
        assert states(sp) == [(0, 4, ACQUIRED, 1)]
        assert await sp.acknowledge("a", [(0, 1, [ACCEPT])]) == ErrorCode.NONE
        assert await sp.acknowledge("a", [(0, 1, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    run(body)


def test_gap_offsets_are_archived():
    async def body():
        sp = share_partition()
        sp.acquire("a", [(0, 9)], 10)  # a compacted batch: offsets 3-5 hold no record
        assert await sp.acknowledge("a", [(0, 9, [1, 1, 1, GAP, GAP, GAP, 1, 1, 1, 1])]) == ErrorCode.NONE
        assert (sp.start_offset, sp.runs) == (10, [])
    run(body)


def test_available_offsets_the_log_no_longer_holds_are_passed_over():
    async def body():
        sp = share_partition()
        sp.acquire("a", [(0, 9)], 100)
        await sp.acknowledge("a", [(0, 9, [RELEASE])])
        # Compaction left batches 3-4 and 8-9 of what was released.
        assert sp.acquire("b", [(3, 4), (8, 9)], 100) == [(3, 4, 2), (8, 9, 2)]
        assert sp.start_offset == 3
        assert states(sp) == [(3, 4, ACQUIRED, 2), (5, 7, ARCHIVED, 1), (8, 9, ACQUIRED, 2)]
        sp.close()
    run(body)


def test_lock_expiry_releases_and_wakes_waiters():
    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister, lock_ms=50)
        sp.acquire("a", [(0, 2)], 10)
        await sp.acknowledge("a", [(0, 0, [ACCEPT])])
        waiter = asyncio.get_running_loop().create_future()
        sp.add_waiter(waiter)
        assert await asyncio.wait_for(waiter, 2) is True
        assert states(sp) == [(1, 2, AVAILABLE, 1)]
        assert persister.writes[-1] == ShareState(0, 0, 1, [StateBatch(1, 2, AVAILABLE, 1)])
        assert await sp.acknowledge("a", [(1, 2, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
        assert sp.acquire("b", [(0, 2)], 10) == [(1, 2, 2)]
        sp.close()
    run(body)


def test_an_acknowledged_acquisition_leaves_nothing_to_expire():
    async def body():
        sp = share_partition(lock_ms=30)
        sp.acquire("a", [(0, 1)], 10)
        await sp.acknowledge("a", [(0, 1, [ACCEPT])])
        await asyncio.sleep(0.1)
        assert (sp.start_offset, sp.runs) == (2, [])
    run(body)


def test_the_delivery_count_limit_archives():
    async def body():
        sp = share_partition(limit=2, lock_ms=30)
        assert sp.acquire("a", [(0, 0)], 10) == [(0, 0, 1)]
        await sp.acknowledge("a", [(0, 0, [RELEASE])])
        assert sp.acquire("a", [(0, 0)], 10) == [(0, 0, 2)]
        await sp.acknowledge("a", [(0, 0, [RELEASE])])
        assert (sp.start_offset, sp.runs, sp.next_fetch_offset()) == (1, [], 1)
        # Lock expiry counts as a delivery too.
        assert sp.acquire("a", [(1, 1)], 10) == [(1, 1, 1)]
        await asyncio.sleep(0.1)
        assert sp.acquire("a", [(1, 1)], 10) == [(1, 1, 2)]
        await asyncio.sleep(0.1)
        assert (sp.start_offset, sp.runs) == (2, [])
    run(body)


def test_max_record_locks_bounds_the_window():
    async def body():
        sp = share_partition(max_locks=10)
        assert sp.acquire("a", [(0, 5), (6, 11), (12, 15)], 100) == [(0, 11, 1)]
        assert not sp.can_acquire()
        assert sp.acquire("b", [(12, 15)], 100) == []
        await sp.acknowledge("a", [(0, 5, [ACCEPT])])
        assert sp.can_acquire()
        assert sp.acquire("b", [(12, 15)], 100) == [(12, 15, 1)]
    run(body)


def test_a_failed_write_changes_nothing():
    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister)
        sp.acquire("a", [(0, 3)], 10)
        persister.failing = ErrorCode.NOT_COORDINATOR
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT])]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert (sp.start_offset, states(sp)) == (0, [(0, 3, ACQUIRED, 1)])
        persister.failing = None
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT])]) == ErrorCode.NONE
        assert sp.start_offset == 4
    run(body)


def test_loading_makes_acquired_records_available_with_their_count():
    async def body():
        sp = share_partition(limit=3)
        sp.load(ShareState(2, 5, 10, [StateBatch(10, 11, ACKNOWLEDGED, 1), StateBatch(12, 13, ACQUIRED, 2),
                                      StateBatch(16, 16, ACQUIRED, 3), StateBatch(17, 17, AVAILABLE, 1)]))
        assert sp.start_offset == 12 and sp.end_offset == 18 and sp.state_epoch == 2
        assert states(sp) == [(12, 13, AVAILABLE, 2), (14, 15, AVAILABLE, 0), (16, 16, ARCHIVED, 3),
                              (17, 17, AVAILABLE, 1)]
        assert sp.acquire("a", [(12, 17)], 100) == [(12, 13, 3), (14, 15, 1), (17, 17, 2)]
    run(body)


def test_records_deleted_from_the_log_are_done_with():
    async def body():
        sp = share_partition()
        sp.acquire("a", [(0, 9)], 100)
        await sp.acknowledge("a", [(0, 9, [RELEASE])])
        sp.move_to_log_start(5)
        assert (sp.start_offset, states(sp)) == (5, [(5, 9, AVAILABLE, 1)])
        sp.move_to_log_start(20)
        assert (sp.start_offset, sp.end_offset, sp.runs) == (20, 20, [])
    run(body)


def test_closing_the_session_releases_the_members_records():
    async def body():
        sp = share_partition()
        sp.acquire("a", [(0, 1)], 100)
        sp.acquire("b", [(2, 3)], 100)
        assert await sp.release_member("a") == ErrorCode.NONE
        assert states(sp) == [(0, 1, AVAILABLE, 1), (2, 3, ACQUIRED, 1)]
        sp.close()
    run(body)


def test_share_session_epochs():
    sessions = ShareSessionCache(max_sessions=2, idle_ms=60_000)
    key = (TOPIC_ID, 0)
    opened = sessions.fetch_context("g", "m", 0, [key], [], False)
    assert opened.error == ErrorCode.NONE and opened.partitions == [key]
    assert sessions.fetch_context("g", "m", 2, [], [], False).error == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    # An incremental request may omit the session's partitions, add some, forget some.
    assert sessions.fetch_context("g", "m", 1, [], [], False).partitions == [key]
    assert sessions.fetch_context("g", "m", 2, [(TOPIC_ID, 1)], [key], False).partitions == [(TOPIC_ID, 1)]
    assert sessions.acknowledge_session("g", "m", 3)[0] == ErrorCode.NONE
    assert sessions.acknowledge_session("g", "m", 0)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert sessions.fetch_context("g", "other", 1, [], [], False).error == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert sessions.fetch_context("g", "m", 0, [key], [], True).error == ErrorCode.INVALID_REQUEST
    final = sessions.fetch_context("g", "m", -1, [], [], False)
    assert final.final and final.error == ErrorCode.NONE
    sessions.close(final.session)
    assert sessions.acknowledge_session("g", "m", -1)[0] == ErrorCode.SHARE_SESSION_NOT_FOUND
    sessions.fetch_context("g", "m1", 0, [], [], False)
    sessions.fetch_context("g", "m2", 0, [], [], False)
    assert sessions.fetch_context("g", "m3", 0, [], [], False).error == ErrorCode.SHARE_SESSION_LIMIT_REACHED


def test_a_lock_whose_expiry_was_not_written_expires_again(monkeypatch):
    monkeypatch.setattr(partition_module, "EXPIRY_RETRY_S", 0.05)

    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister, lock_ms=30)
        sp.acquire("a", [(0, 2)], 10)
        persister.failing = ErrorCode.NOT_ENOUGH_REPLICAS
        await asyncio.sleep(0.1)
        assert states(sp) == [(0, 2, ACQUIRED, 1)]  # the release was undone with its write
        persister.failing = None
        await asyncio.sleep(0.15)
        assert states(sp) == [(0, 2, AVAILABLE, 1)]
        assert persister.writes[-1] == ShareState(0, 0, 0, [StateBatch(0, 2, AVAILABLE, 1)])
        sp.close()
    run(body)


def test_a_lock_stops_once_none_of_its_records_is_acquired():
    async def body():
        sp = share_partition(lock_ms=10_000)
        sp.acquire("a", [(0, 3)], 10)
        lock = sp.runs[0].lock
        await sp.acknowledge("a", [(0, 1, [ACCEPT])])
        assert not lock.timer.cancelled()  # 2-3 are still held under it
        await sp.acknowledge("a", [(2, 2, [ACCEPT]), (3, 3, [RELEASE])])
        assert lock.timer.cancelled()
        sp.close()
    run(body)


def test_an_expiry_with_nothing_held_starts_no_task():
    async def body():
        sp = share_partition(lock_ms=10_000)
        sp.acquire("a", [(0, 1)], 10)
        lock = sp.runs[0].lock
        sp.move_to_log_start(2)  # (what the lock held is gone from the log)
        sp._lock_expired(lock)
        assert sp._tasks == set()
    run(body)


def test_a_fenced_write_hands_the_share_partition_back():
    async def body():
        persister = RecordingPersister()
        sp = share_partition(persister)
        fenced = []
        sp.on_fenced = fenced.append
        sp.acquire("a", [(0, 3)], 10)
        persister.failing = ErrorCode.NOT_ENOUGH_REPLICAS
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT])]) == ErrorCode.UNKNOWN_SERVER_ERROR
        assert fenced == []
        persister.failing = ErrorCode.FENCED_STATE_EPOCH
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT])]) == ErrorCode.FENCED_STATE_EPOCH
        assert fenced == [sp]
        persister.failing = ErrorCode.FENCED_LEADER_EPOCH
        assert await sp.acknowledge("a", [(0, 3, [ACCEPT])]) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert fenced == [sp, sp]
        sp.close()
    run(body)


class StatePersister:
    """A share coordinator of one share-partition, fencing as the real one does."""

    def __init__(self, state: ShareState | None = None):
        self.state = state

    async def read(self, group_id, topic_id, partition, leader_epoch):
        return self.state

    async def read_summary(self, group_id, topic_id, partition):
        return self.state

    async def initialize(self, group_id, topic_id, partition, state_epoch, start_offset):
        self.state = ShareState(state_epoch, -1, start_offset, [])

    async def write(self, group_id, topic_id, partition, state):
        if self.state is None or self.state.state_epoch > state.state_epoch:
            raise CoordinatorError(ErrorCode.FENCED_STATE_EPOCH)
        self.state = state


def manager_of(persister):
    broker = SimpleNamespace(config=BrokerConfig(), image=SimpleNamespace(configs={}), share_persister=persister)
    log = SimpleNamespace(log_start_offset=0, high_watermark=10)
    return SharePartitionManager(broker), SimpleNamespace(leader_epoch=0, hosted=True, log=log)


def test_a_share_partition_fenced_by_a_new_state_epoch_is_read_again():
    async def body():
        persister = StatePersister(ShareState(0, 0, 4, []))
        manager, hosted = manager_of(persister)
        sp = await manager.get("g", TOPIC_ID, 0, hosted)
        sp.acquire("a", [(4, 5)], 10)
        # AlterShareGroupOffsets starts the share-partition again, at offset 2 and state epoch 1.
        persister.state = ShareState(1, -1, 2, [])
        assert await sp.acknowledge("a", [(4, 5, [ACCEPT])]) == ErrorCode.FENCED_STATE_EPOCH
        assert sp.closed and manager.partitions == {}
        again = await manager.get("g", TOPIC_ID, 0, hosted)
        assert (again.state_epoch, again.start_offset, again.next_fetch_offset()) == (1, 2, 2)
        manager.close()
    run(body)


def log_of(tmp_path, batches: int, records_per_batch: int, value_bytes: int) -> PartitionLog:
    partition_log = PartitionLog(tmp_path / "t-0")
    for _ in range(batches):
        values = [(None, b"v" * value_bytes)] * records_per_batch
        partition_log.append(encode_batch(values, base_offset=partition_log.log_end_offset, timestamp=1),
                             leader_epoch=0)
    return partition_log


def test_a_share_fetch_reads_the_log_only_as_far_as_max_records_needs(tmp_path):
    partition_log = log_of(tmp_path, batches=200, records_per_batch=5, value_bytes=10)

    async def body():
        sp = share_partition()
        data, headers = share_fetch._read(partition_log, sp, 12, 50 * 1024 * 1024)
        # Offsets 0-11 are in the first three batches; the third, 10-14, is read whole.
        assert [(h.base_offset, h.last_offset) for _, h in headers] == [(0, 4), (5, 9), (10, 14)]
        assert len(data) == sum(h.size for _, h in headers)
        sp.acquire("a", [(h.base_offset, h.last_offset) for _, h in headers], 12)
        _, headers = share_fetch._read(partition_log, sp, 5, 50 * 1024 * 1024)
        assert [(h.base_offset, h.last_offset) for _, h in headers] == [(15, 19)]
        sp.close()
    run(body)
    partition_log.close()


def test_a_share_fetch_reads_on_when_records_are_larger_than_guessed(tmp_path):
    partition_log = log_of(tmp_path, batches=30, records_per_batch=1, value_bytes=8000)
    sp = share_partition()
    data, headers = share_fetch._read(partition_log, sp, 20, 50 * 1024 * 1024)
    assert [h.base_offset for _, h in headers] == list(range(20))
    assert [position for position, _ in headers] == [sum(h.size for _, h in headers[:i]) for i in range(20)]
    assert len(data) == sum(h.size for _, h in headers)
    # MaxBytes still bounds the read, past the first batch.
    _, headers = share_fetch._read(partition_log, sp, 20, 20_000)
    assert [h.base_offset for _, h in headers] == [0, 1]
    partition_log.close()


def test_the_groups_last_share_session_here_drops_its_share_partitions():
    async def body():
        manager, hosted = manager_of(StatePersister(ShareState(0, 0, 4, [])))
        sessions = ShareSessionCache(max_sessions=10, idle_ms=60_000)
        broker = SimpleNamespace(share_partitions=manager, share_sessions=sessions)
        sp = await manager.get("g", TOPIC_ID, 0, hosted)
        other = await manager.get("h", TOPIC_ID, 0, hosted)
        first = sessions.fetch_context("g", "a", 0, [(TOPIC_ID, 0)], [], False).session
        second = sessions.fetch_context("g", "b", 0, [(TOPIC_ID, 0)], [], False).session
        sp.acquire("a", [(4, 5)], 10)
        await share_requests.close_session(broker, first)
        assert manager.partitions[("g", TOPIC_ID, 0)] is sp and states(sp) == [(4, 5, AVAILABLE, 1)]
        await share_requests.close_session(broker, second)
        assert sp.closed and set(manager.partitions) == {("h", TOPIC_ID, 0)} and not other.closed
        manager.close()
    run(body)


def test_a_session_opening_reads_again_a_share_partition_whose_state_was_deleted():
    async def body():
        persister = StatePersister(ShareState(0, 0, 10, []))
        manager, hosted = manager_of(persister)
        sp = await manager.get("g", TOPIC_ID, 0, hosted)
        await manager.check_state("g", [(TOPIC_ID, 0)])
        assert manager.partitions[("g", TOPIC_ID, 0)] is sp  # the state is as it was read
        persister.state = None  # DeleteGroups
        await manager.check_state("g", [(TOPIC_ID, 0)])
        assert sp.closed and manager.partitions == {}
        again = await manager.get("g", TOPIC_ID, 0, hosted)
        assert (again.start_offset, persister.state) == (10, ShareState(0, -1, 10, []))  # latest: the log end
        persister.state = ShareState(1, -1, 3, [])  # AlterShareGroupOffsets
        await manager.check_state("g", [(TOPIC_ID, 0)])
        assert (await manager.get("g", TOPIC_ID, 0, hosted)).start_offset == 3
        manager.close()
    run(body)
