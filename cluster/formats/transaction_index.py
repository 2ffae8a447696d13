"""A segment's aborted-transaction index, `<20-digit base offset>.txnindex`, as Kafka writes it.

One 34-byte big-endian entry per transaction aborted by a marker written in the segment
(Kafka's AbortedTxn): version int16 (0), producer id int64, first offset int64, last offset
int64 (the ABORT marker's), and the last stable offset int64 when the marker was written. A
read_committed fetch asks the index for the aborted transactions overlapping what it returns,
so that the client can drop their records.

Entries ascend strictly by last offset, as Kafka's TransactionIndex.append insists. The file
is created with its first entry (a segment without aborted transactions has none, as on
Kafka), and nothing is read until an entry is asked for; then the entries stay in memory. A
trailing partial entry (a write torn by a crash) is ignored, and cut off when the index is
loaded for writing or reading, so that the next append lands on an entry boundary.
"""
from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path
from typing import Iterable, NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class CorruptIndexError(Exception):
    """An index entry Kafka would refuse to read (an unknown version)."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """Kafka's TxnIndexSearchResult: the entries found, and whether later segments can hold no more."""
    aborted_transactions: list[AbortedTxn]
    is_complete: bool


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(ENTRY_VERSION, *entry) for entry in entries)


def decode_entries(data: bytes, source: object = "") -> list[AbortedTxn]:
    """The whole entries of data; a trailing partial entry is left out."""
    whole = len(data) - len(data) % ENTRY_SIZE
    entries = []
    for version, *fields in _ENTRY.iter_unpack(memoryview(data)[:whole]):
        if version != ENTRY_VERSION:
            raise CorruptIndexError(f"unexpected aborted transaction version {version} in {source}")
        entries.append(AbortedTxn(*fields))
    return entries


def read_entries(path: Path) -> list[AbortedTxn]:
    """A transaction index file's entries, without changing the file (none when it is absent)."""
    try:
        return decode_entries(path.read_bytes(), path)
    except FileNotFoundError:
        return []


class TransactionIndex:
    """One segment's `.txnindex`: appended to while its segment is active, read by fetches."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = -1  # opened for appends with the first one
        self._entries: list[AbortedTxn] | None = None  # None until first asked for
        self._last_offsets: list[int] = []  # each entry's last offset, for bisecting

    def entries(self) -> list[AbortedTxn]:
        return list(self._loaded())

    def append(self, entry: AbortedTxn) -> None:
        entries = self._loaded()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"the last offset of an aborted transaction must increase: {entry.last_offset} "
                             f"is not above {entries[-1].last_offset} in {self.path}")
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self.fd, _ENTRY.pack(ENTRY_VERSION, *entry))
        entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), as Kafka's
        collectAbortedTxns: last offset >= fetch_offset and first offset < upper_bound_offset. The
        search is complete once an entry's last stable offset reaches the upper bound: a transaction
        aborted later began at or after it."""
        entries = self._loaded()
        # An entry ending before fetch_offset neither matches nor completes the search (its last
        # stable offset is at most its last offset + 1), so the scan may start past those.
        start = bisect.bisect_left(self._last_offsets, fetch_offset) if upper_bound_offset > fetch_offset else 0
        found = []
        for entry in entries[start:]:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose last offset is >= offset (their markers are gone)."""
        entries = self._loaded()
        keep = bisect.bisect_left(self._last_offsets, offset)
        if keep < len(entries):
            os.truncate(self.path, keep * ENTRY_SIZE)
            del entries[keep:], self._last_offsets[keep:]

    def flush(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._entries, self._last_offsets = [], []

    def rename_to(self, path: Path) -> None:
        """Move the file (if there is one yet) to path, as Kafka's renameTo; the index follows it."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def _loaded(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            torn = len(data) % ENTRY_SIZE
            if torn:
                os.truncate(self.path, len(data) - torn)
            self._entries = decode_entries(data, self.path)
            self._last_offsets = [entry.last_offset for entry in self._entries]
        return self._entries
