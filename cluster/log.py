"""Partition logs laid out on disk exactly as Kafka lays them out.

A partition directory `<topic>-<partition>` holds segments named by their 20-digit base
offset: `.log` (record batches back to back), a sparse `.index` (4-byte offset relative to
the segment base, 4-byte position; the offset is the last offset of the indexed batch, as
Kafka writes it) and a `.timeindex` (8-byte max timestamp so far, 4-byte relative offset),
plus `leader-epoch-checkpoint` and `partition.metadata`. Only batch headers are ever
parsed on the append and read paths.
"""
from __future__ import annotations

import base64
import bisect
import os
import re
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path

from cluster import records
from cluster.records import (
    ATTR_TIMESTAMP_TYPE, CorruptRecordError, HEADER_SIZE, iter_batch_headers, read_header,
    set_base_offset, set_partition_leader_epoch, validate_batch, validate_batches,
)

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
READ_AHEAD_BYTES = 64 * 1024


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def topic_id_to_kafka_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_kafka_string(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    match = _PARTITION_DIR.match(name)
    if not match or "." in match.group(2):
        return None
    return match.group(1), int(match.group(2))


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


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


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int


@dataclass
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


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
    index_offsets: list[int] = field(default_factory=list)  # last offset of the indexed batch, relative
    index_positions: list[int] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (max timestamp so far, relative offset)
    bytes_since_index: int = 0
    fd: int = -1

    def __post_init__(self):
        self.next_offset = self.next_offset or self.base_offset

    def path(self, suffix: str) -> Path:
        return self.directory / segment_file_name(self.base_offset, suffix)

    def open(self) -> None:
        self.fd = os.open(self.path(".log"), os.O_RDWR | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read_all(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def track_batch(self, position: int, header, interval: int) -> tuple[bytes, bytes]:
        """Account for a batch written at position; returns index file bytes to append."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = header.last_offset
        self.next_offset = header.next_offset
        self.size = max(self.size, position + header.size)
        self.bytes_since_index += header.size
        if self.index_offsets and self.bytes_since_index < interval:
            return b"", b""
        self.bytes_since_index = 0
        relative = header.last_offset - self.base_offset
        self.index_offsets.append(relative)
        self.index_positions.append(position)
        time_entry = b""
        if not self.time_index or self.max_timestamp > self.time_index[-1][0]:
            self.time_index.append((self.max_timestamp, self.max_timestamp_offset - self.base_offset))
            time_entry = _TIME_INDEX_ENTRY.pack(*self.time_index[-1])
        return _INDEX_ENTRY.pack(relative, position), time_entry

    def position_for(self, offset: int) -> int:
        """Start position of a batch at or before the one holding offset."""
        i = bisect.bisect_left(self.index_offsets, offset - self.base_offset)
        return self.index_positions[i - 1] if i > 0 else 0

    def rewrite_indexes(self) -> None:
        self.path(".index").write_bytes(b"".join(
            _INDEX_ENTRY.pack(o, p) for o, p in zip(self.index_offsets, self.index_positions)))
        self.path(".timeindex").write_bytes(b"".join(_TIME_INDEX_ENTRY.pack(t, o) for t, o in self.time_index))

    def delete_files(self) -> None:
        self.close()
        for suffix in (".log", ".index", ".timeindex"):
            self.path(suffix).unlink(missing_ok=True)


class PartitionLog:
    def __init__(self, directory, *, topic_id: uuid.UUID | None = None, config: LogConfig | None = None):
        self.directory = Path(directory)
        self.config = config or LogConfig()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.topic_id = self._load_or_write_topic_id(topic_id)
        self.segments: list[Segment] = []
        self.epochs: list[tuple[int, int]] = self._load_epochs()
        self._load_segments()
        self.log_start_offset = self.segments[0].base_offset
        self.high_watermark = self.log_end_offset
        # A single copy is committed once written; a replicated partition's leader sets the
        # high watermark from its in-sync followers instead.
        self.auto_high_watermark = True

    # --- opening and recovery ---

    def _load_or_write_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        path = self.directory / "partition.metadata"
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return topic_id_from_kafka_string(value.strip())
        if topic_id is not None:
            _write_atomically(path, f"version: 0\ntopic_id: {topic_id_to_kafka_string(topic_id)}\n")
        return topic_id

    def _load_segments(self) -> None:
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        if not bases:
            self.segments = [self._new_segment(0)]
            return
        for i, base in enumerate(bases):
            segment = Segment(self.directory, base)
            segment.open()
            segment.size = os.fstat(segment.fd).st_size
            is_active = i == len(bases) - 1
            if is_active or not self._load_index_files(segment, bases[i + 1]):
                self._scan(segment, validate=is_active)
            self.segments.append(segment)

    def _load_index_files(self, segment: Segment, next_base: int) -> bool:
        index, time_index = segment.path(".index"), segment.path(".timeindex")
        if not index.exists() or not time_index.exists() or index.stat().st_size % _INDEX_ENTRY.size:
            return False
        for relative, position in _INDEX_ENTRY.iter_unpack(index.read_bytes()):
            segment.index_offsets.append(relative)
            segment.index_positions.append(position)
        raw_time = time_index.read_bytes()
        segment.time_index = [e for e in _TIME_INDEX_ENTRY.iter_unpack(raw_time[:len(raw_time) // 12 * 12])]
        segment.next_offset = next_base
        if segment.time_index:
            segment.max_timestamp, relative = segment.time_index[-1]
            segment.max_timestamp_offset = segment.base_offset + relative
            segment.created_ms = segment.max_timestamp
        return True

    def _scan(self, segment: Segment, validate: bool) -> None:
        """Rebuild a segment's indexes from its batches; truncate a torn or corrupt tail."""
        data = segment.read_all()
        segment.index_offsets, segment.index_positions, segment.time_index = [], [], []
        segment.bytes_since_index = 0
        segment.size = 0
        end = 0
        first_timestamp = None
        for position, header in iter_batch_headers(data):
            if validate:
                try:
                    validate_batch(data, position, position + header.size)
                except CorruptRecordError:
                    break
            segment.track_batch(position, header, self.config.index_interval_bytes)
            first_timestamp = header.max_timestamp if first_timestamp is None else first_timestamp
            end = position + header.size
        if end < len(data):
            os.ftruncate(segment.fd, end)
        segment.size = end
        if first_timestamp is not None and first_timestamp >= 0:
            segment.created_ms = min(first_timestamp, wall_clock_ms())
        segment.rewrite_indexes()

    def _new_segment(self, base_offset: int) -> Segment:
        segment = Segment(self.directory, base_offset)
        segment.open()
        os.ftruncate(segment.fd, 0)
        segment.rewrite_indexes()
        return segment

    # --- state ---

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs[-1][0] if self.epochs else None

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
        self._write(buffer)
        if self.auto_high_watermark:
            self.high_watermark = self.log_end_offset
        return AppendInfo(first, offset - 1, append_time, self.log_start_offset)

    def append_as_follower(self, data) -> int:
        """Append batches that already carry their offsets (metadata log copies, replication)."""
        found = validate_batches(data)
        if found[0][1].base_offset < self.log_end_offset:
            raise CorruptRecordError(
                f"batch at offset {found[0][1].base_offset} is below the log end offset {self.log_end_offset}")
        for _, header in found:
            if self.latest_epoch is None or header.partition_leader_epoch > self.latest_epoch:
                self.assign_epoch(header.partition_leader_epoch, header.base_offset)
        self._write(data)
        if self.auto_high_watermark:
            self.high_watermark = self.log_end_offset
        return self.log_end_offset

    def _write(self, data) -> None:
        self._maybe_roll(len(data))
        segment = self.active
        start = segment.size
        os.pwrite(segment.fd, data, start)
        index_bytes, time_bytes = bytearray(), bytearray()
        for position, header in iter_batch_headers(data):
            entry, time_entry = segment.track_batch(start + position, header, self.config.index_interval_bytes)
            index_bytes += entry
            time_bytes += time_entry
        if index_bytes:
            _append_file(segment.path(".index"), index_bytes)
        if time_bytes:
            _append_file(segment.path(".timeindex"), time_bytes)

    def _maybe_roll(self, incoming: int) -> None:
        segment = self.active
        if segment.size == 0:
            return
        too_big = segment.size + incoming > self.config.segment_bytes
        too_old = wall_clock_ms() - segment.created_ms >= self.config.segment_ms
        if too_big or too_old:
            self.roll()

    def roll(self) -> None:
        if self.active.size == 0:
            return
        self.flush()
        self.segments.append(self._new_segment(self.log_end_offset))

    # --- reads ---

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.high_watermark if max_offset is None else max_offset
        chunks: list[bytes] = []
        total = 0
        if offset < limit:
            i = max(bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1, 0)
            for segment in self.segments[i:]:
                total += self._read_segment(segment, offset, limit, max_bytes - total, not chunks, chunks)
                if total >= max_bytes or (chunks and segment.next_offset >= limit):
                    break
        return ReadResult(b"".join(chunks), self.high_watermark, self.log_start_offset, self.log_end_offset)

    def _read_segment(self, segment: Segment, offset: int, limit: int, budget: int, need_one: bool,
                      chunks: list[bytes]) -> int:
        """Append whole batches of one segment holding offsets >= offset; returns bytes added.

        One read covers the sparse-index position up to the byte budget; batch headers are
        walked in that buffer, and only a first batch larger than the buffer is read again.
        """
        position = segment.position_for(offset)
        window = os.pread(segment.fd, min(segment.size - position, max(budget, 0) + READ_AHEAD_BYTES), position)
        view = memoryview(window)
        cursor, start, end = 0, -1, -1
        while cursor + HEADER_SIZE <= len(view):
            header = read_header(view, cursor)
            if header.base_offset >= limit:
                break
            if header.last_offset >= offset:
                if start < 0:
                    if header.size > budget and not need_one:
                        break
                    start = cursor
                elif cursor + header.size - start > budget:
                    break
                end = cursor + header.size
                if end >= len(view):
                    break
            cursor += header.size
        if start < 0:
            return 0
        if end <= len(view):
            data = bytes(view[start:end])
        else:  # a single batch larger than the window
            data = os.pread(segment.fd, end - start, position + start)
        chunks.append(data)
        return len(data)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            for position, header in self._iter_segment_headers(segment):
                if header.max_timestamp < timestamp or header.base_offset >= self.high_watermark:
                    continue
                if header.compression:
                    return header.base_offset, header.max_timestamp
                batch = os.pread(segment.fd, header.size, position)
                for record in records.iter_records(batch):
                    if record.timestamp >= timestamp:
                        return record.offset, record.timestamp
        return None

    def _iter_segment_headers(self, segment: Segment):
        position = 0
        while position + HEADER_SIZE <= segment.size:
            header = read_header(os.pread(segment.fd, HEADER_SIZE, position))
            yield position, header
            position += header.size

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        best = (-1, -1)
        for segment in self.segments:
            if segment.max_timestamp > best[0]:
                best = (segment.max_timestamp, segment.max_timestamp_offset)
        return best

    # --- truncation and retention ---

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self.segments.pop().delete_files()
        segment = self.active
        end = 0
        for position, header in self._iter_segment_headers(segment):
            if header.base_offset >= offset:
                break
            end = position + header.size
        os.ftruncate(segment.fd, end)
        segment.size = end
        segment.next_offset = segment.base_offset
        self._scan(segment, validate=False)
        if segment.size == 0:
            segment.next_offset = max(offset, segment.base_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.epochs = [(e, s) for e, s in self.epochs if s < offset]
        self._save_epochs()

    def enforce_retention(self, now_ms: int | None = None) -> int:
        now = wall_clock_ms() if now_ms is None else now_ms
        deleted = 0
        while len(self.segments) > 1 and self._expired(self.segments[0], now):
            self.segments.pop(0).delete_files()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        return deleted

    def _expired(self, segment: Segment, now: int) -> bool:
        if "delete" not in self.config.cleanup_policy:
            return False
        if self.config.retention_ms >= 0 and segment.max_timestamp >= 0 \
                and now - segment.max_timestamp > self.config.retention_ms:
            return True
        return 0 <= self.config.retention_bytes <= self.size_bytes() - segment.size

    # --- leader epochs ---

    def _load_epochs(self) -> list[tuple[int, int]]:
        path = self.directory / "leader-epoch-checkpoint"
        if not path.exists():
            return []
        lines = path.read_text().split("\n")
        count = int(lines[1]) if len(lines) > 1 and lines[1].strip() else 0
        return [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]]

    def _save_epochs(self) -> None:
        body = "".join(f"{epoch} {start}\n" for epoch, start in self.epochs)
        _write_atomically(self.directory / "leader-epoch-checkpoint", f"0\n{len(self.epochs)}\n{body}")

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        if self.epochs and self.epochs[-1][0] >= epoch:
            return
        self.epochs = [(e, s) for e, s in self.epochs if s < start_offset]
        self.epochs.append((epoch, start_offset))
        self._save_epochs()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """As OffsetForLeaderEpoch answers: the largest epoch <= epoch and where it ends."""
        for i in range(len(self.epochs) - 1, -1, -1):
            found, _ = self.epochs[i]
            if found <= epoch:
                end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.log_end_offset
                return found, end
        return -1, -1

    # --- lifecycle ---

    def flush(self) -> None:
        os.fsync(self.active.fd)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _stamp_log_append_time(buffer: bytearray, position: int, header, append_time: int) -> None:
    attributes = header.attributes | ATTR_TIMESTAMP_TYPE
    _ATTRIBUTES.pack_into(buffer, position + 21, attributes)
    _MAX_TIMESTAMP.pack_into(buffer, position + 35, append_time)
    end = position + header.size
    _CRC.pack_into(buffer, position + 17, records.compute_crc(memoryview(buffer)[position:end]))


def _append_file(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _write_atomically(path: Path, text: str) -> None:
    temp = path.with_suffix(path.suffix + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)
