"""What the log cleaner knows of transactions as it walks a log (Kafka's CleanedTransactionMetadata).

The cleaner reads the batches of a log in offset order. The aborted-transaction indexes tell it
which transactions were aborted (an entry's first offset opens one, its ABORT marker closes it);
every other transactional batch below the first uncleanable offset belongs to a committed
transaction, since the cleaner never reads at or past the last stable offset. From that walk:

- a batch of an aborted transaction is discardable: it is left out of the offset map (so that it
  can never shadow a committed value of its key) and its records are removed;
- an ABORT marker must stay while a batch of its transaction was seen in this walk (a
  read_committed reader still needs it, and the marker's index entry, to drop those records);
  such markers' entries make the cleaned segment's `.txnindex`;
- a COMMIT marker must stay while a batch of its transaction was seen in this walk (without it
  the producer's transaction would look open to whoever replays the log);
- a marker with nothing of its transaction left (or an empty control batch, what an earlier
  cleaning left of one) is discardable: the cleaner stamps it with a delete horizon and removes
  it once that has passed (see log_cleaner).
"""
from __future__ import annotations

from typing import Iterable

from cluster.formats import control_records
from cluster.formats.records import BatchHeader
from cluster.formats.transaction_index import AbortedTxn


class _AbortedInProgress:
    __slots__ = ("entry", "seen")

    def __init__(self, entry: AbortedTxn):
        self.entry = entry
        self.seen = False  # a batch of it was read in this walk (Kafka's lastObservedBatchOffset)


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn], from_offset: int = -1):
        """aborted: the aborted-transaction index entries; those ending before from_offset, where
        the walk starts, are left out (their markers will not be read to end them)."""
        self._aborted = sorted((e for e in aborted if e.last_offset >= from_offset), key=lambda e: e.first_offset)
        self._next = 0
        self._ongoing_aborted: dict[int, _AbortedInProgress] = {}
        self._ongoing_committed: set[int] = set()
        # The entries of the ABORT markers kept since they were last taken, in marker order.
        self._kept_entries: list[AbortedTxn] = []

    def _begin_aborted_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            entry = aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(entry.producer_id, _AbortedInProgress(entry))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch read; True when it belongs to an aborted transaction."""
        self._begin_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted.seen = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, data) -> bool:
        """A control batch (whole, in data) read; True when nothing of its transaction is left for it
        to end, so that it may go once its delete horizon passes. A kept ABORT marker's entry is kept
        for take_kept_entries."""
        self._begin_aborted_up_to(header.last_offset)
        if header.record_count == 0:
            return True  # what an earlier cleaning left of a marker: it ends nothing any more
        kind = control_records.control_type(data)
        if kind == control_records.ABORT:
            aborted = self._ongoing_aborted.pop(header.producer_id, None)
            if aborted is not None and aborted.seen:
                self._kept_entries.append(aborted.entry)
                return False
            return True
        if kind == control_records.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False  # another kind of control record: kept

    def take_kept_entries(self) -> list[AbortedTxn]:
        """The index entries of the ABORT markers kept since the last call (a cleaned segment's
        `.txnindex`), ascending by marker offset."""
        entries, self._kept_entries = self._kept_entries, []
        return entries
