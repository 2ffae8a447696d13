"""Records of `__transaction_state`, in Kafka's TransactionLog key/value formats.

Key: TransactionLogKey v0 (transactional id). Value: TransactionLogValue v0, what Kafka 3.x writes
(v1, flexible, is read too, its tagged fields skipped). A null value is a tombstone: the
transactional id expired.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cluster.formats.varints import read_uvarint

KEY_VERSION = 0
VALUE_VERSION = 0

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, transaction start


@dataclass
class StoredTransaction:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


def transaction_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def transaction_value(stored: StoredTransaction, empty: bool) -> bytes:
    """`empty`: the Empty state, whose partitions Kafka writes as null."""
    out = bytearray(_VALUE_HEAD.pack(VALUE_VERSION, stored.producer_id, stored.producer_epoch, stored.timeout_ms,
                                     stored.status))
    if empty:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(stored.partitions))
        for topic, partitions in stored.partitions.items():
            out += _string(topic) + _I32.pack(len(partitions))
            out += struct.pack(f">{len(partitions)}i", *partitions)
    out += _TIMES.pack(stored.last_update_ms, stored.start_ms)
    return bytes(out)


def decode_key(key: bytes) -> str | None:
    """The transactional id of a TransactionLogKey, or None for a key of another kind."""
    view = memoryview(key)
    if len(view) < 4 or _I16.unpack_from(view, 0)[0] != KEY_VERSION:
        return None
    length = _I16.unpack_from(view, 2)[0]
    return bytes(view[4:4 + length]).decode()


class _Reader:
    def __init__(self, data: bytes, flexible: bool):
        self.view, self.pos, self.flexible = memoryview(data), 0, flexible

    def take(self, codec: struct.Struct) -> int:
        value = codec.unpack_from(self.view, self.pos)[0]
        self.pos += codec.size
        return value

    def length(self) -> int:
        if self.flexible:
            value, self.pos = read_uvarint(self.view, self.pos)
            return value - 1
        return self.take(_I32)

    def string(self) -> str:
        if self.flexible:
            size, self.pos = read_uvarint(self.view, self.pos)
            size -= 1
        else:
            size = self.take(_I16)
        value = bytes(self.view[self.pos:self.pos + size]).decode()
        self.pos += size
        return value

    def skip_tags(self) -> None:
        if self.flexible:
            count, self.pos = read_uvarint(self.view, self.pos)
            for _ in range(count):
                _, self.pos = read_uvarint(self.view, self.pos)
                size, self.pos = read_uvarint(self.view, self.pos)
                self.pos += size


def decode_value(value: bytes) -> StoredTransaction:
    version = _I16.unpack_from(value, 0)[0]
    if version > 1:
        raise ValueError(f"TransactionLogValue version {version} is newer than we read")
    reader = _Reader(value, flexible=version >= 1)
    reader.pos = 2
    stored = StoredTransaction(reader.take(_I64), reader.take(_I16), reader.take(_I32), reader.take(_I8))
    for _ in range(max(reader.length(), 0)):
        topic = reader.string()
        stored.partitions[topic] = [reader.take(_I32) for _ in range(reader.length())]
        reader.skip_tags()
    stored.last_update_ms, stored.start_ms = reader.take(_I64), reader.take(_I64)
    return stored
