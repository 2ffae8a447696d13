"""Share-group records of `__consumer_offsets`, in the layouts Kafka's group coordinator writes.

A key is its record type (int16) and then the group id, and the member id for per-member records,
in the non-flexible layout. A value is a version (int16, 0 for all) and then the flexible layout:
compact strings and arrays, uuids, and an empty tagged-field section after every struct. A null
value is a tombstone. Types 9 (ShareGroupPartitionMetadata, which Kafka 4.1 no longer writes) and
15 (ShareGroupStatePartitionMetadata) are recognised and not written.
"""
from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
SHARE_RECORD_TYPES = range(PARTITION_METADATA, STATE_PARTITION_METADATA + 1)
_PER_MEMBER = {MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT}

VALUE_VERSION = 0
MEMBER_STATE_STABLE = 0  # Kafka's MemberState.STABLE: a share member is always reconciled

Assignment = dict[uuid.UUID, set[int]]
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class ShareKey(NamedTuple):
    record_type: int
    group_id: str
    member_id: str | None  # for the per-member records


class MemberMetadata(NamedTuple):
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]


class CurrentAssignment(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment


# --- keys ---

def _short_string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


def share_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    key = _I16.pack(record_type) + _short_string(group_id)
    return key + _short_string(member_id) if member_id is not None else key


def decode_share_key(key: bytes) -> ShareKey | None:
    """The key of a share-group record; None for any other key."""
    if len(key) < 4:
        return None
    record_type = _I16.unpack_from(key)[0]
    if record_type not in SHARE_RECORD_TYPES:
        return None
    position, group_id = _read_short_string(key, 2)
    member_id = _read_short_string(key, position)[1] if record_type in _PER_MEMBER else None
    return ShareKey(record_type, group_id, member_id)


def _read_short_string(data: bytes, position: int) -> tuple[int, str]:
    length = _I16.unpack_from(data, position)[0]
    start = position + 2
    return start + length, bytes(data[start:start + length]).decode()


# --- flexible values ---

class _Writer:
    def __init__(self):
        self.out = bytearray(_I16.pack(VALUE_VERSION))

    def uvarint(self, value: int) -> _Writer:
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)
        return self

    def int8(self, value: int) -> _Writer:
        self.out += _I8.pack(value)
        return self

    def int32(self, value: int) -> _Writer:
        self.out += _I32.pack(value)
        return self

    def int64(self, value: int) -> _Writer:
        self.out += _I64.pack(value)
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.uvarint(0)
        data = value.encode()
        self.uvarint(len(data) + 1)
        self.out += data
        return self

    def strings(self, values: list[str]) -> _Writer:
        self.uvarint(len(values) + 1)
        for value in values:
            self.string(value)
        return self

    def assignment(self, assigned: Assignment) -> _Writer:
        """[]TopicPartitions {TopicId uuid, Partitions []int32}, each struct with its tagged fields."""
        self.uvarint(len(assigned) + 1)
        for topic_id, partitions in sorted(assigned.items(), key=lambda item: str(item[0])):
            self.out += topic_id.bytes
            self.uvarint(len(partitions) + 1)
            for partition in sorted(partitions):
                self.int32(partition)
            self.no_tags()
        return self

    def no_tags(self) -> _Writer:
        return self.uvarint(0)

    def done(self) -> bytes:
        return bytes(self.no_tags().out)


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.position = 2
        version = _I16.unpack_from(self.data)[0]
        if version != VALUE_VERSION:
            raise ValueError(f"share-group record value version {version} is not one we read")

    def _take(self, codec: struct.Struct) -> int:
        value = codec.unpack_from(self.data, self.position)[0]
        self.position += codec.size
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def int8(self) -> int:
        return self._take(_I8)

    def int32(self) -> int:
        return self._take(_I32)

    def int64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        value = bytes(self.data[self.position:self.position + length]).decode()
        self.position += length
        return value

    def strings(self) -> list[str]:
        return [self.string() or "" for _ in range(max(self.uvarint() - 1, 0))]

    def assignment(self) -> Assignment:
        assigned: Assignment = {}
        for _ in range(max(self.uvarint() - 1, 0)):
            topic_id = uuid.UUID(bytes=bytes(self.data[self.position:self.position + 16]))
            self.position += 16
            assigned[topic_id] = {self.int32() for _ in range(max(self.uvarint() - 1, 0))}
            self.skip_tags()
        return assigned

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.position += self.uvarint()


def member_metadata_value(member: MemberMetadata) -> bytes:
    return (_Writer().string(member.rack_id).string(member.client_id).string(member.client_host)
            .strings(member.subscribed_topic_names).done())


def decode_member_metadata(value: bytes) -> MemberMetadata:
    reader = _Reader(value)
    return MemberMetadata(reader.string(), reader.string() or "", reader.string() or "", reader.strings())


def group_metadata_value(epoch: int, metadata_hash: int) -> bytes:
    return _Writer().int32(epoch).int64(metadata_hash).done()


def decode_group_metadata(value: bytes) -> tuple[int, int]:
    """(group epoch, metadata hash)"""
    reader = _Reader(value)
    return reader.int32(), reader.int64()


def target_metadata_value(assignment_epoch: int) -> bytes:
    return _Writer().int32(assignment_epoch).done()


def decode_target_metadata(value: bytes) -> int:
    return _Reader(value).int32()


def target_member_value(assigned: Assignment) -> bytes:
    return _Writer().assignment(assigned).done()


def decode_target_member(value: bytes) -> Assignment:
    return _Reader(value).assignment()


def current_assignment_value(current: CurrentAssignment) -> bytes:
    return (_Writer().int32(current.member_epoch).int32(current.previous_member_epoch).int8(current.state)
            .assignment(current.assigned).done())


def decode_current_assignment(value: bytes) -> CurrentAssignment:
    reader = _Reader(value)
    return CurrentAssignment(reader.int32(), reader.int32(), reader.int8(), reader.assignment())
