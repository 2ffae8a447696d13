"""Kafka's varints (zigzag and unsigned), compact strings, and the error a malformed one raises.

The ground layer of the record formats: records, compression and message sets all read them.
"""
from __future__ import annotations


class CorruptRecordError(Exception):
    """A batch failed validation; maps to Kafka's CORRUPT_MESSAGE (2)."""


def write_varint(value: int, out: bytearray) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    write_uvarint(zigzag, out)


def write_uvarint(value: int, out: bytearray) -> None:
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_compact_string(text: str, out: bytearray) -> None:
    """A flexible version's string: its UTF-8 length + 1 as an unsigned varint, then the bytes."""
    encoded = text.encode()
    write_uvarint(len(encoded) + 1, out)
    out += encoded


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: most lengths, counts and tags
        return buf[pos], pos + 1
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def read_varint(buf, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:
        raw = buf[pos]
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos
