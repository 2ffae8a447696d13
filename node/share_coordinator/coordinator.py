"""The share coordinator: the share-partition state of the `__share_group_state` partitions this node leads.

What InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState
and ReadShareGroupStateSummary call, with Kafka's ShareCoordinatorShard rules. Every change is
appended with acks=all before it takes effect: a ShareUpdate record per write, and a ShareSnapshot
of the whole state when the share-partition is (re)initialized, when its state epoch moves, and
after every share.coordinator.snapshot.update.records.per.snapshot updates. A node that becomes the
leader of a partition replays its records (node.share_coordinator.records) into memory; one that
stops leading it forgets them.

Fencing: a write or read naming a leader epoch older than the one stored is FENCED_LEADER_EPOCH
(a deposed partition leader); a write or initialization naming an older state epoch is
FENCED_STATE_EPOCH (the share-partition was initialized again since, e.g. by AlterShareGroupOffsets);
so is a write of a share-partition that has no state (deleted since the leader read it, by
DeleteGroups or DeleteShareGroupOffsets): the leader drops what it holds and reads the state again,
rather than bringing the deleted state back.
A read naming a newer leader epoch stores it, so the leader before it is fenced from then on,
also by a coordinator that takes over later.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError, CoordinatorLog, replay_records
from node.share_coordinator import placement
from node.share_coordinator.batches import merge_batches
from node.share_coordinator.records import (
    NOT_UPDATED, SNAPSHOT_TYPE, UPDATE_TYPE, Snapshot, StateKey, Update, decode_key, decode_snapshot,
    decode_update, encode_key, encode_snapshot, encode_update,
)
from node.share_coordinator.state import NO_START_OFFSET, ShareState, StateBatch

log = logging.getLogger(__name__)

NO_LEADER_EPOCH = -1
SNAPSHOT_EVERY = "share.coordinator.snapshot.update.records.per.snapshot"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class StoredState:
    """One share-partition's state as the coordinator holds it: the last snapshot with the updates
    since applied over it."""
    log_partition: int
    snapshot: Snapshot
    updates_since_snapshot: int = 0
    leader_epoch: int = NO_LEADER_EPOCH
    start_offset: int = NO_START_OFFSET
    batches: list[StateBatch] = field(default_factory=list)

    @classmethod
    def from_snapshot(cls, log_partition: int, snapshot: Snapshot) -> "StoredState":
        return cls(log_partition, snapshot, 0, snapshot.leader_epoch, snapshot.start_offset, list(snapshot.batches))

    def apply(self, update: Update) -> None:
        if update.start_offset != NOT_UPDATED:
            self.start_offset = update.start_offset
        if update.leader_epoch != NOT_UPDATED:
            self.leader_epoch = update.leader_epoch
        self.batches = merge_batches(self.batches, update.batches, self.start_offset)
        self.updates_since_snapshot += 1

    def as_share_state(self) -> ShareState:
        return ShareState(self.snapshot.state_epoch, self.leader_epoch, self.start_offset, list(self.batches))


class ShareCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.states: dict[StateKey, StoredState] = {}
        # __share_group_state partitions loaded here -> the leader epoch they were loaded at.
        self.loaded_epochs: dict[int, int] = {}
        self.log = CoordinatorLog(broker, placement.SHARE_STATE_TOPIC, "request.timeout.ms")
        self._locks: dict[StateKey, asyncio.Lock] = {}

    # --- placement ---

    def partition_count(self) -> int:
        topic = self.broker.topic(placement.SHARE_STATE_TOPIC)
        return len(topic.partitions) if topic else self.broker.config.get_int(
            "share.coordinator.state.topic.num.partitions")

    def partition_of(self, key: StateKey) -> int:
        return placement.partition_for_key(placement.coordinator_key(key.group_id, key.topic_id, key.partition),
                                           self.partition_count())

    def owns(self, key: StateKey) -> ErrorCode:
        partition = self.partition_of(key)
        info = self.broker.partition(placement.SHARE_STATE_TOPIC, partition)
        if info is None or info.leader != self.broker.node_id:
            return ErrorCode.NOT_COORDINATOR
        if self.loaded_epochs.get(partition) != info.leader_epoch:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _refusal(self, key: StateKey) -> ErrorCode:
        """Why this node cannot act on the share-partition now, or NONE."""
        if not key.group_id or key.partition < 0:
            return ErrorCode.INVALID_REQUEST
        error = self.owns(key)
        if error:
            return error
        topic = self.broker.topic_by_id(key.topic_id)
        if topic is None or key.partition not in topic.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NONE

    # --- loading and unloading partitions ---

    def follow_leadership(self, hosted: dict) -> None:
        """Load the `__share_group_state` partitions this node leads (again whenever it takes a new term
        of one, so that what a deposed term wrote is seen), and forget those led elsewhere."""
        topic = self.broker.topic(placement.SHARE_STATE_TOPIC)
        led = {index: info.leader_epoch for index, info in (topic.partitions.items() if topic else ())
               if info.leader == self.broker.node_id and (placement.SHARE_STATE_TOPIC, index) in hosted}
        for partition, epoch in list(self.loaded_epochs.items()):
            if led.get(partition) != epoch:
                self.unload_partition(partition)
        for partition, epoch in led.items():
            if partition not in self.loaded_epochs:
                self.load_partition(partition, hosted[(placement.SHARE_STATE_TOPIC, partition)].log, epoch)

    def load_partition(self, partition: int, partition_log, leader_epoch: int) -> None:
        """Take over a partition's share-partitions: replay its snapshots and the updates after them."""
        loaded: dict[StateKey, StoredState] = {}
        for key, value in replay_records(partition_log):
            decoded = decode_key(key) if key else None
            if decoded is None:
                continue
            record_type, state_key = decoded
            if record_type == SNAPSHOT_TYPE:
                if value is None:
                    loaded.pop(state_key, None)
                else:
                    loaded[state_key] = StoredState.from_snapshot(partition, decode_snapshot(value))
            elif value is not None and state_key in loaded:
                loaded[state_key].apply(decode_update(value))
        self.unload_partition(partition)
        self.states.update(loaded)
        self.loaded_epochs[partition] = leader_epoch
        log.info("loaded %d share-partitions from %s-%d at leader epoch %d", len(loaded),
                 placement.SHARE_STATE_TOPIC, partition, leader_epoch)

    def unload_partition(self, partition: int) -> None:
        self.loaded_epochs.pop(partition, None)
        for key in [k for k, s in self.states.items() if s.log_partition == partition]:
            del self.states[key]
            self._locks.pop(key, None)

    # --- the operations ---

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        """The stored state (None: never initialized). A newer leader epoch is stored first."""
        error = self._refusal(key)
        if error:
            return error, None
        async with self._lock(key):
            stored = self.states.get(key)
            if stored is None:
                return ErrorCode.NONE, None
            if leader_epoch != NO_LEADER_EPOCH and stored.leader_epoch > leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, None
            if leader_epoch > stored.leader_epoch:
                error = await self._store_update(key, stored, Update(stored.snapshot.snapshot_epoch, leader_epoch,
                                                                     NOT_UPDATED, ()))
                if error:
                    return error, None
            return ErrorCode.NONE, stored.as_share_state()

    def read_summary(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, int, int]:
        """(error, state epoch, start offset) without changing anything; -1 start offset when never initialized."""
        error = self._refusal(key)
        if error:
            return error, 0, NO_START_OFFSET
        stored = self.states.get(key)
        if stored is None:
            return ErrorCode.NONE, 0, NO_START_OFFSET
        if leader_epoch != NO_LEADER_EPOCH and stored.leader_epoch > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, 0, NO_START_OFFSET
        return ErrorCode.NONE, stored.snapshot.state_epoch, stored.start_offset

    async def write(self, key: StateKey, state: ShareState) -> ErrorCode:
        """Store a partition leader's change (see SharePersister.write)."""
        error = self._refusal(key)
        if error:
            return error
        async with self._lock(key):
            stored = self.states.get(key)
            if stored is None:  # (a leader initializes the state before it writes any)
                return ErrorCode.FENCED_STATE_EPOCH
            if stored.leader_epoch > state.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if stored.snapshot.state_epoch > state.state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
            if (stored.snapshot.state_epoch != state.state_epoch
                    or stored.updates_since_snapshot >= self.broker.config.get_int(SNAPSHOT_EVERY)):
                return await self._store_snapshot(key, self._snapshot_after(key, stored, state))
            update = Update(stored.snapshot.snapshot_epoch, state.leader_epoch, state.start_offset,
                            tuple(merge_batches((), state.batches, state.start_offset)))
            return await self._store_update(key, stored, update)

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> ErrorCode:
        """Start the share-partition (again) at start_offset with no batches, at state_epoch."""
        error = self._refusal(key)
        if error:
            return error
        async with self._lock(key):
            stored = self.states.get(key)
            if stored is not None and stored.snapshot.state_epoch > state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
            epoch = stored.snapshot.snapshot_epoch + 1 if stored is not None else 0
            now = now_ms()
            return await self._store_snapshot(key, Snapshot(epoch, state_epoch, NO_LEADER_EPOCH, start_offset, now,
                                                            now, ()))

    async def delete(self, key: StateKey) -> ErrorCode:
        """Forget the share-partition: tombstones for its snapshot and update keys."""
        error = self._refusal(key)
        if error:
            return error
        async with self._lock(key):
            if key not in self.states:
                return ErrorCode.NONE
            records = [(encode_key(SNAPSHOT_TYPE, key), None), (encode_key(UPDATE_TYPE, key), None)]
            error = await self._append(key, records)
            if not error:
                self.states.pop(key, None)
            return error

    # --- writing records ---

    def _snapshot_after(self, key: StateKey, stored: StoredState | None, state: ShareState) -> Snapshot:
        now = now_ms()
        if stored is None:
            start = state.start_offset
            return Snapshot(0, state.state_epoch, state.leader_epoch, start, now, now,
                            tuple(merge_batches((), state.batches, start)))
        start = stored.start_offset if state.start_offset == NOT_UPDATED else state.start_offset
        return Snapshot(stored.snapshot.snapshot_epoch + 1, state.state_epoch, state.leader_epoch, start,
                        stored.snapshot.create_timestamp, now,
                        tuple(merge_batches(stored.batches, state.batches, start)))

    async def _store_snapshot(self, key: StateKey, snapshot: Snapshot) -> ErrorCode:
        error = await self._append(key, [(encode_key(SNAPSHOT_TYPE, key), encode_snapshot(snapshot))])
        if not error:
            self.states[key] = StoredState.from_snapshot(self.partition_of(key), snapshot)
        return error

    async def _store_update(self, key: StateKey, stored: StoredState, update: Update) -> ErrorCode:
        error = await self._append(key, [(encode_key(UPDATE_TYPE, key), encode_update(update))])
        if not error:
            stored.apply(update)
        return error

    async def _append(self, key: StateKey, records) -> ErrorCode:
        """Append with acks=all; what the records stand for is applied by the caller once this answers
        NONE and this node still coordinates the share-partition at the epoch it wrote in."""
        partition = self.partition_of(key)
        epoch = self.loaded_epochs.get(partition)
        try:
            await self.log.append_replicated(partition, records)
        except CoordinatorError as exc:
            log.info("cannot store the state of %s: %s", placement.coordinator_key(
                key.group_id, key.topic_id, key.partition), exc.code.name)
            return exc.code
        if self.loaded_epochs.get(partition) != epoch:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def _lock(self, key: StateKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock
