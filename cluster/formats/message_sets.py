"""Kafka's legacy message formats (magic 0 and 1) and their conversion to and from magic 2.

A legacy message set is a run of messages, each `offset int64, size int32` followed by
`crc uint32, magic int8, attributes int8, [timestamp int64 (magic 1)], key bytes, value bytes`,
the CRC-32 covering everything after itself. A compressed message is a wrapper whose value
is an inner message set, compressed with the codec in its attributes; a magic-1 wrapper
carries its last inner offset, and its inner offsets are relative (0, 1, ...).

Storage is always magic 2 (`message.format.version` is deprecated), so as Kafka does:

- Produce v0-2 sends legacy sets, which are up-converted into ONE magic-2 batch (Kafka's
  LogValidator): offsets are assigned by the log as for any batch, magic-0 messages get no
  timestamp (-1), magic-1 messages keep theirs (a LogAppendTime wrapper's own timestamp for
  its inner messages), headers are empty. The wrapper's codec is kept and the batch is
  compressed again with it, as Kafka does under `compression.type=producer`, so that modern
  consumers get the same compressed batch from us as from Kafka.
- Fetch v0-3 down-converts magic-2 batches to magic 0 (v0-1) or magic 1 (v2-3) message sets
  (Kafka's RecordsUtil.downConvert): offsets and timestamps kept, headers dropped, control
  batches skipped, a compressed batch becomes one wrapper compressed with the same codec,
  zstd cannot be converted (UNSUPPORTED_COMPRESSION_TYPE).

This path decodes every record by necessity; it is only ever taken for those old API
versions. kafka-python's `kafka.record` is not used: its legacy reader trusts sizes with
asserts, its legacy builder writes wrappers at offset 0 with timestamp 0, and its readers
inflate compressed payloads without bound. Here no compressed payload may inflate past
MAX_DECOMPRESSED_BYTES (MESSAGE_TOO_LARGE, found before inflating it all), a bound Kafka
does not have, so that a small compressed bomb cannot exhaust a node's memory.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from cluster.formats import compression
from cluster.formats.compression import DecompressedTooLargeError
from cluster.formats.records import (
    ATTR_TIMESTAMP_TYPE, HEADER_SIZE, CorruptRecordError, decode_records, encode_records, iter_batch_headers,
    MAGIC_OFFSET,
)

LOG_OVERHEAD = 12  # offset + size, before each message
RECORD_OVERHEAD = {0: 14, 1: 22}  # crc, magic, attributes, [timestamp], key and value lengths
_OFFSET_AND_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTRIBUTES = struct.Struct(">IbB")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
NO_TIMESTAMP = -1
_CODEC_MASK = 0x07
# Far above what producers batch (16 KiB by default, before compression), and bounding the
# memory one conversion takes.
MAX_DECOMPRESSED_BYTES = 32 << 20


class InvalidRecordError(Exception):
    """Well-formed but not acceptable; Kafka's INVALID_RECORD (87)."""


class InvalidTimestampError(Exception):
    """A producer claimed LogAppendTime; Kafka's INVALID_TIMESTAMP (32)."""


class UnsupportedCompressionError(Exception):
    """zstd batches cannot be converted for old consumers; UNSUPPORTED_COMPRESSION_TYPE (76)."""


@dataclass(slots=True)
class LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & ATTR_TIMESTAMP_TYPE)


@dataclass(slots=True)
class UpConverted:
    batch: bytes  # one magic-2 batch at base offset 0
    largest_message: int  # bytes of the largest message sent, for max.message.bytes


# --- reading legacy message sets ---

def frame_messages(data, *, lenient_magic: bool = False) -> list[tuple[int, int, int]]:
    """(position, size, magic) of each whole message, walked as Kafka's ByteBufferLogInputStream
    walks a produce payload: a partial message at the end ends the walk (and is dropped); a
    size below any message's overhead or a magic above 2 is corrupt."""
    view = memoryview(data)
    found = []
    pos = 0
    while len(view) - pos >= LOG_OVERHEAD:
        _, size = _OFFSET_AND_SIZE.unpack_from(view, pos)
        if size < RECORD_OVERHEAD[0]:
            raise CorruptRecordError(f"message size {size} is below the minimum {RECORD_OVERHEAD[0]}")
        if len(view) - pos <= MAGIC_OFFSET:
            break
        magic = view[pos + MAGIC_OFFSET]
        if magic > 2 and not lenient_magic:
            raise CorruptRecordError(f"invalid magic {magic}")
        if len(view) - pos < LOG_OVERHEAD + size:
            break
        found.append((pos, LOG_OVERHEAD + size, magic))
        pos += LOG_OVERHEAD + size
    return found


def decode_message(data, pos: int, size: int) -> LegacyMessage:
    """The message at pos (size includes the offset and size fields), its CRC-32 checked."""
    view = memoryview(data)[pos:pos + size]
    offset, _ = _OFFSET_AND_SIZE.unpack_from(view, 0)
    crc, magic, attributes = _CRC_MAGIC_ATTRIBUTES.unpack_from(view, LOG_OVERHEAD)
    if magic not in RECORD_OVERHEAD:
        raise CorruptRecordError(f"magic {magic} is not a legacy message format")
    if size - LOG_OVERHEAD < RECORD_OVERHEAD[magic]:
        raise CorruptRecordError(f"magic {magic} message of {size - LOG_OVERHEAD} bytes is below its overhead")
    if zlib.crc32(view[LOG_OVERHEAD + 4:]) != crc:
        raise CorruptRecordError(f"message at offset {offset} fails its CRC-32 check")
    cursor = LOG_OVERHEAD + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _TIMESTAMP.unpack_from(view, cursor)[0]
        cursor += 8
    key, cursor = _read_bytes(view, cursor)
    value, cursor = _read_bytes(view, cursor)
    if cursor != size:
        raise CorruptRecordError(f"message at offset {offset} has {size - cursor} bytes after its value")
    return LegacyMessage(offset, magic, attributes, timestamp, key, value)


def _read_bytes(view: memoryview, cursor: int) -> tuple[bytes | None, int]:
    if cursor + 4 > len(view):
        raise CorruptRecordError("message field runs past the end of the message")
    length = _LENGTH.unpack_from(view, cursor)[0]
    cursor += 4
    if length < 0:
        return None, cursor
    if cursor + length > len(view):
        raise CorruptRecordError("message field runs past the end of the message")
    return bytes(view[cursor:cursor + length]), cursor + length


def inner_messages(wrapper: LegacyMessage) -> list[LegacyMessage]:
    """The messages compressed in a wrapper, with absolute offsets and the timestamps Kafka
    gives them (a LogAppendTime wrapper's for all of its messages), as Kafka's
    DeepRecordsIterator reads them: a partial inner message at the end is ignored."""
    if wrapper.codec == compression.ZSTD:
        raise InvalidRecordError("legacy messages cannot be compressed with zstd")
    if wrapper.codec not in compression.NAMES:
        raise CorruptRecordError(f"unknown compression codec {wrapper.codec}")
    if wrapper.value is None:
        raise InvalidRecordError("compressed message with a null value")
    data = compression.decompress(wrapper.codec, wrapper.value, magic=wrapper.magic, max_size=MAX_DECOMPRESSED_BYTES)
    messages = [decode_message(data, pos, size) for pos, size, _ in frame_messages(data, lenient_magic=True)]
    if not messages:
        raise InvalidRecordError("compressed message holds no messages")
    for message in messages:
        if message.magic != wrapper.magic:
            raise InvalidRecordError(f"inner magic {message.magic} differs from its wrapper's {wrapper.magic}")
        if message.codec:
            raise InvalidRecordError("compressed message inside a compressed message")
        if wrapper.log_append_time:
            message.timestamp = wrapper.timestamp
    if wrapper.magic == 1:
        _make_offsets_absolute(wrapper, messages)
    return messages


def _make_offsets_absolute(wrapper: LegacyMessage, messages: list[LegacyMessage]) -> None:
    last_inner = messages[-1].offset
    if wrapper.offset == 0:  # some librdkafka versions send wrappers at offset 0
        return
    if wrapper.offset < last_inner:
        raise InvalidRecordError(f"wrapper offset {wrapper.offset} is below its last inner offset {last_inner}")
    for message in messages:
        message.offset += wrapper.offset - last_inner


# --- up-conversion (Produce v0-2) ---

def first_magic(data) -> int | None:
    """The magic of the first whole message or batch of a produce payload, None if there is none."""
    framed = frame_messages(data)
    return framed[0][2] if framed else None


def up_convert(data, *, log_append_time_topic: bool) -> UpConverted | None:
    """One magic-2 batch holding every message of a legacy produce payload, or None when the
    payload holds no whole message (Kafka then appends nothing and answers without error)."""
    framed = frame_messages(data)
    if not framed:
        return None
    magic = framed[0][2]
    if any(other != magic for _, _, other in framed):
        raise InvalidRecordError(f"messages of different magic in one message set (first is magic {magic})")
    outer = [decode_message(data, pos, size) for pos, size, _ in framed]
    if any(message.codec for message in outer) and len(outer) > 1:
        raise InvalidRecordError("a compressed message must be the only message of its set")
    codec = outer[0].codec
    messages = inner_messages(outer[0]) if codec else outer
    for shell in outer:
        _check_timestamp_type(shell, log_append_time_topic)
    batch = encode_records([(m.timestamp, m.key, m.value, ()) for m in messages], compression=codec)
    return UpConverted(batch, max(size for _, size, _ in framed))


def _check_timestamp_type(message: LegacyMessage, log_append_time_topic: bool) -> None:
    """Producers may not claim LogAppendTime, as Kafka's LogValidator.validateTimestamp rules:
    on a CreateTime topic only a message without a timestamp is refused for it."""
    if not message.log_append_time:
        return
    if log_append_time_topic or message.timestamp == NO_TIMESTAMP:
        raise InvalidTimestampError("producers may not set the LogAppendTime timestamp type")


# --- down-conversion (Fetch v0-3) ---

def down_convert(records, to_magic: int, first_offset: int) -> bytes:
    """The magic-2 batches read for an old consumer as a magic `to_magic` message set.

    Sized as Kafka's LazyDownConversionRecords sizes it: the first batch that converts to
    anything is sent whole, and the rest while they fit in as many bytes as were read or as
    that first batch took, whichever is more. Kafka then streams a partial message or an
    overflow stub up to that size, which clients discard; here the set ends at a whole message.
    A batch that cannot be converted (zstd, or inflating past MAX_DECOMPRESSED_BYTES) ends
    the set, so the consumer gets its error when it fetches from that batch on.
    """
    budget = len(records)
    out = bytearray()
    first = True
    for pos, header in iter_batch_headers(records):
        if header.is_control:
            continue
        try:
            messages = convert_batch(memoryview(records)[pos:pos + header.size], header, to_magic, first_offset)
        except (UnsupportedCompressionError, DecompressedTooLargeError, CorruptRecordError):
            if first:
                raise
            break
        if not messages:
            continue
        if first:
            out += b"".join(messages)
            budget = max(budget, len(out))
            first = False
            continue
        for message in messages:
            if len(out) + len(message) > budget:
                return bytes(out)
            out += message
    return bytes(out)


def convert_batch(batch, header, to_magic: int, first_offset: int) -> list[bytes]:
    """One magic-2 batch as legacy messages: one message per record when uncompressed (those
    before first_offset left out), one wrapper when compressed (the consumer skips what it did
    not ask for, as with Kafka)."""
    if header.compression == compression.ZSTD:
        raise UnsupportedCompressionError("zstd batches cannot be converted to a legacy message format")
    body = memoryview(batch)[HEADER_SIZE:]
    if header.compression:
        body = compression.decompress(header.compression, body, max_size=MAX_DECOMPRESSED_BYTES)
    records = list(decode_records(header, body))
    if header.uses_log_append_time:
        for record in records:
            record.timestamp = header.max_timestamp
    if not header.compression:
        records = [r for r in records if r.offset >= first_offset]
    if not records:
        return []
    timestamp_bit = ATTR_TIMESTAMP_TYPE if header.uses_log_append_time and to_magic > 0 else 0
    if not header.compression:
        return [encode_message(r.offset, to_magic, timestamp_bit, r.timestamp, r.key, r.value) for r in records]
    base = records[0].offset if to_magic > 0 else 0
    inner = b"".join(encode_message(r.offset - base, to_magic, timestamp_bit, r.timestamp, r.key, r.value)
                     for r in records)
    wrapper_timestamp = max(r.timestamp for r in records)
    value = compression.compress(header.compression, inner, magic=to_magic)
    return [encode_message(records[-1].offset, to_magic, timestamp_bit | header.compression,
                           max(wrapper_timestamp, NO_TIMESTAMP), None, value)]


def encode_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One legacy message with its offset and size fields and its CRC-32."""
    body = bytearray(_CRC_MAGIC_ATTRIBUTES.pack(0, magic, attributes))
    if magic > 0:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        body += _LENGTH.pack(-1 if field is None else len(field))
        if field is not None:
            body += field
    struct.pack_into(">I", body, 0, zlib.crc32(memoryview(body)[4:]))
    return _OFFSET_AND_SIZE.pack(offset, len(body)) + bytes(body)
