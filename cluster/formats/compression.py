"""Kafka's compression codecs, for the paths that must rewrite records: converting legacy
message sets (magic 0 and 1) to and from magic-2 batches. Stored batches are never
recompressed on the produce or fetch path of magic-2 clients.

Payloads are framed as Kafka's Java clients frame them, so every client can read what we
write: gzip streams, snappy in xerial-snappy's block framing, and LZ4 frames with
independent blocks. Magic-0 LZ4 keeps Kafka's old framing bug: the frame descriptor's
header checksum was computed over the frame's magic number too, so it is written that way
and ignored on reading (Kafka's KafkaLZ4BlockInputStream does the same for magic 0).
"""
from __future__ import annotations

import gzip
import struct
import zlib

import lz4.frame
import snappy
from kafka import codec

from cluster.formats.varints import CorruptRecordError, read_uvarint

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_LZ4_FLG = 4  # frame magic number (4 bytes), then FLG, BD, [content size], [dictionary id], HC
_LZ4_CONTENT_SIZE = 0x08
_LZ4_DICTIONARY_ID = 0x01
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, then version and compatible version (int32 each)
_GZIP_WINDOW = 16 + zlib.MAX_WBITS


class DecompressedTooLargeError(Exception):
    """A payload that would decompress to more than the caller allows."""


def compress(codec_id: int, data: bytes, *, magic: int = 2) -> bytes:
    if codec_id == GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec_id == SNAPPY:
        return codec.snappy_encode(data)
    if codec_id == LZ4:
        frame = lz4.frame.compress(data, block_linked=False, store_size=False)
        return _with_old_kafka_header_checksum(frame) if magic == 0 else frame
    raise ValueError(f"cannot compress with codec {codec_id}")


def decompress(codec_id: int, data, *, magic: int = 2, max_size: int | None = None) -> bytes:
    """The uncompressed bytes; CorruptRecordError when data is not a valid payload of codec_id,
    DecompressedTooLargeError (found without inflating everything) past max_size bytes."""
    limit = max_size if max_size is not None else -1
    try:
        if codec_id == GZIP:
            return _gunzip(bytes(data), limit)
        if codec_id == SNAPPY:
            return _unsnappy(bytes(data), limit)
        if codec_id == LZ4:
            return _unlz4(_with_header_checksum(bytes(data)) if magic == 0 else bytes(data), limit)
    except (OSError, EOFError, zlib.error, snappy.UncompressError, RuntimeError, ValueError, IndexError,
            struct.error) as exc:
        raise CorruptRecordError(f"cannot decompress {NAMES[codec_id]} payload: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec_id}")


def _check_size(size: int, limit: int) -> None:
    if 0 <= limit < size:
        raise DecompressedTooLargeError(f"compressed payload holds more than {limit} bytes")


def _gunzip(data: bytes, limit: int) -> bytes:
    """Every gzip member in data, as Java's GZIPInputStream reads them."""
    out = bytearray()
    while data:
        member = zlib.decompressobj(_GZIP_WINDOW)
        out += member.decompress(data, limit - len(out) + 1 if limit >= 0 else 0)
        _check_size(len(out), limit)
        if not member.eof:
            raise EOFError("gzip stream ends before its end marker")
        data = member.unused_data
    return bytes(out)


def _unsnappy(data: bytes, limit: int) -> bytes:
    """Snappy in xerial-snappy's framing (what Kafka writes), or a single raw snappy block."""
    if not data.startswith(_XERIAL_MAGIC):
        _check_size(read_uvarint(data, 0)[0], limit)
        return snappy.decompress(data)
    out = bytearray()
    cursor = _XERIAL_HEADER_SIZE
    while cursor < len(data):
        size = struct.unpack_from(">i", data, cursor)[0]
        block = data[cursor + 4:cursor + 4 + size]
        _check_size(len(out) + read_uvarint(block, 0)[0], limit)  # a block starts with its uncompressed length
        out += snappy.decompress(block)
        cursor += 4 + size
    return bytes(out)


def _unlz4(frame: bytes, limit: int) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out = decompressor.decompress(frame, max_length=limit + 1 if limit >= 0 else -1)
    _check_size(len(out), limit)
    if not decompressor.eof:
        raise EOFError("LZ4 frame ends before its end mark")
    return out


def _descriptor_end(frame: bytes) -> int:
    """Position of the header checksum byte of an LZ4 frame."""
    if len(frame) < 7:
        raise ValueError("LZ4 frame shorter than its descriptor")
    flags = frame[_LZ4_FLG]
    return 6 + (8 if flags & _LZ4_CONTENT_SIZE else 0) + (4 if flags & _LZ4_DICTIONARY_ID else 0)


def _with_header_checksum(frame: bytes) -> bytes:
    end = _descriptor_end(frame)
    return frame[:end] + bytes([(xxh32(frame[_LZ4_FLG:end]) >> 8) & 0xFF]) + frame[end + 1:]


def _with_old_kafka_header_checksum(frame: bytes) -> bytes:
    end = _descriptor_end(frame)
    return frame[:end] + bytes([(xxh32(frame[:end]) >> 8) & 0xFF]) + frame[end + 1:]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def xxh32(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes: all an LZ4 frame descriptor checksum needs."""
    if len(data) >= 16:
        raise ValueError("xxh32 here covers frame descriptors only (under 16 bytes)")
    h = (_P5 + len(data)) & _MASK
    pos = 0
    while pos + 4 <= len(data):
        h = (h + int.from_bytes(data[pos:pos + 4], "little") * _P3) & _MASK
        h = (_rotl(h, 17) * _P4) & _MASK
        pos += 4
    for byte in data[pos:]:
        h = (h + byte * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
    h ^= h >> 15
    h = (h * _P2) & _MASK
    h ^= h >> 13
    h = (h * _P3) & _MASK
    return h ^ (h >> 16)
