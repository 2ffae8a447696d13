"""Kafka magic-2 record batches: header access, validation and (for small writers) encoding.

The produce and fetch paths only ever look at the 61-byte batch header; records inside a
batch are decoded only by the metadata log reader and by tools. Offsets in the header are
outside the CRC, so a leader assigns offsets by overwriting the first 8 bytes in place.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import crc32c

from cluster.formats.compression import compress
from cluster.formats.varints import (  # noqa: F401 (part of this module's interface)
    CorruptRecordError, read_uvarint, read_varint, write_compact_string, write_uvarint, write_varint,
)

HEADER_SIZE = 61
# baseOffset + batchLength: the part of the header before the length-counted bytes
LOG_OVERHEAD = 12
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")

ATTR_COMPRESSION_MASK = 0x07
COMPRESSION_ZSTD = 4
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = CRC_START  # the CRC covers the batch from its attributes on
MIN_DECLARED_LENGTH = 14  # the smallest batch of any magic (a v0 message) declares this many bytes
_ATTRIBUTES = struct.Struct(">h")
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
# KIP-534: the batch's base timestamp is its delete horizon, when the cleaner may drop its
# tombstones or its transaction marker (record timestamps stay base timestamp + delta).
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class UnsupportedMagicError(CorruptRecordError):
    """Magic 0/1 message sets; Kafka 4 rejects them with UNSUPPORTED_VERSION-like errors."""


class BatchHeader(NamedTuple):
    """A batch's 61-byte header as read. A named tuple, built from struct's unpack in one step: a
    frozen dataclass sets its 13 fields one by one, which costs several times as much per header."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the log cleaner may remove this batch's tombstones or marker (KIP-534); None if unset."""
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None

    @property
    def uses_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)


def read_header(buf, pos: int = 0) -> BatchHeader:
    return _new_header(_HEADER.unpack_from(buf, pos))


_new_header = BatchHeader._make


def peek_offset_and_length(buf, pos: int = 0) -> tuple[int, int]:
    """(base offset, batch length) from the first 12 bytes, enough to walk a log."""
    return _OFFSET_AND_LENGTH.unpack_from(buf, pos)


def iter_batch_headers(buf, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in buf[start:end]; stops at a partial one."""
    end = len(buf) if end is None else end
    pos = start
    while pos + HEADER_SIZE <= end:
        header = read_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def leading_batches(data, limit: int = 2) -> list[tuple[int, int]]:
    """(size, magic) of the first `limit` whole batches of a produce payload, walked as Kafka's
    ByteBufferLogInputStream walks one: a partial batch ends the walk; a batch claiming fewer bytes
    than any batch has, or a magic above 2, is corrupt."""
    view = memoryview(data)
    found: list[tuple[int, int]] = []
    pos = 0
    while len(found) < limit and len(view) - pos >= LOG_OVERHEAD:
        _, length = peek_offset_and_length(view, pos)
        if length < MIN_DECLARED_LENGTH:
            raise CorruptRecordError(f"record batch length {length} is below the minimum {MIN_DECLARED_LENGTH}")
        if len(view) - pos <= MAGIC_OFFSET:
            break
        magic = view[pos + MAGIC_OFFSET]
        if magic > 2:
            raise CorruptRecordError(f"invalid magic {magic}")
        if len(view) - pos < LOG_OVERHEAD + length:
            break
        found.append((LOG_OVERHEAD + length, magic))
        pos += LOG_OVERHEAD + length
    return found


def compression_of(batch, pos: int = 0) -> int:
    return _ATTRIBUTES.unpack_from(batch, pos + ATTRIBUTES_OFFSET)[0] & ATTR_COMPRESSION_MASK


def compute_crc(batch) -> int:
    view = memoryview(batch)
    return crc32c.crc32c(view[CRC_START:])


def validate_batch(batch, pos: int = 0, end: int | None = None, replicated: bool = False) -> BatchHeader:
    """Validate one batch starting at pos whose extent must end exactly at end (or buffer end).
    A `replicated` batch (a leader's, a log's) may have lost records to compaction: gaps between
    its offsets, or no records at all (a producer's last batch kept empty)."""
    view = memoryview(batch)
    end = len(view) if end is None else end
    if end - pos < HEADER_SIZE:
        raise CorruptRecordError("record batch shorter than its header")
    header = read_header(view, pos)
    if header.magic != 2:
        raise UnsupportedMagicError(f"unsupported magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
        raise CorruptRecordError("record batch length does not match the bytes sent")
    if crc32c.crc32c(view[pos + CRC_START:pos + header.size]) != header.crc:
        raise CorruptRecordError("record batch CRC mismatch")
    if replicated:
        if header.record_count < 0 or header.last_offset_delta < max(header.record_count - 1, 0):
            raise CorruptRecordError("record count and last offset delta disagree")
        return header
    if header.record_count <= 0 or header.last_offset_delta < 0:
        raise CorruptRecordError("record batch declares no records")
    if not header.compression and header.last_offset_delta != header.record_count - 1:
        raise CorruptRecordError("record count and last offset delta disagree")
    return header


def validate_batches(data, replicated: bool = False) -> list[tuple[int, BatchHeader]]:
    """Validate a produce payload (or, `replicated`, a leader's batches): one or more whole
    batches filling data exactly."""
    view = memoryview(data)
    found = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD:
            raise CorruptRecordError("trailing bytes after the last record batch")
        _, length = peek_offset_and_length(view, pos)
        header = validate_batch(view, pos, min(len(view), pos + LOG_OVERHEAD + max(length, 0)), replicated)
        found.append((pos, header))
        pos += header.size
    if not found:
        raise CorruptRecordError("empty record set")
    return found


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


# --- record encoding, for the metadata log writer and tools (not the hot path) ---

@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(buf[pos:pos + length]), pos + length


def iter_records(batch, pos: int = 0) -> Iterator[Record]:
    """Decode the records of one uncompressed batch (metadata log, tools)."""
    view = memoryview(batch)
    header = read_header(view, pos)
    if header.compression:
        raise CorruptRecordError("iter_records reads uncompressed batches only")
    yield from decode_records(header, view[pos + HEADER_SIZE:pos + header.size])


def decode_records(header: BatchHeader, body) -> Iterator[Record]:
    """The records of a batch's records section, once uncompressed; timestamps as written
    (a LogAppendTime batch's records take its max timestamp instead)."""
    view = memoryview(body)
    cursor = 0
    for _ in range(header.record_count):
        length, cursor = read_varint(view, cursor)
        record_end = cursor + length
        if record_end > len(view):
            raise CorruptRecordError("record runs past the end of its batch")
        cursor += 1  # attributes, unused
        ts_delta, cursor = read_varint(view, cursor)
        off_delta, cursor = read_varint(view, cursor)
        key, cursor = _read_bytes(view, cursor)
        value, cursor = _read_bytes(view, cursor)
        header_count, cursor = read_varint(view, cursor)
        headers = []
        for _ in range(header_count):
            hkey, cursor = _read_bytes(view, cursor)
            hvalue, cursor = _read_bytes(view, cursor)
            headers.append(((hkey or b"").decode(), hvalue))
        yield Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, headers)
        cursor = record_end


def _write_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        write_varint(-1, out)
    else:
        write_varint(len(value), out)
        out += value


def encode_batch(
    values: list[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp: int,
    leader_epoch: int = 0,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    headers: list[tuple[str, bytes]] | None = None,
) -> bytes:
    """Build one uncompressed batch of (key, value) records sharing a timestamp."""
    return encode_records(
        [(timestamp, key, value, headers or ()) for key, value in values], base_offset=base_offset,
        leader_epoch=leader_epoch, attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def encode_records(
    records: list[tuple[int, bytes | None, bytes | None, tuple | list]],
    *,
    compression: int = 0,
    base_offset: int = 0,
    leader_epoch: int = 0,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """Build one batch of (timestamp, key, value, headers) records at consecutive offsets, as
    Kafka's MemoryRecordsBuilder does: timestamps are deltas from the first record's, the
    batch's max timestamp is the largest (-1 when no record has one), and with a compression
    codec the records section is compressed as one payload."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0][0]
    body = bytearray()
    for delta, (timestamp, key, value, headers) in enumerate(records):
        _frame_record(body, timestamp - base_timestamp, delta, key, value, headers)
    if compression:
        body = compress(compression, bytes(body))
    max_timestamp = max(max(record[0] for record in records), -1)
    return seal_batch(body, len(records), base_offset=base_offset, timestamp=base_timestamp,
                      max_timestamp=max_timestamp, leader_epoch=leader_epoch, attributes=attributes | compression,
                      producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def frame_records(values: list[tuple[bytes | None, bytes | None]], first_delta: int, body: bytearray,
                  headers: list[tuple[str, bytes]] | None = None) -> None:
    """Append (key, value) records sharing the batch's timestamp to a batch body, their offset
    deltas counting from first_delta.

    A large batch can be framed a slice of records at a time and sealed once.
    """
    for delta, (key, value) in enumerate(values, first_delta):
        _frame_record(body, 0, delta, key, value, headers or ())


def _frame_record(body: bytearray, timestamp_delta: int, offset_delta: int, key: bytes | None,
                  value: bytes | None, headers) -> None:
    record = bytearray(b"\x00")  # attributes
    write_varint(timestamp_delta, record)
    write_varint(offset_delta, record)
    _write_bytes(key, record)
    _write_bytes(value, record)
    write_varint(len(headers), record)
    for hkey, hvalue in headers:
        _write_bytes(hkey.encode(), record)
        _write_bytes(hvalue, record)
    write_varint(len(record), body)
    body += record


def seal_batch(body: bytes | bytearray, count: int, *, base_offset: int, timestamp: int,
               max_timestamp: int | None = None, leader_epoch: int = 0, attributes: int = 0,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
               last_offset_delta: int | None = None) -> bytes:
    """Put the header and CRC-32C in front of a body of count framed (or compressed) records, at
    consecutive offsets unless last_offset_delta says where the batch ends (a compacted batch)."""
    batch = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(
        batch, 0, base_offset, len(batch) - LOG_OVERHEAD, leader_epoch, 2, 0, attributes,
        count - 1 if last_offset_delta is None else last_offset_delta, timestamp, timestamp if max_timestamp is None else max_timestamp,
        producer_id, producer_epoch, base_sequence, count,
    )
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)
