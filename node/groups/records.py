"""Records of `__consumer_offsets`, in Kafka's key/value formats.

Keys: OffsetCommitKey v1 (group, topic, partition) and GroupMetadataKey v2 (group).
Values: OffsetCommitValue v3 and GroupMetadataValue v3, which are what Kafka 3.x writes;
older versions are read too. A null value is a tombstone. The consumer protocol's
Subscription is read here too, with the same byte reader.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


# --- encoding (classic, non-flexible layouts) ---

class _Writer:
    def __init__(self):
        self.out = bytearray()

    def int16(self, v): self.out += _I16.pack(v); return self
    def int32(self, v): self.out += _I32.pack(v); return self
    def int64(self, v): self.out += _I64.pack(v); return self

    def string(self, v: str | None):
        if v is None:
            return self.int16(-1)
        data = v.encode()
        self.int16(len(data))
        self.out += data
        return self

    def bytes_(self, v: bytes | None):
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.out += v
        return self


class _Reader:
    def __init__(self, data):
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, codec):
        value = codec.unpack_from(self.data, self.pos)[0]
        self.pos += codec.size
        return value

    def int16(self): return self._take(_I16)
    def int32(self): return self._take(_I32)
    def int64(self): return self._take(_I64)

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        value = bytes(self.data[self.pos:self.pos + length]).decode()
        self.pos += length
        return value

    def bytes_(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        value = bytes(self.data[self.pos:self.pos + length])
        self.pos += length
        return value


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # Where the batch that wrote it starts in `__consumer_offsets` (Kafka's CommitRecordMetadataAndOffset):
    # of a plain and a transactional commit of one partition, the later record wins, whichever completes
    # last. Not part of the offset's value.
    record_offset: int = field(default=-1, compare=False)


@dataclass
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class StoredGroup:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[StoredMember] = field(default_factory=list)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(group).string(topic).int32(partition).out)


def offset_value(committed: CommittedOffset) -> bytes:
    return bytes(_Writer().int16(OFFSET_COMMIT_VALUE_VERSION).int64(committed.offset).int32(committed.leader_epoch)
                 .string(committed.metadata or "").int64(committed.commit_timestamp).out)


def group_key(group: str) -> bytes:
    return bytes(_Writer().int16(GROUP_METADATA_KEY_VERSION).string(group).out)


def group_value(group: StoredGroup) -> bytes:
    writer = (_Writer().int16(GROUP_METADATA_VALUE_VERSION).string(group.protocol_type).int32(group.generation)
              .string(group.protocol).string(group.leader).int64(group.state_timestamp).int32(len(group.members)))
    for m in group.members:
        (writer.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
         .int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms).bytes_(m.subscription).bytes_(m.assignment))
    return bytes(writer.out)


# --- decoding ---

def key_version(key: bytes) -> int:
    """The version every key starts with: which record it is (0-2 classic, 3-8 consumer groups, ...)."""
    return _I16.unpack_from(key, 0)[0]


def decode_key(key: bytes):
    """('offset', group, topic, partition) or ('group', group), or None for keys we do not know."""
    reader = _Reader(key)
    version = reader.int16()
    if version in (0, 1):
        return "offset", reader.string(), reader.string(), reader.int32()
    if version == 2:
        return "group", reader.string()
    return None


def decode_offset_value(value: bytes) -> CommittedOffset:
    reader = _Reader(value)
    version = reader.int16()
    if version > 3:
        raise ValueError(f"OffsetCommitValue version {version} is newer than we read")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string() or ""
    commit_timestamp = reader.int64()
    return CommittedOffset(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_value(value: bytes) -> StoredGroup:
    reader = _Reader(value)
    version = reader.int16()
    if version > 3:
        raise ValueError(f"GroupMetadataValue version {version} is newer than we read")
    group = StoredGroup(reader.string(), reader.int32(), reader.string(), reader.string(),
                        reader.int64() if version >= 2 else -1)
    for _ in range(reader.int32()):
        member_id = reader.string()
        instance_id = reader.string() if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout = reader.int32() if version >= 1 else -1
        session_timeout = reader.int32()
        group.members.append(StoredMember(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                          session_timeout, reader.bytes_() or b"", reader.bytes_() or b""))
    return group


def subscription_topics(subscription: bytes) -> list[str]:
    """Topic names of a consumer-protocol Subscription (every version starts version, topics)."""
    reader = _Reader(subscription)
    reader.int16()
    return [reader.string() for _ in range(reader.int32())]


# --- the consumer protocol embedded in classic groups (Kafka's ConsumerProtocol) ---

CONSUMER_PROTOCOL_VERSIONS = range(0, 4)  # ConsumerProtocolSubscription and ConsumerProtocolAssignment v0-3

TopicPartitions = dict[str, list[int]]  # topic name -> partitions


@dataclass
class Subscription:
    """ConsumerProtocolSubscription: v1 added owned partitions, v2 the generation, v3 the rack."""

    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = field(default_factory=dict)
    generation: int = -1
    rack_id: str | None = None


def decode_subscription(data: bytes) -> Subscription:
    """Raises ValueError (or struct.error) on bytes that are no Subscription, as Kafka's SchemaException.
    A version above 3 is read as 3, as Kafka reads newer versions by their known fields."""
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise ValueError(f"consumer protocol subscription version {version}")
    topics = [_required(reader.string()) for _ in range(reader.int32())]
    subscription = Subscription(version, topics, reader.bytes_())
    if version >= 1:
        subscription.owned_partitions = _read_topic_partitions(reader)
    if version >= 2:
        subscription.generation = reader.int32()
    if version >= 3:
        subscription.rack_id = reader.string()
    return subscription


def decode_assignment(data: bytes) -> TopicPartitions:
    """The partitions of a ConsumerProtocolAssignment (every version lays them out alike); empty bytes,
    what a member is given before its first assignment, is no partitions."""
    if not data:
        return {}
    reader = _Reader(data)
    if reader.int16() < 0:
        raise ValueError("negative consumer protocol assignment version")
    return _read_topic_partitions(reader)


def assignment_user_data(data: bytes) -> bytes | None:
    """The user data after an assignment's partitions: what only custom assignors write."""
    if not data:
        return None
    reader = _Reader(data)
    reader.int16()
    _read_topic_partitions(reader)
    return reader.bytes_()


def encode_assignment(partitions: TopicPartitions, version: int) -> bytes:
    """A ConsumerProtocolAssignment in the version the member's subscription used (at most 3)."""
    version = min(max(version, CONSUMER_PROTOCOL_VERSIONS.start), CONSUMER_PROTOCOL_VERSIONS.stop - 1)
    writer = _Writer().int16(version).int32(len(partitions))
    for topic, numbers in sorted(partitions.items()):
        writer.string(topic).int32(len(numbers))
        for number in sorted(numbers):
            writer.int32(number)
    return bytes(writer.bytes_(None).out)


def protocol_version(metadata: bytes) -> int:
    """The version a consumer-protocol Subscription starts with."""
    return _I16.unpack_from(metadata, 0)[0]


def _read_topic_partitions(reader: _Reader) -> TopicPartitions:
    result: TopicPartitions = {}
    for _ in range(reader.int32()):
        topic = _required(reader.string())
        result.setdefault(topic, []).extend(reader.int32() for _ in range(reader.int32()))
    return result


def _required(value: str | None) -> str:
    if value is None:
        raise ValueError("null topic name in the consumer protocol")
    return value
