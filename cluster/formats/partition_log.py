"""A partition log: a partition directory laid out exactly as Kafka lays it out.

The directory `<topic>-<partition>` holds the log's segments (see `segment`), its
`leader-epoch-checkpoint` (see `leader_epochs`), `partition.metadata` (the topic id) and the
producer-state `.snapshot` files (see `producer_snapshot`: the node writes them through the
`on_roll` and `on_close` hooks; the log deletes them as Kafka does when it truncates or deletes
segments). Only batch headers are ever parsed on the append and read paths.

A brand-new log skips every lookup of files that cannot be there yet: creating thousands of
partitions at once is mostly file creation.
"""
from __future__ import annotations

import bisect
import os
import shutil
import struct
import uuid
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterator

from cluster.formats import records
from cluster.formats.cleaned_segments import recover_interrupted_cleaning
from cluster.formats.files import created_directory, write_atomically
from cluster.formats.leader_epochs import LeaderEpochCache
from cluster.formats.partition_dirs import DELETED_DIR_SUFFIX
from cluster.formats.producer_snapshot import delete_all_snapshots, delete_snapshots_above, delete_snapshots_below
from cluster.formats.records import (
    ATTR_TIMESTAMP_TYPE, BatchHeader, CorruptRecordError, iter_batch_headers, read_header, set_base_offset,
    set_partition_leader_epoch, validate_batches,
)
from cluster.formats.segment import FileRegion, Segment, SegmentWalker, wall_clock_ms
from cluster.formats.topic_ids import topic_id_from_kafka_string, topic_id_to_kafka_string
from cluster.formats.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
READ_AHEAD_BYTES = 64 * 1024
# Writes up to this size are kept for the next read (PartitionLog._tail): one per partition.
TAIL_BYTES = 16 * 1024
# Offsets in a segment's index are int32 relative to its base offset.
MAX_RELATIVE_OFFSET = (1 << 31) - 1
# What PartitionLog.batch_headers reads at a time: large reads, but a bounded amount in memory.
BATCHES_CHUNK_BYTES = 8 << 20


class OffsetOutOfRangeError(Exception):
    """The requested offset is outside [log start, log end]."""


@dataclass
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"

    _NAMES = {
        "segment.bytes": "segment_bytes",
        "segment.ms": "segment_ms",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "index.interval.bytes": "index_interval_bytes",
        "message.timestamp.type": "message_timestamp_type",
        "cleanup.policy": "cleanup_policy",
    }

    @classmethod
    def from_topic_configs(cls, configs: dict[str, str]) -> "LogConfig":
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for kafka_name, attribute in cls._NAMES.items():
            if configs.get(kafka_name) not in (None, ""):
                raw = configs[kafka_name]
                values[attribute] = int(raw) if types[attribute] in (int, "int") else raw
        return cls(**values)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass(slots=True)
class ReadResult:
    records: bytes | memoryview | FileRegion
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class PartitionLog:
    def __init__(self, directory, *, topic_id: uuid.UUID | None = None, config: LogConfig | None = None):
        self.directory = Path(directory)
        self.config = config or LogConfig()
        self.segments: list[Segment] = []
        if created_directory(self.directory):
            self.topic_id = topic_id
            if topic_id is not None:
                self._write_topic_id(topic_id)
            self.leader_epochs = LeaderEpochCache(self.directory, [])
            self.segments = [self._new_segment(0, in_new_directory=True)]
        else:
            self.topic_id = self._load_or_write_topic_id(topic_id)
            self.leader_epochs = LeaderEpochCache.load(self.directory)
            self._load_segments()
        self.log_start_offset = self.segments[0].base_offset
        self.high_watermark = self.log_end_offset
        # The latest small write, (first offset, next offset, bytes), while it ends the log: followers
        # and tailing consumers read what was just written, and get it without a read of the file.
        self._tail: tuple[int, int, bytes] | None = None
        # A single copy is committed once written; a replicated partition's leader sets the
        # high watermark from its in-sync followers instead.
        self.auto_high_watermark = True
        # Set by the node, which writes a producer snapshot at each (as Kafka takes one at each roll
        # and at close): the new active segment's base offset after a roll; the log end offset at close.
        self.on_roll: Callable[[int], None] | None = None
        self.on_close: Callable[[int], None] | None = None

    # --- opening and recovery ---

    def _load_or_write_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        path = self.directory / "partition.metadata"
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return topic_id_from_kafka_string(value.strip())
        if topic_id is not None:
            self._write_topic_id(topic_id)
        return topic_id

    def _write_topic_id(self, topic_id: uuid.UUID) -> None:
        write_atomically(self.directory / "partition.metadata",
                         f"version: 0\ntopic_id: {topic_id_to_kafka_string(topic_id)}\n")

    def _load_segments(self) -> None:
        recover_interrupted_cleaning(self.directory)
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        if not bases:
            self.segments = [self._new_segment(0)]
            return
        for i, base in enumerate(bases):
            segment = Segment(self.directory, base)
            segment.open()
            segment.size = os.fstat(segment.fd).st_size
            is_active = i == len(bases) - 1
            if is_active or not segment.load_indexes(bases[i + 1]):
                segment.rebuild_indexes(self.config.index_interval_bytes, validate=is_active)
            self.segments.append(segment)

    def _new_segment(self, base_offset: int, in_new_directory: bool = False) -> Segment:
        """An empty segment at base_offset: its `.log` only, its indexes come with their first entry."""
        segment = Segment(self.directory, base_offset)
        segment.open()
        if not in_new_directory:  # files a crash or an earlier segment of that base left
            os.ftruncate(segment.fd, 0)
            for suffix in (".index", ".timeindex", TXN_INDEX_SUFFIX):
                segment.path(suffix).unlink(missing_ok=True)
        return segment

    # --- state ---

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset  # (asked dozens of times per replicated write: one property, not two)

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """(leader epoch, start offset) of each epoch the log holds, ascending."""
        return self.leader_epochs.entries

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epochs.latest_epoch

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- appends ---

    def append(self, data, *, leader_epoch: int, now_ms: int | None = None, batches=None) -> AppendInfo:
        """Leader append: validate (unless the caller passes validate_batches' result), assign
        offsets in place, write once, index."""
        found = validate_batches(data) if batches is None else batches
        buffer = bytearray(data)
        append_time = -1
        if self.config.log_append_time:
            append_time = now_ms if now_ms is not None else wall_clock_ms()
        first = offset = self.log_end_offset
        for position, header in found:
            set_base_offset(buffer, position, offset)
            set_partition_leader_epoch(buffer, position, leader_epoch)
            if append_time >= 0:
                _stamp_log_append_time(buffer, position, header, append_time)
            offset += header.last_offset_delta + 1
        if self.latest_epoch is None or leader_epoch > self.latest_epoch:
            self.assign_epoch(leader_epoch, first)
        self._write(buffer, [(position, read_header(buffer, position)) for position, _ in found])
        if self.auto_high_watermark:
            self.high_watermark = self.log_end_offset
        return AppendInfo(first, offset - 1, append_time, self.log_start_offset)

    def append_as_follower(self, data, batches: list[tuple[int, BatchHeader]] | None = None) -> int:
        """Append batches that already carry their offsets (metadata log copies, replication).
        `batches`: validate_batches(data, replicated=True), when the caller has it already."""
        found = validate_batches(data, replicated=True) if batches is None else batches
        next_offset = self.log_end_offset
        for _, header in found:
            if header.base_offset < next_offset:
                raise CorruptRecordError(f"batch at offset {header.base_offset} is below offset {next_offset}")
            next_offset = header.next_offset
        for _, header in found:
            if self.latest_epoch is None or header.partition_leader_epoch > self.latest_epoch:
                self.assign_epoch(header.partition_leader_epoch, header.base_offset)
        self._write(data, found)
        if self.auto_high_watermark:
            self.high_watermark = self.log_end_offset
        return self.log_end_offset

    def _write(self, data, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write whole batches; `batches`: each one's position in data and its header, as written."""
        self._maybe_roll(data, batches)
        segment = self.segments[-1]
        start = segment.size
        os.pwrite(segment.fd, data, start)
        interval = self.config.index_interval_bytes
        if len(batches) == 1:  # (nearly every write: no buffers to gather entries in)
            position, header = batches[0]
            index_entry, time_entry = segment.track_batch(start + position, header, interval)
        else:
            entries = [segment.track_batch(start + position, header, interval) for position, header in batches]
            index_entry = b"".join(entry for entry, _ in entries)
            time_entry = b"".join(entry for _, entry in entries)
        segment.append_index_bytes(".index", index_entry)
        segment.append_index_bytes(".timeindex", time_entry)
        # A copy: a follower's data is a view of a whole Fetch answer, which it would keep alive. A
        # larger write drops the tail: after a truncation it could end where the old tail ended.
        self._tail = (batches[0][1].base_offset, segment.next_offset, bytes(data)) if len(data) <= TAIL_BYTES else None

    def _maybe_roll(self, data, batches: list[tuple[int, BatchHeader]]) -> None:
        segment = self.segments[-1]
        if segment.size == 0:
            return
        config = self.config
        if (segment.size + len(data) > config.segment_bytes
                or batches[-1][1].last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
                or self._waited_for_roll(segment, batches) > config.segment_ms):
            self.roll()

    @staticmethod
    def _waited_for_roll(segment: Segment, batches: list[tuple[int, BatchHeader]]) -> int:
        incoming_max_timestamp = (batches[0][1].max_timestamp if len(batches) == 1
                                  else max(header.max_timestamp for _, header in batches))
        return segment.ms_waited_for_roll(wall_clock_ms(), incoming_max_timestamp)

    def roll(self) -> None:
        if self.active.size == 0:
            return
        self.flush()
        self.active.seal_time_index()
        self.active.ensure_index_files()
        self.segments.append(self._new_segment(self.log_end_offset))
        if self.on_roll is not None:
            self.on_roll(self.active.base_offset)

    # --- aborted transactions ---

    def add_aborted_transaction(self, entry: AbortedTxn) -> None:
        """Index a transaction whose ABORT marker was just written (in the active segment, as Kafka's
        LogSegment.updateTxnIndex); ValueError unless its last offset is above the previous entry's."""
        self.active.txn_index.append(entry)

    def index_aborted_transactions(self, entries: list[AbortedTxn]) -> None:
        """Aborted transactions found by replaying the log, oldest first, each indexed in the segment
        holding its marker unless it is there already: a crash can leave the latest out, and Kafka
        rebuilds them as it recovers the segment."""
        for entry in entries:
            index = self.segments[self._segment_index_for(entry.last_offset)].txn_index
            known = index.entries()
            if not known or known[-1].last_offset < entry.last_offset:
                index.append(entry)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), oldest marker first,
        as Kafka's collectAbortedTransactions: from the segment holding fetch_offset (an entry sits in
        the segment of its marker, so none before it ends at or after fetch_offset) until a segment's
        index shows that no later one can hold more."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_index_for(fetch_offset):]:
            result = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += result.aborted_transactions
            if result.is_complete:
                break
        return found

    # --- reads ---

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             region_from: int | None = None) -> ReadResult:
        """Whole batches from the one holding offset, below the high watermark (or max_offset),
        at least one batch and otherwise within max_bytes. With region_from, a read of at least
        that many bytes comes back as a FileRegion of one segment, left on disk for sendfile."""
        log_end_offset = self.segments[-1].next_offset
        if offset < self.log_start_offset or offset > log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {log_end_offset}]")
        limit = self.high_watermark if max_offset is None else max_offset
        tail = self._tail
        if (tail is not None and tail[0] == offset and tail[1] <= limit and tail[1] == log_end_offset
                and len(tail[2]) <= max_bytes):
            # Just written, and read at once: a follower's or a tailing consumer's next fetch.
            return ReadResult(memoryview(tail[2]), self.high_watermark, self.log_start_offset, log_end_offset)
        if offset >= limit:  # nothing to read: a follower or consumer at the end, as every parked fetch is
            return ReadResult(b"", self.high_watermark, self.log_start_offset, log_end_offset)
        chunks: list[bytes] = []
        total = 0
        if offset < limit:
            for segment in self.segments[self._segment_index_for(offset):]:
                data, stopped = self._read_segment(segment, offset, limit, max_bytes - total, need_one=not chunks,
                                                   region_from=None if chunks else region_from)
                if isinstance(data, FileRegion):
                    # One segment's bytes, as Kafka reads: the next segment is the next fetch's.
                    return ReadResult(data, self.high_watermark, self.log_start_offset, self.log_end_offset)
                if data:
                    chunks.append(data)
                    total += len(data)
                if stopped:
                    break
        # One segment's read is handed on as read (a view of its window), not copied.
        records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return ReadResult(records, self.high_watermark, self.log_start_offset, self.log_end_offset)

    def batch_headers(self, start: int | None = None,
                      chunk_bytes: int = BATCHES_CHUNK_BYTES) -> Iterator[tuple[bytes, int, BatchHeader]]:
        """(data, position, header) of every whole batch from the log start (or the batch holding
        `start`) to the log end, oldest first: the batch is data[position:position + header.size],
        in bytes read chunk_bytes at a time. For state rebuilt from a log when it is opened or taken
        over (producer sequences, a group coordinator's groups), which needs the whole log, not only
        what is below the high watermark; most of it needs the headers alone, so no batch is cut out
        of its chunk here."""
        offset = self.log_start_offset if start is None else max(start, self.log_start_offset)
        while offset < self.log_end_offset:
            data = self.read(offset, chunk_bytes, max_offset=self.log_end_offset).records
            if not data:
                return
            for position, header in iter_batch_headers(data):
                offset = header.next_offset
                yield data, position, header

    def _segment_index_for(self, offset: int) -> int:
        bases = [segment.base_offset for segment in self.segments]
        return max(bisect.bisect_right(bases, offset) - 1, 0)

    def _read_segment(self, segment: Segment, offset: int, limit: int, budget: int, need_one: bool,
                      region_from: int | None) -> tuple[bytes | FileRegion, bool]:
        """Whole batches of one segment from the one holding offset, within budget and below
        limit; also whether the read must stop here (a later segment would leave a gap)."""
        may_leave_on_disk = region_from is not None and budget >= region_from
        # Read ahead by the budget only when the bytes read are the answer: a region's walk
        # reads headers alone (a fresh 64 MB buffer costs more than the send itself).
        walker = SegmentWalker(segment, READ_AHEAD_BYTES if may_leave_on_disk else max(budget, 0) + READ_AHEAD_BYTES)
        start = end = -1
        stopped = False
        for position, header in walker.headers(segment.position_for(offset)):
            if header.base_offset >= limit:
                stopped = True
                break
            if header.last_offset < offset:
                continue
            if start < 0:
                start = position
            first_of_response = need_one and position == start
            if position + header.size - start > budget and not first_of_response:
                stopped = True
                break
            end = position + header.size
        if may_leave_on_disk and end - start >= region_from > 0 and start >= 0:
            try:
                return FileRegion(segment.fd, start, end - start), stopped
            except OSError:  # (out of descriptors: the bytes are read instead)
                pass
        return _slice(walker, start, end), stopped

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= timestamp, below the
        high watermark."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            walker = SegmentWalker(segment, READ_AHEAD_BYTES)
            for position, header in walker.headers(segment.position_after_timestamps_below(timestamp)):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp >= timestamp:
                    return _first_record_at_or_after(walker, position, header, timestamp)
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of its record) for ListOffsets MAX_TIMESTAMP; (-1, -1) when empty."""
        best = max(self.segments, key=lambda segment: segment.max_timestamp)
        if best.max_timestamp < 0:
            return -1, -1
        walker = SegmentWalker(best, READ_AHEAD_BYTES)
        for position, header in walker.headers(best.position_for(best.max_timestamp_offset)):
            if header.last_offset >= best.max_timestamp_offset:
                found = _first_record_at_or_after(walker, position, header, best.max_timestamp)
                return best.max_timestamp, found[0]
        return best.max_timestamp, best.max_timestamp_offset

    # --- truncation and retention ---

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= offset, as Kafka's LogSegment.truncateTo."""
        if offset >= self.log_end_offset:
            # Nothing to cut, but an epoch this node began as leader without writing anything in
            # it must go, or followers keep naming it (Kafka's UnifiedLog.truncateTo does the same).
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self.segments.pop().delete_files()
        segment = self.active
        # Every batch before where the walk starts ends below offset, and stays.
        end = segment.position_for(offset)
        for position, header in SegmentWalker(segment, READ_AHEAD_BYTES).headers(end):
            if header.last_offset >= offset:
                break
            end = position + header.size
        os.ftruncate(segment.fd, end)
        segment.rebuild_indexes(self.config.index_interval_bytes, validate=False)
        segment.txn_index.truncate_to(offset)  # (earlier segments' entries all end below its base)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        delete_snapshots_above(self.directory, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and continue as an empty log whose next offset is `offset`. Every producer
        snapshot goes too, as Kafka's ProducerStateManager.truncateFullyAndStartAt deletes them: the
        producers they hold wrote a history this log no longer has."""
        for segment in self.segments:
            segment.delete_files()
        delete_all_snapshots(self.directory)
        self.segments = [self._new_segment(offset)]
        self.log_start_offset = self.high_watermark = offset
        self.leader_epochs.truncate_from_end(0)

    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to `offset`, never past the high watermark, and delete the
        segments wholly below it (DeleteRecords, a follower learning its leader's start, a start
        checkpointed before a restart). True if it moved."""
        offset = min(offset, self.high_watermark)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        first_base = self.segments[0].base_offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete_files()
        if self.segments[0].base_offset != first_base:
            self._delete_snapshots_of_deleted_segments()
        self.leader_epochs.truncate_from_start(offset)
        return True

    def enforce_retention(self, now_ms: int | None = None) -> int:
        now = wall_clock_ms() if now_ms is None else now_ms
        deleted = 0
        while len(self.segments) > 1 and self._expired(self.segments[0], now):
            self.segments.pop(0).delete_files()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self.leader_epochs.truncate_from_start(self.log_start_offset)
            self._delete_snapshots_of_deleted_segments()
        return deleted

    def _delete_snapshots_of_deleted_segments(self) -> None:
        """Kafka keeps a producer snapshot only while it keeps the segment it was taken at; the latest
        snapshot stays whatever its offset, as the one a reload of producer state starts from."""
        delete_snapshots_below(self.directory, self.segments[0].base_offset, keep_latest=True)

    def _expired(self, segment: Segment, now: int) -> bool:
        if "delete" not in self.config.cleanup_policy or segment.next_offset > self.high_watermark:
            return False
        if self.config.retention_ms >= 0 and segment.max_timestamp >= 0 \
                and now - segment.max_timestamp > self.config.retention_ms:
            return True
        return 0 <= self.config.retention_bytes <= self.size_bytes() - segment.size

    # --- leader epochs ---

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.leader_epochs.assign(epoch, start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's OffsetsForLeaderEpoch answers it: see LeaderEpochCache.end_offset_for."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # --- lifecycle ---

    def flush(self) -> None:
        os.fsync(self.active.fd)
        self.active.txn_index.flush()

    def close(self) -> None:
        if self.on_close is not None and self.active.fd >= 0:  # (closing twice calls it once)
            self.on_close(self.log_end_offset)
        for segment in self.segments:
            if segment.fd >= 0:  # (closing twice creates nothing)
                segment.ensure_index_files()
            segment.close()

    def delete(self) -> None:
        """As Kafka deletes a log: renamed to `<topic>-<partition>.<id>-delete` first, so that a crash
        halfway leaves a directory nobody mistakes for the partition (swept at the next start)."""
        for segment in self.segments:
            segment.close()
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
        try:
            self.directory.rename(doomed)
        except OSError:
            doomed = self.directory
        shutil.rmtree(doomed, ignore_errors=True)


def _slice(walker: SegmentWalker, start: int, end: int) -> memoryview | bytes:
    return walker.read(start, end) if end > start >= 0 else b""


def _first_record_at_or_after(walker: SegmentWalker, position: int, header, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the batch's first record at or after timestamp. A compressed
    batch is answered by its base offset and max timestamp, as Kafka does without
    decompressing; in a LogAppendTime batch every record carries the batch's timestamp."""
    if header.compression or header.uses_log_append_time:
        return header.base_offset, header.max_timestamp
    batch = walker.read(position, position + header.size)
    for record in records.iter_records(batch):
        if record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return header.base_offset, header.max_timestamp


def _stamp_log_append_time(buffer: bytearray, position: int, header, append_time: int) -> None:
    attributes = header.attributes | ATTR_TIMESTAMP_TYPE
    _ATTRIBUTES.pack_into(buffer, position + 21, attributes)
    _MAX_TIMESTAMP.pack_into(buffer, position + 35, append_time)
    end = position + header.size
    _CRC.pack_into(buffer, position + 17, records.compute_crc(memoryview(buffer)[position:end]))
