"""Producers of one partition: idempotent sequences, open transactions, and producer-id blocks.

A retried batch that was already written is answered with its original offsets
(DUPLICATE_SEQUENCE_NUMBER is success to the client); a gap in sequence numbers is
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH; a batch without the
transactional flag from a producer whose transaction is open in the partition is INVALID_TXN_STATE.

A transactional batch opens its producer's transaction in the partition, at its first offset; the
COMMIT or ABORT marker the coordinator writes ends it (Kafka's ProducerStateManager). Until then
read_committed readers stop at the first open transaction: the last stable offset (LSO) is the
lowest first offset of a transaction that is open, or ended by a marker not yet below the high
watermark, and never above the high watermark. An aborted transaction becomes an entry of the
aborted-transaction index that read_committed fetches answer with.

State lives in memory. A snapshot of it is written in Kafka's `.snapshot` format at each segment
roll and when the log closes; a partition opened or truncated starts from the latest snapshot at or
below its log end and replays the batch headers (and markers) after it.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from cluster.formats import control_records
from cluster.formats.producer_snapshot import SnapshotEntry, latest_snapshot, write_snapshot
from cluster.formats.transaction_index import AbortedTxn
from cluster.formats.errors import ErrorCode

# Kafka keeps the last five batches per producer so that in-flight retries can be matched.
BATCHES_REMEMBERED = 5
MAX_SEQUENCE = (1 << 31) - 1


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int = -1
    # (first sequence, last sequence, first offset, last offset) of recent batches
    recent: deque = field(default_factory=lambda: deque(maxlen=BATCHES_REMEMBERED))
    last_timestamp: int = -1
    # The epoch of the transaction coordinator that wrote this producer's last marker.
    coordinator_epoch: int = -1
    # The first offset of the producer's open transaction here, -1 when none is open.
    txn_first_offset: int = -1


# (producer id, first offset, last offset, last stable offset): Kafka's AbortedTxn entry.
AbortedTransaction = tuple[int, int, int, int]


class MarkerError(Exception):
    """A transaction marker refused: an older producer epoch, or a fenced coordinator."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class SequenceError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class PartitionProducers:
    """Sequence state of the idempotent producers writing to one partition."""

    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        # Open transactions, producer id -> first offset, in the order they opened (so by offset).
        self.open_transactions: dict[int, int] = {}
        # Transactions ended by a marker the high watermark has not yet passed: (first, marker offset).
        self._undecided: list[tuple[int, int]] = []

    @classmethod
    def from_log(cls, partition_log) -> "PartitionProducers":
        """Rebuild producer state from the latest snapshot and the batch headers and markers after it
        (after a restart or a truncation). The aborted transactions replayed are indexed where a
        crash left them out of the log's aborted-transaction index."""
        producers = cls()
        start = partition_log.log_start_offset
        found = latest_snapshot(partition_log.directory, partition_log.log_end_offset)
        if found is not None and found[0] >= start:
            start = found[0]
            producers.load_snapshot(found[1])
        aborted = []
        for data, position, header in partition_log.batch_headers(start):
            if header.producer_id >= 0:
                entry = producers.track(data, position, header)
                if entry is not None:
                    aborted.append(AbortedTxn(*entry))
        if aborted:
            partition_log.index_aborted_transactions(aborted)
        return producers

    # --- snapshots ---

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """Each producer as Kafka's snapshot keeps it: its last batch, epochs and open transaction."""
        entries = []
        for producer_id, entry in self.producers.items():
            first_offset, last_offset = (entry.recent[-1][2], entry.recent[-1][3]) if entry.recent else (-1, -1)
            entries.append(SnapshotEntry(producer_id, entry.epoch, entry.last_sequence, last_offset,
                                         last_offset - first_offset, entry.last_timestamp, entry.coordinator_epoch,
                                         entry.txn_first_offset))
        return entries

    def load_snapshot(self, entries: list[SnapshotEntry]) -> None:
        for found in entries:
            entry = self.producers[found.producer_id] = ProducerEntry(
                found.epoch, found.last_sequence, last_timestamp=found.timestamp,
                coordinator_epoch=found.coordinator_epoch, txn_first_offset=found.current_txn_first_offset)
            if found.last_offset >= 0:
                first_sequence = (found.last_sequence - found.offset_delta) % (MAX_SEQUENCE + 1)
                entry.recent.append((first_sequence, found.last_sequence, found.last_offset - found.offset_delta,
                                     found.last_offset))
            if found.current_txn_first_offset >= 0:
                self.open_transactions[found.producer_id] = found.current_txn_first_offset
        self.open_transactions = dict(sorted(self.open_transactions.items(), key=lambda item: item[1]))

    def write_snapshot(self, directory, offset: int) -> None:
        write_snapshot(directory, offset, self.snapshot_entries())

    def track(self, data, position: int, header) -> AbortedTransaction | None:
        """A batch appended with its offsets already assigned (a follower's copy, a log replayed):
        its sequences, or, for a marker, the end of its transaction (the aborted one it returns)."""
        if not header.is_control:
            self.record(header, header.base_offset)
            return None
        if header.record_count == 0:
            return None  # what the log cleaner left of a marker whose transaction is gone: it ends nothing
        kind = control_records.control_type(data, position)
        if kind not in (control_records.COMMIT, control_records.ABORT):
            return None
        return self.end_transaction(header.producer_id, header.producer_epoch, header.base_offset,
                                    kind == control_records.COMMIT,
                                    control_records.coordinator_epoch_of(data, position), header.max_timestamp,
                                    check=False)

    def find_duplicate(self, header) -> tuple[int, int] | None:
        """(first offset, last offset) when this batch was already appended."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        last_sequence = _last_sequence(header)
        for first_seq, last_seq, first_offset, last_offset in entry.recent:
            if first_seq == header.base_sequence and last_seq == last_sequence:
                return first_offset, last_offset
        return None

    def check(self, header) -> None:
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.epoch:
            raise SequenceError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                f"producer epoch {header.producer_epoch} is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise SequenceError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    f"a new producer epoch must start at sequence 0, got {header.base_sequence}")
        else:
            expected = 0 if entry.last_sequence == MAX_SEQUENCE else entry.last_sequence + 1
            if header.base_sequence != expected:
                raise SequenceError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    f"expected sequence {expected}, got {header.base_sequence}")
        if entry.txn_first_offset >= 0 and not header.is_transactional:
            # (Kafka's ProducerAppendInfo: a producer writes inside its open transaction or not at all)
            raise SequenceError(ErrorCode.INVALID_TXN_STATE,
                                f"a non-transactional batch while its transaction from offset {entry.txn_first_offset} "
                                "is open")

    def record(self, header, first_offset: int) -> None:
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._new_epoch(header.producer_id, header.producer_epoch, entry)
        entry.last_sequence = _last_sequence(header)
        entry.recent.append((header.base_sequence, entry.last_sequence, first_offset,
                             first_offset + header.last_offset_delta))
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self.open_transactions[header.producer_id] = first_offset

    def _new_epoch(self, producer_id: int, epoch: int, previous: ProducerEntry | None) -> ProducerEntry:
        """A producer's entry at a new epoch: sequences start over; an open transaction and the
        coordinator epoch carry over (a marker at the new epoch still ends that transaction)."""
        entry = self.producers[producer_id] = ProducerEntry(epoch)
        if previous is not None:
            entry.coordinator_epoch = previous.coordinator_epoch
            entry.txn_first_offset = previous.txn_first_offset
            entry.last_timestamp = previous.last_timestamp
        return entry

    # --- transactions ---

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks of a marker before it is appended: the producer's epoch may not be older than
        the one this partition knows, nor the coordinator's older than the last marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise MarkerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                              f"marker epoch {producer_epoch} is older than producer epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise MarkerError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                              f"coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch}")

    def end_transaction(self, producer_id: int, producer_epoch: int, marker_offset: int, commit: bool,
                        coordinator_epoch: int, timestamp: int = -1, check: bool = True) -> AbortedTransaction | None:
        """A marker written at marker_offset ends the producer's open transaction here, if any; an
        aborted one is returned as the aborted-transaction index entry it makes."""
        if check:
            self.check_marker(producer_id, producer_epoch, coordinator_epoch)
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            entry = self._new_epoch(producer_id, producer_epoch, entry)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        first_offset, entry.txn_first_offset = entry.txn_first_offset, -1
        if first_offset < 0:
            return None  # a marker for a transaction that wrote nothing here
        del self.open_transactions[producer_id]
        self._undecided.append((first_offset, marker_offset))
        if commit:
            return None
        return producer_id, first_offset, marker_offset, self._next_open_offset(marker_offset + 1)

    def _next_open_offset(self, otherwise: int) -> int:
        """The first offset of the earliest transaction still open (Kafka's lastStableOffset of a
        completed transaction), or `otherwise`."""
        return next(iter(self.open_transactions.values()), otherwise)

    def high_watermark_moved(self, high_watermark: int) -> None:
        """Forget the transactions whose marker is now below the high watermark, so on every
        replica: they hold the LSO back no more (Kafka's onHighWatermarkUpdated). Called by leaders
        and followers alike as their high watermark moves, whether or not anyone reads the LSO."""
        undecided = self._undecided
        if undecided and undecided[0][1] < high_watermark:
            undecided[:] = [pair for pair in undecided if pair[1] >= high_watermark]

    def stable_below(self, high_watermark: int) -> int:
        """The last stable offset at this high watermark: read_committed readers read below it."""
        self.high_watermark_moved(high_watermark)
        undecided = self._undecided
        unstable = min(first for first, _ in undecided) if undecided else high_watermark
        if self.open_transactions:
            unstable = min(unstable, next(iter(self.open_transactions.values())))
        return min(unstable, high_watermark)

    def has_open_transaction(self, producer_id: int) -> bool:
        return producer_id in self.open_transactions


def _last_sequence(header) -> int:
    return (header.base_sequence + header.last_offset_delta) % (MAX_SEQUENCE + 1)


class ProducerIdAllocator:
    """Hands out producer ids from blocks the controller reserves in the metadata log."""

    def __init__(self, broker):
        self.broker = broker
        self.next_id = 0
        self.end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self.next_id >= self.end:
                block = await self.broker.metadata.call_controller(
                    "allocate_producer_ids", node_id=self.broker.node_id, broker_epoch=self.broker.metadata.broker_epoch)
                self.next_id, self.end = block["first_producer_id"], block["first_producer_id"] + block["count"]
            producer_id = self.next_id
            self.next_id += 1
            return producer_id
