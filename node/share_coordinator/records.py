"""Records of `__share_group_state`, in Kafka's key/value layouts.

Keys (not flexible): a record type, then the share-partition (group id, topic id, partition):
ShareSnapshotKey is type 0, ShareUpdateKey type 1. Values (flexible, version 0):
ShareSnapshotValue holds a share-partition's whole state; ShareUpdateValue the batches one write
changed, applied over the last snapshot (its SnapshotEpoch names that snapshot). A null value is a
tombstone: the share-partition's state was deleted.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from cluster.formats.varints import read_uvarint, write_uvarint
from node.share_coordinator.state import StateBatch

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
NOT_UPDATED = -1  # an update's start offset or leader epoch that leaves the stored one as it is

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class Snapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True)
class Update:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


# --- keys ---

def encode_key(record_type: int, key: StateKey) -> bytes:
    group = key.group_id.encode()
    return (_I16.pack(record_type) + _I16.pack(len(group)) + group + key.topic_id.bytes
            + _I32.pack(key.partition))


def decode_key(data: bytes) -> tuple[int, StateKey] | None:
    """(record type, share-partition); None for a key of another type or a malformed one."""
    try:
        record_type = _I16.unpack_from(data)[0]
        if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
            return None
        length = _I16.unpack_from(data, 2)[0]
        group = bytes(data[4:4 + length]).decode()
        topic_id = uuid.UUID(bytes=bytes(data[4 + length:20 + length]))
        partition = _I32.unpack_from(data, 20 + length)[0]
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    return record_type, StateKey(group, topic_id, partition)


# --- values (flexible: compact arrays, unsigned varints, tagged fields) ---

def _uvarint(value: int) -> bytes:
    out = bytearray()
    write_uvarint(value, out)
    return bytes(out)


NO_TAGS = _uvarint(0)


def _encode_batches(batches) -> bytes:
    parts = [_uvarint(len(batches) + 1)]
    for b in batches:
        parts.append(_BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) + NO_TAGS)
    return b"".join(parts)


def _skip_tags(data, pos: int) -> int:
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        _, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
    return pos


def _decode_batches(data, pos: int) -> tuple[tuple[StateBatch, ...], int]:
    count, pos = read_uvarint(data, pos)
    batches = []
    for _ in range(max(count - 1, 0)):
        first, last, state, delivered = _BATCH.unpack_from(data, pos)
        pos = _skip_tags(data, pos + _BATCH.size)
        batches.append(StateBatch(first, last, state, delivered))
    return tuple(batches), pos


def encode_snapshot(snapshot: Snapshot) -> bytes:
    return (_I16.pack(VALUE_VERSION) + _I32.pack(snapshot.snapshot_epoch) + _I32.pack(snapshot.state_epoch)
            + _I32.pack(snapshot.leader_epoch) + _I64.pack(snapshot.start_offset)
            + _I64.pack(snapshot.create_timestamp) + _I64.pack(snapshot.write_timestamp)
            + _encode_batches(snapshot.batches) + NO_TAGS)


def decode_snapshot(data: bytes) -> Snapshot:
    view = memoryview(data)
    snapshot_epoch, state_epoch, leader_epoch = struct.unpack_from(">iii", view, 2)
    start_offset, created, written = struct.unpack_from(">qqq", view, 14)
    batches, _ = _decode_batches(view, 38)
    return Snapshot(snapshot_epoch, state_epoch, leader_epoch, start_offset, created, written, batches)


def encode_update(update: Update) -> bytes:
    return (_I16.pack(VALUE_VERSION) + _I32.pack(update.snapshot_epoch) + _I32.pack(update.leader_epoch)
            + _I64.pack(update.start_offset) + _encode_batches(update.batches) + NO_TAGS)


def decode_update(data: bytes) -> Update:
    view = memoryview(data)
    snapshot_epoch, leader_epoch, start_offset = struct.unpack_from(">iiq", view, 2)
    batches, _ = _decode_batches(view, 18)
    return Update(snapshot_epoch, leader_epoch, start_offset, batches)
