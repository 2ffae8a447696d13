"""Records of KIP-848 consumer groups in `__consumer_offsets`, in the layouts Kafka's group coordinator writes.

Keys are classic (non-flexible) structs whose version is the record type: 3 ConsumerGroupMetadata
(group), 4 ConsumerGroupPartitionMetadata (group; Kafka 4.1 no longer writes it, replaced by the
MetadataHash tag of the group's metadata: read and ignored here), 5 ConsumerGroupMemberMetadata,
6 ConsumerGroupTargetAssignmentMetadata, 7 ConsumerGroupTargetAssignmentMember,
8 ConsumerGroupCurrentMemberAssignment (group, member). Values are version 0 of flexible structs:
compact strings and arrays, a tagged-field section at the end of every struct. A null value is a
tombstone. Tagged fields are skipped on reading and none are written (their defaults hold), but for
MemberMetadata's tag 0, ClassicMemberMetadata, which a member of the classic protocol carries.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT = 6, 7, 8
KEY_TYPES = range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)
_MEMBER_KEYS = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
VALUE_VERSION = 0

# Kafka's MemberState values as stored
MEMBER_STATE_CODES = {"STABLE": 0, "UNREVOKED_PARTITIONS": 1, "UNRELEASED_PARTITIONS": 2, "UNKNOWN": 127}
MEMBER_STATE_NAMES = {code: name for name, code in MEMBER_STATE_CODES.items()}

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")

Partitions = dict[uuid.UUID, set[int]]


@dataclass
class ClassicMemberMetadata:
    """MemberMetadata's tagged field 0: what a member that speaks the classic protocol inside a
    consumer group joined with (node.groups.consumer_classic_members)."""

    session_timeout_ms: int
    supported_protocols: list[tuple[str, bytes]]  # its JoinGroup protocols: name, embedded Subscription


@dataclass
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass
class MemberAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)


# --- keys ---

def key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    out = bytearray(_I16.pack(record_type))
    _classic_string(out, group_id)
    if record_type in _MEMBER_KEYS:
        _classic_string(out, member_id or "")
    return bytes(out)


def decode_key(data: bytes) -> tuple[int, str, str | None] | None:
    """(record type, group, member id or None) for key types 3-8; None for any other key."""
    record_type = _I16.unpack_from(data, 0)[0]
    if record_type not in KEY_TYPES:
        return None
    pos, group_id = _read_classic_string(data, 2)
    member_id = _read_classic_string(data, pos)[1] if record_type in _MEMBER_KEYS else None
    return record_type, group_id, member_id


def _classic_string(out: bytearray, value: str) -> None:
    data = value.encode()
    out += _I16.pack(len(data)) + data


def _read_classic_string(data: bytes, pos: int) -> tuple[int, str]:
    length = _I16.unpack_from(data, pos)[0]
    return pos + 2 + length, bytes(data[pos + 2:pos + 2 + length]).decode()


# --- values ---

def group_metadata_value(epoch: int) -> bytes:
    return bytes(_Writer().int32(epoch).tags().done())


def decode_group_metadata(value: bytes) -> int:
    return _Reader(value).int32()


def target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    return bytes(_Writer().int32(assignment_epoch).tags().done())


def decode_target_assignment_metadata(value: bytes) -> int:
    return _Reader(value).int32()


def member_metadata_value(m: MemberMetadata) -> bytes:
    writer = (_Writer().string(m.instance_id).string(m.rack_id).string(m.client_id).string(m.client_host)
              .strings(m.subscribed_topic_names).string(m.subscribed_topic_regex).int32(m.rebalance_timeout_ms)
              .string(m.server_assignor))
    if m.classic is None:
        return bytes(writer.tags().done())
    # A tagged nullable struct: its size counts the presence byte (1) that precedes it.
    protocols = m.classic.supported_protocols
    classic = _Writer(versioned=False).int32(m.classic.session_timeout_ms).uvarint(len(protocols) + 1)
    for name, metadata in protocols:
        classic.string(name).bytes_(metadata).tags()
    body = classic.tags().done()
    writer.uvarint(1).uvarint(0).uvarint(len(body) + 1).int8(1)
    writer.out += body
    return bytes(writer.done())


def decode_member_metadata(value: bytes) -> MemberMetadata:
    r = _Reader(value)
    m = MemberMetadata(r.string(), r.string(), r.string() or "", r.string() or "", r.strings(), r.string(),
                       r.int32(), r.string())
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0 and r.int8() >= 0:
            session_timeout_ms = r.int32()
            protocols = []
            for _ in range(max(r.uvarint() - 1, 0)):
                protocols.append((r.string() or "", r.bytes_()))
                r.skip_tags()
            m.classic = ClassicMemberMetadata(session_timeout_ms, protocols)
        r.pos = end
    return m


def target_assignment_member_value(partitions: Partitions) -> bytes:
    return bytes(_Writer().topic_partitions(partitions).tags().done())


def decode_target_assignment_member(value: bytes) -> Partitions:
    return _Reader(value).topic_partitions()


def current_assignment_value(a: MemberAssignment) -> bytes:
    writer = (_Writer().int32(a.member_epoch).int32(a.previous_member_epoch).int8(MEMBER_STATE_CODES[a.state])
              .topic_partitions(a.assigned).topic_partitions(a.pending_revocation))
    return bytes(writer.tags().done())


def decode_current_assignment(value: bytes) -> MemberAssignment:
    r = _Reader(value)
    return MemberAssignment(r.int32(), r.int32(), MEMBER_STATE_NAMES.get(r.int8(), "UNKNOWN"),
                            r.topic_partitions(), r.topic_partitions())


# --- flexible encoding ---

class _Writer:
    def __init__(self, versioned: bool = True):
        self.out = bytearray(_I16.pack(VALUE_VERSION)) if versioned else bytearray()

    def done(self) -> bytearray:
        return self.out

    def int8(self, v): self.out += _I8.pack(v); return self
    def int32(self, v): self.out += _I32.pack(v); return self

    def uvarint(self, v: int):
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)
        return self

    def string(self, v: str | None):
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.out += data
        return self

    def bytes_(self, v: bytes):
        self.uvarint(len(v) + 1)
        self.out += v
        return self

    def strings(self, values: list[str]):
        self.uvarint(len(values) + 1)
        for v in values:
            self.string(v)
        return self

    def topic_partitions(self, partitions: Partitions):
        topics = [(t, ps) for t, ps in sorted(partitions.items(), key=lambda item: str(item[0])) if ps]
        self.uvarint(len(topics) + 1)
        for topic_id, ps in topics:
            self.out += topic_id.bytes
            self.uvarint(len(ps) + 1)
            for p in sorted(ps):
                self.int32(p)
            self.tags()
        return self

    def tags(self):
        return self.uvarint(0)


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        version = _I16.unpack_from(self.data, 0)[0]
        if version != VALUE_VERSION:
            raise ValueError(f"consumer group record value version {version} is not one we read")
        self.pos = 2

    def _take(self, codec):
        value = codec.unpack_from(self.data, self.pos)[0]
        self.pos += codec.size
        return value

    def int8(self): return self._take(_I8)
    def int32(self): return self._take(_I32)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        value = bytes(self.data[self.pos:self.pos + length]).decode()
        self.pos += length
        return value

    def bytes_(self) -> bytes:
        length = max(self.uvarint() - 1, 0)
        value = bytes(self.data[self.pos:self.pos + length])
        self.pos += length
        return value

    def strings(self) -> list[str]:
        return [self.string() or "" for _ in range(max(self.uvarint() - 1, 0))]

    def topic_partitions(self) -> Partitions:
        result: Partitions = {}
        for _ in range(max(self.uvarint() - 1, 0)):
            topic_id = uuid.UUID(bytes=bytes(self.data[self.pos:self.pos + 16]))
            self.pos += 16
            result[topic_id] = {self.int32() for _ in range(max(self.uvarint() - 1, 0))}
            self.skip_tags()
        return result

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()
