"""Committed offsets of the groups this node coordinates, whatever the group's type, and the
offsets transactions have committed but not yet ended.

They are kept apart from membership, as Kafka keeps its OffsetMetadataManager apart from its
GroupMetadataManager: a group of any type commits, fetches and deletes offsets the same way,
and whether a member may commit is the group type's own check. A commit is visible only once
its records are on every in-sync replica of the group's `__consumer_offsets` partition; a
deletion is a tombstone per offset.

A transactional commit (TxnOffsetCommit, KIP-98) is pending from the moment its batch is in the
log: invisible to OffsetFetch, held per producer until the transaction's marker commits it into
the group's offsets or aborts it. Of a plain and a transactional commit of one partition, the
one whose record is later in the log wins, whichever completes last (Kafka's
CommitRecordMetadataAndOffset rule). Pending offsets never expire.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from cluster.formats.errors import ErrorCode
from node.coordinator_log import Producer
from node.groups.persistence import GroupError, GroupLog
from node.groups.records import CommittedOffset, decode_offset_value, offset_key, offset_value

Position = tuple[str, int]  # (topic, partition)


@dataclass
class OpenTransaction:
    """One producer's offsets committed in a transaction that has not ended yet: by group, then position."""

    producer_epoch: int
    by_group: dict[str, dict[Position, CommittedOffset]] = field(default_factory=dict)


class OffsetStore:
    def __init__(self, group_log: GroupLog):
        self.group_log = group_log
        self._by_group: dict[str, dict[Position, CommittedOffset]] = {}
        self._transactions: dict[int, OpenTransaction] = {}  # by producer id
        self._producers_of: dict[str, set[int]] = {}  # group -> producers with offsets pending in it

    # --- reading ---

    def committed(self, group_id: str) -> dict[Position, CommittedOffset]:
        return self._by_group.get(group_id, {})

    def has_pending(self, group_id: str, position: Position) -> bool:
        """Whether a transaction that has not ended committed an offset of this partition for the group."""
        return any(position in self._transactions[producer_id].by_group[group_id]
                   for producer_id in self._producers_of.get(group_id, ()))

    def has_open_transactions(self, group_id: str) -> bool:
        return group_id in self._producers_of

    def pending(self, producer_id: int, group_id: str) -> dict[Position, CommittedOffset]:
        transaction = self._transactions.get(producer_id)
        return transaction.by_group.get(group_id, {}) if transaction else {}

    def groups_pending_for(self, producer_id: int) -> list[str]:
        transaction = self._transactions.get(producer_id)
        return list(transaction.by_group) if transaction else []

    def _pending_positions(self, group_id: str) -> set[Position]:
        return {position for producer_id in self._producers_of.get(group_id, ())
                for position in self._transactions[producer_id].by_group[group_id]}

    # --- plain commits ---

    async def commit(self, group, offsets: dict[Position, CommittedOffset]) -> None:
        """Offsets become visible to OffsetFetch only once they are on every in-sync replica."""
        # Taken before the write: offsets of a group that moves away while it waits go nowhere.
        committed = self._by_group.setdefault(group.group_id, {})
        batch = _offset_records(group.group_id, offsets)
        if not batch:
            return
        first_offset = await self.group_log.append_replicated(group.partition, batch)
        for position, offset in offsets.items():
            _keep_later(committed, position, replace(offset, record_offset=first_offset))

    # --- transactional commits ---

    async def commit_transactional(self, group, producer: Producer,
                                   offsets: dict[Position, CommittedOffset]) -> None:
        """Offsets pending in the producer's transaction from the moment their batch is in the log.
        A producer epoch older than the producer's pending commits is fenced, as the partition's
        producer state fences it in Kafka."""
        producer_id, producer_epoch = producer
        transaction = self._transactions.get(producer_id)
        if transaction is not None and producer_epoch < transaction.producer_epoch:
            raise GroupError(ErrorCode.INVALID_PRODUCER_EPOCH)
        batch = _offset_records(group.group_id, offsets)
        if not batch:
            return
        staged: dict[Position, CommittedOffset] = {}

        def stage(first_offset: int) -> None:
            staged.update({position: replace(offset, record_offset=first_offset)
                           for position, offset in offsets.items()})
            self._stage(group.group_id, producer, staged)

        try:
            await self.group_log.append_replicated(group.partition, batch, producer=producer, on_append=stage)
        except (GroupError, OSError):
            # Kafka's failPendingTxnOffsetCommit: the client is told the commit failed and retries it. A
            # write cancelled (the node stopping) keeps them pending, as its batch in the log has them.
            self._unstage(group.group_id, producer_id, staged)
            raise

    def _stage(self, group_id: str, producer: Producer, offsets: dict[Position, CommittedOffset]) -> None:
        producer_id, producer_epoch = producer
        transaction = self._transactions.setdefault(producer_id, OpenTransaction(producer_epoch))
        transaction.producer_epoch = max(transaction.producer_epoch, producer_epoch)
        transaction.by_group.setdefault(group_id, {}).update(offsets)
        self._producers_of.setdefault(group_id, set()).add(producer_id)

    def _unstage(self, group_id: str, producer_id: int, offsets: dict[Position, CommittedOffset]) -> None:
        """Drop the offsets staged by one write, unless a later write of the producer replaced them."""
        pending = self.pending(producer_id, group_id)
        for position, offset in offsets.items():
            if pending.get(position) is offset:
                del pending[position]
        if not pending:
            self._end_pending(producer_id, group_id)

    def complete(self, producer_id: int, group_ids: list[str], committed: bool) -> None:
        """The producer's transaction ended in these groups' partitions (its marker is in the log): its
        pending offsets there become the groups' offsets, or are dropped. A committed offset replaces
        one whose record is earlier in the log only (Kafka's completePendingTxnOffsetCommit)."""
        for group_id in group_ids:
            pending = self.pending(producer_id, group_id)
            self._end_pending(producer_id, group_id)
            if committed and pending:
                stored = self._by_group.setdefault(group_id, {})
                for position, offset in pending.items():
                    _keep_later(stored, position, offset)

    def _end_pending(self, producer_id: int, group_id: str) -> None:
        transaction = self._transactions.get(producer_id)
        if transaction is None:
            return
        transaction.by_group.pop(group_id, None)
        if not transaction.by_group:
            del self._transactions[producer_id]
        producers = self._producers_of.get(group_id)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._producers_of[group_id]

    def _drop_pending_position(self, group_id: str, position: Position) -> None:
        """Every pending offset of the partition goes with its deletion, as in Kafka."""
        for producer_id in list(self._producers_of.get(group_id, ())):
            pending = self._transactions[producer_id].by_group[group_id]
            pending.pop(position, None)
            if not pending:
                self._end_pending(producer_id, group_id)

    # --- deleting and expiring ---

    def delete(self, group, positions: list[Position]) -> None:
        committed = self._by_group.get(group.group_id, {})
        pending = self._pending_positions(group.group_id)
        batch = [(offset_key(group.group_id, t, p), None) for t, p in positions
                 if (t, p) in committed or (t, p) in pending]
        if batch:
            self.group_log.append(group.partition, batch)
        for position in positions:
            committed.pop(position, None)
            self._drop_pending_position(group.group_id, position)

    def tombstones(self, group_id: str) -> list[tuple[bytes, None]]:
        """A tombstone for every offset of the group, committed or pending, for deleting it."""
        positions = self.committed(group_id).keys() | self._pending_positions(group_id)
        return [(offset_key(group_id, t, p), None) for t, p in sorted(positions)]

    def of_topics(self, group_id: str, topics: set[str]) -> list[Position]:
        positions = self.committed(group_id).keys() | self._pending_positions(group_id)
        return [position for position in sorted(positions) if position[0] in topics]

    def stale(self, group_id: str, retention_ms: int, now_ms: int) -> list[Position]:
        """Offsets not committed for retention_ms (offsets.retention.minutes). One a transaction is
        about to replace waits for the transaction's end, as in Kafka."""
        return [p for p, c in self.committed(group_id).items()
                if now_ms - c.commit_timestamp > retention_ms and not self.has_pending(group_id, p)]

    # --- replay and forgetting ---

    def replay(self, group_id: str, position: Position, value: bytes | None, record_offset: int) -> None:
        """A plain offset record read back from the group's partition (None: its tombstone, which
        takes the partition's pending offsets with it, as Kafka's replay does)."""
        if value is None:
            self._by_group.get(group_id, {}).pop(position, None)
            self._drop_pending_position(group_id, position)
        else:
            offset = replace(decode_offset_value(value), record_offset=record_offset)
            self._by_group.setdefault(group_id, {})[position] = offset

    def replay_transactional(self, group_id: str, producer: Producer, position: Position, value: bytes | None,
                             record_offset: int) -> None:
        """An offset record of a transactional batch: pending until the producer's marker."""
        if value is None:
            pending = self.pending(producer[0], group_id)
            pending.pop(position, None)
            if not pending:
                self._end_pending(producer[0], group_id)
        else:
            offset = replace(decode_offset_value(value), record_offset=record_offset)
            self._stage(group_id, producer, {position: offset})

    def forget(self, group_id: str) -> None:
        """The group was deleted, or is coordinated elsewhere now."""
        self._by_group.pop(group_id, None)
        for producer_id in list(self._producers_of.get(group_id, ())):
            self._end_pending(producer_id, group_id)


def _offset_records(group_id: str, offsets: dict[Position, CommittedOffset]) -> list[tuple[bytes, bytes]]:
    return [(offset_key(group_id, topic, partition), offset_value(offset))
            for (topic, partition), offset in offsets.items()]


def _keep_later(offsets: dict[Position, CommittedOffset], position: Position, offset: CommittedOffset) -> None:
    """Store the offset unless the one stored was written later in the log (Kafka's olderThan)."""
    current = offsets.get(position)
    if current is None or current.record_offset < offset.record_offset:
        offsets[position] = offset
