"""A share-partition on its partition's leader: which records of one (share group, topic, partition)
are delivered, to whom, and what became of them (Kafka's SharePartition).

Records before the start offset (SPSO) are done with. Records from it up to the end offset (the
first offset never acquired) are in flight, kept as runs of consecutive offsets that share a
delivery state, a delivery count and, while acquired, a member and an acquisition lock. Records
past the end offset are available and were never delivered.

Acquiring takes whole log batches, from the first available offset, until MaxRecords is reached
(one batch may overshoot it, as in Kafka) or the in-flight window reaches
`group.share.partition.max.record.locks`. Each acquisition holds a lock for
`share.record.lock.duration.ms`: an event-loop timer that releases what is still acquired when it
fires, stopped once none of its records is acquired any more. A released record becomes available
again, or archived once its delivery count has reached `group.share.delivery.count.limit`. The
start offset moves past the acknowledged and archived records at the head of the window.

Acknowledgements, releases on lock expiry and start-offset moves are written through the
persister (node.share_coordinator.state) before they take effect for the client; a write that
fails undoes the change. Acquisitions are not written by themselves, as in Kafka, but every write
carries the acquired runs along: a new leader makes what was acquired available again, with the
delivery count last written.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError
from node.share_coordinator.state import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, ShareState, StateBatch,
)

log = logging.getLogger(__name__)

# How long a lock whose expiry could not be written waits before the release is tried again.
EXPIRY_RETRY_S = 1.0

# Acknowledge types of ShareFetch and ShareAcknowledge.
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
DONE_STATES = (ACKNOWLEDGED, ARCHIVED)
_STATE_NAMES = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
# What a client is answered when the state could not be read or written (Kafka's SharePartition mapping).
_WRITE_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.FENCED_STATE_EPOCH,
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}
# Write errors saying the state moved on without this share-partition (its state epoch was bumped by
# an offsets admin or its state deleted, or a newer leader wrote): it must be dropped and read again.
FENCING_ERRORS = (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH)


class AcquisitionLock:
    """One acquisition's lock: the member that holds its records and the timer that ends it."""

    __slots__ = ("member", "timer")

    def __init__(self, member: str):
        self.member = member
        self.timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class Run:
    """Offsets first..last (inclusive) in one delivery state."""
    first: int
    last: int
    state: int
    delivery_count: int
    lock: AcquisitionLock | None = None

    def copy(self) -> Run:
        return Run(self.first, self.last, self.state, self.delivery_count, self.lock)


@dataclass(frozen=True, slots=True)
class Limits:
    lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int


class SharePartition:
    def __init__(self, group_id: str, topic_id, partition: int, limits: Limits, persister=None,
                 leader_epoch: int = 0):
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.limits = limits
        self.persister = persister
        self.leader_epoch = leader_epoch
        # Called with this share-partition when a write was fenced (SharePartitionManager drops it).
        self.on_fenced = None
        self.state_epoch = 0
        self.start_offset = 0
        self.end_offset = 0
        self.runs: list[Run] = []
        # One state change (and its write) at a time: a write that fails restores what was before it.
        self.mutex = asyncio.Lock()
        self._waiters: set[asyncio.Future] = set()
        self._tasks: set[asyncio.Task] = set()
        # The locks whose timers are armed: cancelled once none of their records is still acquired.
        self._locks: set[AcquisitionLock] = set()
        self.closed = False

    # --- loading ---

    def load(self, state: ShareState) -> None:
        """Take the persisted state: what was acquired is available again (its delivery count kept,
        archived if that reached the limit); offsets no batch covers were never delivered."""
        self.state_epoch = state.state_epoch
        self.start_offset = self.end_offset = state.start_offset
        self.runs = []
        for batch in sorted(state.batches, key=lambda b: b.first_offset):
            first = max(batch.first_offset, self.start_offset, self.end_offset)
            if batch.last_offset < first:
                continue
            if first > self.end_offset:
                self.runs.append(Run(self.end_offset, first - 1, AVAILABLE, 0))
            delivery_state = batch.delivery_state
            if delivery_state == ACQUIRED:
                delivery_state = self._released_state(batch.delivery_count)
            self.runs.append(Run(first, batch.last_offset, delivery_state, batch.delivery_count))
            self.end_offset = batch.last_offset + 1
        self._merge()
        self._advance_start()

    def start_at(self, offset: int) -> None:
        """A share-partition never initialized: delivery starts at offset."""
        self.start_offset = self.end_offset = offset
        self.runs = []

    def in_flight(self) -> dict:
        """The share-partition as `kraftwerk group describe` shows it: its window and how many records
        in it are in each delivery state."""
        counts = {name: 0 for name in _STATE_NAMES.values()}
        for run in self.runs:
            counts[_STATE_NAMES[run.state]] += run.last - run.first + 1
        return {"start_offset": self.start_offset, "end_offset": self.end_offset, **counts}

    # --- what a fetch reads ---

    def next_fetch_offset(self) -> int:
        for run in self.runs:
            if run.state == AVAILABLE:
                return run.first
        return self.end_offset

    def can_acquire(self) -> bool:
        return any(run.state == AVAILABLE for run in self.runs) or self._window_has_room()

    def _window_has_room(self) -> bool:
        return self.end_offset - self.start_offset < self.limits.max_record_locks

    def move_to_log_start(self, log_start_offset: int) -> None:
        """Records deleted from the log are done with (retention, DeleteRecords)."""
        if log_start_offset > self.start_offset:
            self._split_at(log_start_offset)
            self.runs = [run for run in self.runs if run.first >= log_start_offset]
            self.start_offset = log_start_offset
            self.end_offset = max(self.end_offset, log_start_offset)
            self._advance_start()

    # --- acquiring ---

    def acquire(self, member: str, batches, max_records: int, loop=None) -> list[tuple[int, int, int]]:
        """Acquire for member the records of the log batches (first, last offset) read from
        next_fetch_offset(); returns the (first, last, delivery count) ranges acquired."""
        lock = AcquisitionLock(member)
        acquired: list[Run] = []
        count = 0
        self._archive_missing(batches)
        for first, last in batches:
            if count >= max_records:
                break
            if last < self.start_offset:
                continue
            if first < self.end_offset:
                count += self._acquire_in_flight(max(first, self.start_offset), min(last, self.end_offset - 1),
                                                 lock, acquired)
            if last >= self.end_offset:
                if not self._window_has_room():
                    break
                run = Run(max(first, self.end_offset), last, ACQUIRED, 1, lock)
                self.runs.append(run)
                acquired.append(run)
                count += run.last - run.first + 1
                self.end_offset = last + 1
        ranges = _ranges(acquired)
        if acquired:
            self._arm(lock, self.limits.lock_duration_ms / 1000, loop)
            self._merge()
        return ranges

    def _archive_missing(self, batches) -> None:
        """Available offsets the read passed over hold no record any more (compacted away): archived,
        so that the start offset can move past them."""
        expected = self.next_fetch_offset()
        missing = []
        for first, last in batches:
            if first > expected and expected < self.end_offset:
                missing.append((expected, min(first, self.end_offset) - 1))
            expected = max(expected, last + 1)
        for first, last in missing:
            self._split_at(first)
            self._split_at(last + 1)
            for run in self._runs_between(first, last):
                if run.state == AVAILABLE:
                    run.state = ARCHIVED
        if missing:
            self._advance_start()

    def _acquire_in_flight(self, first: int, last: int, lock: AcquisitionLock, acquired: list[Run]) -> int:
        self._split_at(first)
        self._split_at(last + 1)
        count = 0
        for run in self.runs:
            if run.first > last:
                break
            if run.last >= first and run.state == AVAILABLE:
                run.state, run.lock = ACQUIRED, lock
                run.delivery_count += 1
                acquired.append(run)
                count += run.last - run.first + 1
        return count

    # --- acknowledging ---

    def check_acknowledgements(self, member: str, batches) -> ErrorCode:
        """Whether member may acknowledge every (first, last, types) given: each offset acquired by it."""
        for first, last, types in batches:
            if first > last or not types or (len(types) != 1 and len(types) != last - first + 1):
                return ErrorCode.INVALID_REQUEST
            if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
                return ErrorCode.INVALID_REQUEST
            if first < self.start_offset or last >= self.end_offset:
                return ErrorCode.INVALID_RECORD_STATE
            for run in self._runs_between(first, last):
                if run.state != ACQUIRED or run.lock is None or run.lock.member != member:
                    return ErrorCode.INVALID_RECORD_STATE
        return ErrorCode.NONE

    async def acknowledge(self, member: str, batches) -> ErrorCode:
        """Apply member's acknowledgements (first, last, types) as a whole, once written; an error
        changes nothing."""
        async with self.mutex:
            if self.closed:  # (the partition's leadership moved while this waited)
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            error = self.check_acknowledgements(member, batches)
            if error:
                return error
            saved = self._save()
            changed = []
            for first, last, types in batches:
                for run_first, run_last, ack_type in _type_runs(first, last, types):
                    changed.append(self._settle(run_first, run_last, _settled_state(ack_type)))
            return await self._commit(saved, changed)

    async def release_member(self, member: str) -> ErrorCode:
        """Release what member holds (its share session closed)."""
        async with self.mutex:
            held = [(run.first, run.last) for run in self.runs
                    if run.state == ACQUIRED and run.lock is not None and run.lock.member == member]
            if not held:
                return ErrorCode.NONE
            saved = self._save()
            changed = [self._settle(first, last, None) for first, last in held]
            return await self._commit(saved, changed)

    def _settle(self, first: int, last: int, new_state: int | None) -> tuple[int, int]:
        """first..last leave ACQUIRED for new_state (None: released, available or archived)."""
        self._split_at(first)
        self._split_at(last + 1)
        for run in self._runs_between(first, last):
            run.state = self._released_state(run.delivery_count) if new_state is None else new_state
            run.lock = None
        return first, last

    def _released_state(self, delivery_count: int) -> int:
        return ARCHIVED if delivery_count >= self.limits.delivery_count_limit else AVAILABLE

    async def _commit(self, saved, changed: list[tuple[int, int]]) -> ErrorCode:
        self._merge()
        self._advance_start()
        try:
            await self._write(changed)
        except CoordinatorError as exc:
            self._restore(saved)
            log.warning("share-partition %s %s-%d: state not written (%s); change undone",
                        self.group_id, self.topic_id, self.partition, exc.code.name)
            if exc.code in FENCING_ERRORS and self.on_fenced is not None:
                self.on_fenced(self)
            return write_error(exc.code)
        self._cancel_idle_locks()
        self._wake()
        return ErrorCode.NONE

    # --- lock expiry ---

    def _arm(self, lock: AcquisitionLock, delay_s: float, loop=None) -> None:
        loop = loop or asyncio.get_running_loop()
        lock.timer = loop.call_later(delay_s, self._lock_expired, lock)
        self._locks.add(lock)

    def _holds(self, lock: AcquisitionLock) -> bool:
        return any(run.lock is lock and run.state == ACQUIRED for run in self.runs)

    def _cancel_idle_locks(self) -> None:
        """Stop the timers of locks none of whose records is still acquired (all acknowledged or released)."""
        holding = {run.lock for run in self.runs if run.state == ACQUIRED}
        for lock in [lock for lock in self._locks if lock not in holding]:
            lock.timer.cancel()
            self._locks.discard(lock)

    def _lock_expired(self, lock: AcquisitionLock) -> None:
        if self.closed or not self._holds(lock):
            self._locks.discard(lock)
            return
        task = asyncio.ensure_future(self._release_lock(lock))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release_lock(self, lock: AcquisitionLock) -> None:
        async with self.mutex:
            held = [(run.first, run.last) for run in self.runs if run.lock is lock and run.state == ACQUIRED]
            if not held or self.closed:
                self._locks.discard(lock)
                return
            saved = self._save()
            changed = [self._settle(first, last, None) for first, last in held]
            if await self._commit(saved, changed) and not self.closed:
                # The write failed and the records are acquired again under this lock: try again
                # shortly, or they would stay acquired with no timer to release them.
                self._arm(lock, EXPIRY_RETRY_S)

    # --- persistence ---

    def state_batches(self, changed: list[tuple[int, int]]) -> list[StateBatch]:
        """The runs overlapping the changed ranges, past the start offset, as persisted batches; and
        the acquired runs with them, so that a new leader knows their delivery counts."""
        low = max(min((first for first, _ in changed), default=self.end_offset), self.start_offset)
        high = max((last for _, last in changed), default=-1)
        batches = []
        for run in self.runs:
            if run.last >= low and run.first <= high:
                batches.append(StateBatch(max(run.first, low), min(run.last, high), run.state, run.delivery_count))
            elif run.state == ACQUIRED:
                batches.append(StateBatch(run.first, run.last, run.state, run.delivery_count))
        return batches

    async def _write(self, changed: list[tuple[int, int]]) -> None:
        if self.persister is None:  # state in memory only: no share coordinator on this node
            return
        state = ShareState(self.state_epoch, self.leader_epoch, self.start_offset, self.state_batches(changed))
        await self.persister.write(self.group_id, self.topic_id, self.partition, state)

    def _save(self):
        return self.start_offset, self.end_offset, [run.copy() for run in self.runs]

    def _restore(self, saved) -> None:
        self.start_offset, self.end_offset, self.runs = saved

    # --- waiting for records to become available ---

    def add_waiter(self, future: asyncio.Future) -> None:
        self._waiters.add(future)

    def drop_waiter(self, future: asyncio.Future) -> None:
        self._waiters.discard(future)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def close(self) -> None:
        """No longer led here: stop the lock timers; a new leader reads the persisted state."""
        self.closed = True
        for lock in self._locks:
            lock.timer.cancel()
        self._locks.clear()
        for task in self._tasks:
            task.cancel()
        self._wake()

    # --- runs ---

    def _runs_between(self, first: int, last: int):
        return (run for run in self.runs if run.last >= first and run.first <= last)

    def _split_at(self, offset: int) -> None:
        """Make offset the first of a run (when it is inside one)."""
        for index, run in enumerate(self.runs):
            if run.first < offset <= run.last:
                tail = Run(offset, run.last, run.state, run.delivery_count, run.lock)
                run.last = offset - 1
                self.runs.insert(index + 1, tail)
                return
            if run.first >= offset:
                return

    def _merge(self) -> None:
        """Join neighbouring runs that nothing tells apart."""
        merged: list[Run] = []
        for run in self.runs:
            last = merged[-1] if merged else None
            if (last is not None and last.last + 1 == run.first and last.state == run.state
                    and last.delivery_count == run.delivery_count and last.lock is run.lock):
                last.last = run.last
            else:
                merged.append(run)
        self.runs = merged

    def _advance_start(self) -> None:
        done = 0
        for run in self.runs:
            if run.state not in DONE_STATES:
                break
            done += 1
        if done:
            self.start_offset = self.runs[done - 1].last + 1
            del self.runs[:done]


def write_error(code: ErrorCode) -> ErrorCode:
    """What a client is answered for a persister error."""
    return _WRITE_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)


def _settled_state(ack_type: int) -> int | None:
    if ack_type == ACCEPT:
        return ACKNOWLEDGED
    if ack_type == RELEASE:
        return None
    return ARCHIVED  # REJECT, and GAP: offsets holding no record the client could deliver


def _type_runs(first: int, last: int, types) -> list[tuple[int, int, int]]:
    """(first, last, type) for each stretch of one acknowledge type."""
    if len(types) == 1:
        return [(first, last, types[0])]
    runs: list[tuple[int, int, int]] = []
    start = first
    for index in range(1, len(types) + 1):
        if index == len(types) or types[index] != types[index - 1]:
            runs.append((start, first + index - 1, types[index - 1]))
            start = first + index
    return runs


def _ranges(acquired: list[Run]) -> list[tuple[int, int, int]]:
    """Acquired runs as (first, last, delivery count), neighbours of one count joined."""
    ranges: list[list[int]] = []
    for run in sorted(acquired, key=lambda r: r.first):
        if ranges and ranges[-1][1] + 1 == run.first and ranges[-1][2] == run.delivery_count:
            ranges[-1][1] = run.last
        else:
            ranges.append([run.first, run.last, run.delivery_count])
    return [tuple(r) for r in ranges]
