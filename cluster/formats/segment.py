"""One segment of a partition log, laid out on disk exactly as Kafka lays it out.

A segment is named by its 20-digit base offset: `.log` (record batches back to back), a sparse
`.index` (4-byte offset relative to the segment base, 4-byte position; the offset is the last
offset of the indexed batch, as Kafka writes it, once more than `index.interval.bytes` of log
lie since the previous entry) and a `.timeindex` (8-byte max timestamp so far, 4-byte relative
offset). Only batch headers are ever parsed.

Index files are created lazily, as Kafka's LazyIndex does: a new segment has only its `.log`
until its first index entry is written, and a missing index reads as empty. A segment that
stops being active, and every segment on close, gets both files, so that a log dir left by a
clean stop holds everything Kafka's loader expects. The `.txnindex` (see `transaction_index`) is
lazier still: it exists only once the segment holds an aborted transaction's marker, as on Kafka.
"""
from __future__ import annotations

import bisect
import os
import struct
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from cluster.formats.records import CorruptRecordError, HEADER_SIZE, iter_batch_headers, read_header, validate_batch
from cluster.formats.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class FileRegion:
    """Bytes of a segment file left on disk, to be sent with sendfile(2) rather than read.

    It holds its own descriptor (a dup), so the bytes stay readable when the segment is
    closed or deleted before the send, as a read's bytes would; the descriptor closes with
    the region. A truncation before the send leaves fewer bytes than `count`: the sender
    must notice (Kafka closes the connection then, and so do we).
    """

    __slots__ = ("fd", "offset", "count", "_closer", "__weakref__")

    def __init__(self, fd: int, offset: int, count: int):
        self.fd = os.dup(fd)
        self.offset = offset
        self.count = count
        self._closer = weakref.finalize(self, os.close, self.fd)

    def __len__(self) -> int:
        return self.count

    def read(self) -> bytes:
        return os.pread(self.fd, self.count, self.offset)

    def close(self) -> None:
        self._closer()
        self.fd = -1  # (the number may soon name another file)


@dataclass
class Segment:
    """One `.log` file and its sparse indexes, kept in memory for bisecting."""

    directory: Path
    base_offset: int
    size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1
    max_timestamp_offset: int = -1
    created_ms: int = field(default_factory=wall_clock_ms)
    # Kafka times segment.ms from the first batch's max timestamp when the segment has one.
    first_batch_timestamp: int = -1
    index_offsets: list[int] = field(default_factory=list)  # last offset of the indexed batch, relative
    index_positions: list[int] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (max timestamp so far, relative offset)
    bytes_since_index: int = 0
    fd: int = -1
    index_fds: dict[str, int] = field(default_factory=dict)  # suffix -> O_APPEND descriptor
    # (base offset, position) of the last batch written: followers and consumers at the log end
    # read from there without walking the batches since the last index entry.
    last_batch: tuple[int, int] = (-1, -1)
    _txn_index: TransactionIndex | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.next_offset = self.next_offset or self.base_offset

    def path(self, suffix: str) -> Path:
        return self.directory / segment_file_name(self.base_offset, suffix)

    @property
    def txn_index(self) -> TransactionIndex:
        """The segment's aborted transactions; made on first use, and it reads nothing until asked."""
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self.path(TXN_INDEX_SUFFIX))
        return self._txn_index

    def open(self) -> None:
        self.fd = os.open(self.path(".log"), os.O_RDWR | os.O_CREAT, 0o644)

    def ensure_index_files(self) -> None:
        """Create whichever index file no entry has created yet (empty, as Kafka leaves them)."""
        for suffix in (".index", ".timeindex"):
            if suffix not in self.index_fds:
                self.index_fds[suffix] = os.open(self.path(suffix), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for fd in self.index_fds.values():
            os.close(fd)
        self.index_fds.clear()
        if self._txn_index is not None:
            self._txn_index.close()

    def append_index_bytes(self, suffix: str, data: bytes) -> None:
        if not data:
            return
        if suffix not in self.index_fds:
            self.index_fds[suffix] = os.open(self.path(suffix), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self.index_fds[suffix], data)

    def read_all(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def track_batch(self, position: int, header, interval: int) -> tuple[bytes, bytes]:
        """Account for a batch written at position; returns index file bytes to append."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = header.last_offset
        if self.size == 0:
            self.first_batch_timestamp = header.max_timestamp
        self.next_offset = header.next_offset
        self.size = max(self.size, position + header.size)
        self.last_batch = (header.base_offset, position)
        index_entry = time_entry = b""
        # As Kafka's LogSegment: the entry goes to the batch that follows more than an
        # interval of unindexed bytes, so the first batch is never indexed.
        if self.bytes_since_index > interval:
            relative = header.last_offset - self.base_offset
            self.index_offsets.append(relative)
            self.index_positions.append(position)
            index_entry = _INDEX_ENTRY.pack(relative, position)
            time_entry = self.maybe_add_time_entry()
            self.bytes_since_index = 0
        self.bytes_since_index += header.size
        return index_entry, time_entry

    def maybe_add_time_entry(self) -> bytes:
        if self.max_timestamp < 0 or (self.time_index and self.max_timestamp <= self.time_index[-1][0]):
            return b""
        self.time_index.append((self.max_timestamp, self.max_timestamp_offset - self.base_offset))
        return _TIME_INDEX_ENTRY.pack(*self.time_index[-1])

    def seal_time_index(self) -> None:
        """Record the final max timestamp, as Kafka does when a segment stops being active,
        so that a reopened segment knows it from its .timeindex alone."""
        self.append_index_bytes(".timeindex", self.maybe_add_time_entry())

    def ms_waited_for_roll(self, now_ms: int, incoming_max_timestamp: int) -> int:
        if self.first_batch_timestamp >= 0:
            return incoming_max_timestamp - self.first_batch_timestamp
        return now_ms - self.created_ms

    def position_for(self, offset: int) -> int:
        """Start position of a batch at or before the one holding offset."""
        last_base, last_position = self.last_batch
        if 0 <= last_base <= offset and last_position < self.size:  # (a truncation may have cut it off)
            return last_position
        i = bisect.bisect_left(self.index_offsets, offset - self.base_offset)
        return self.index_positions[i - 1] if i > 0 else 0

    def position_after_timestamps_below(self, timestamp: int) -> int:
        """A batch position before which every record is older than timestamp (time index)."""
        i = bisect.bisect_left(self.time_index, timestamp, key=lambda entry: entry[0])
        if i == 0:
            return 0
        return self.position_for(self.base_offset + self.time_index[i - 1][1] + 1)

    def index_bytes(self) -> bytes:
        return b"".join(_INDEX_ENTRY.pack(o, p) for o, p in zip(self.index_offsets, self.index_positions))

    def time_index_bytes(self) -> bytes:
        return b"".join(_TIME_INDEX_ENTRY.pack(t, o) for t, o in self.time_index)

    def rewrite_indexes(self) -> None:
        self.path(".index").write_bytes(self.index_bytes())
        self.path(".timeindex").write_bytes(self.time_index_bytes())

    def delete_files(self) -> None:
        self.close()
        # The .log first: a crash halfway leaves stray indexes, never a segment without its aborted transactions.
        for suffix in (".log", ".index", ".timeindex"):
            self.path(suffix).unlink(missing_ok=True)
        self.txn_index.delete()

    def load_indexes(self, next_base: int) -> bool:
        """Load a rolled segment's indexes; False when they are missing or fail Kafka's sanity checks."""
        index, time_index = self.path(".index"), self.path(".timeindex")
        if not index.exists() or not time_index.exists():
            return False
        raw_index, raw_time = index.read_bytes(), time_index.read_bytes()
        if len(raw_index) % _INDEX_ENTRY.size or len(raw_time) % _TIME_INDEX_ENTRY.size:
            return False
        entries = list(_INDEX_ENTRY.iter_unpack(raw_index))
        time_entries = list(_TIME_INDEX_ENTRY.iter_unpack(raw_time))
        if not _index_is_sane(entries, time_entries, self.size, next_base - self.base_offset):
            return False
        self.index_offsets = [relative for relative, _ in entries]
        self.index_positions = [position for _, position in entries]
        self.time_index = time_entries
        self.next_offset = next_base
        if time_entries:
            self.max_timestamp, relative = time_entries[-1]
            self.max_timestamp_offset = self.base_offset + relative
        return True

    def rebuild_indexes(self, index_interval_bytes: int, validate: bool) -> None:
        """Rebuild the indexes from the batches; truncate a torn or corrupt tail."""
        data = self.read_all()
        self.index_offsets, self.index_positions, self.time_index = [], [], []
        self.bytes_since_index = self.size = 0
        self.max_timestamp = self.max_timestamp_offset = self.first_batch_timestamp = -1
        self.next_offset = self.base_offset
        end = 0
        for position, header in iter_batch_headers(data):
            if validate:
                try:
                    validate_batch(data, position, position + header.size)
                except CorruptRecordError:
                    break
            self.track_batch(position, header, index_interval_bytes)
            end = position + header.size
        if end < len(data):
            os.ftruncate(self.fd, end)
        self.size = end
        self.rewrite_indexes()


class SegmentWalker:
    """Walks one segment's batch headers from a position, reading the file in windows so a
    walk costs one pread per window rather than one per batch."""

    def __init__(self, segment: Segment, window_bytes: int):
        self.fd = segment.fd
        self.size = segment.size
        self.window_bytes = max(window_bytes, HEADER_SIZE)
        self.window = memoryview(b"")
        self.window_start = 0

    def headers(self, position: int):
        while position + HEADER_SIZE <= self.size:
            if not self._holds(position, position + HEADER_SIZE):
                self.window_start = position
                self.window = memoryview(os.pread(self.fd, min(self.window_bytes, self.size - position), position))
            header = read_header(self.window, position - self.window_start)
            yield position, header
            position += header.size

    def read(self, start: int, end: int) -> memoryview | bytes:
        """The bytes from start to end; a view of the window when it holds them, not a copy."""
        if self._holds(start, end):
            return self.window[start - self.window_start:end - self.window_start]
        return os.pread(self.fd, end - start, start)

    def _holds(self, start: int, end: int) -> bool:
        return self.window_start <= start and end <= self.window_start + len(self.window)


def _index_is_sane(entries, time_entries, segment_size: int, offset_span: int) -> bool:
    """Kafka's index sanity checks: entries ascend and point inside the segment."""
    offsets = [relative for relative, _ in entries]
    positions = [position for _, position in entries]
    times = [relative for _, relative in time_entries]
    return (offsets == sorted(set(offsets)) and positions == sorted(set(positions))
            and all(0 <= o < offset_span for o in offsets) and all(0 <= p < segment_size for p in positions)
            and all(0 <= o < offset_span for o in times))
