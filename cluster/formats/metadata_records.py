"""KRaft metadata records, encoded and decoded in Kafka's exact framing.

A record value is: unsigned varint frame version (1), unsigned varint record type,
unsigned varint record version, then the body in Kafka's flexible encoding (compact
strings and arrays, then a tagged-field section). Record keys are null. The field tables
below follow Kafka's metadata record schemas; every body is flexible from version 0.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from cluster.formats.records import (
    CorruptRecordError, encode_batch, iter_batch_headers, iter_records, read_uvarint, write_uvarint,
)

FRAME_VERSION = 1
ANY = 1 << 15  # "and every later version"


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # int8 int16 uint16 int32 int64 bool string uuid []int32 []uuid or "[]" + struct name
    since: int = 0
    until: int = ANY
    nullable_since: int | None = None
    tag: int | None = None
    default: Any = 0

    def present(self, version: int) -> bool:
        return self.since <= version <= self.until

    def nullable(self, version: int) -> bool:
        return self.nullable_since is not None and version >= self.nullable_since


def F(name, type_, since=0, *, until=ANY, nullable=None, tag=None, default=None):
    if default is None and nullable is None:
        default = _zero(type_)
    return Field(name, type_, since, until, nullable, tag, default)


def _zero(type_: str):
    if type_.startswith("[]"):
        return []
    return {"bool": False, "string": "", "uuid": uuid.UUID(int=0)}.get(type_, 0)


STRUCTS: dict[str, list[Field]] = {
    "BrokerEndpoint": [F("name", "string"), F("host", "string"), F("port", "uint16"), F("security_protocol", "int16")],
    "BrokerFeature": [F("name", "string"), F("min_supported_version", "int16"), F("max_supported_version", "int16")],
}


@dataclass(frozen=True)
class RecordType:
    name: str
    api_key: int
    max_version: int
    fields: list[Field]


_TYPES = [
    RecordType("RegisterBrokerRecord", 0, 3, [
        F("broker_id", "int32"), F("is_migrating_zk_broker", "bool", 2), F("incarnation_id", "uuid"),
        F("broker_epoch", "int64"), F("end_points", "[]BrokerEndpoint"), F("features", "[]BrokerFeature"),
        F("rack", "string", nullable=0, default=None), F("fenced", "bool", default=True),
        F("in_controlled_shutdown", "bool", 1), F("log_dirs", "[]uuid", 3, tag=0),
    ]),
    RecordType("UnregisterBrokerRecord", 1, 0, [F("broker_id", "int32"), F("broker_epoch", "int64")]),
    RecordType("TopicRecord", 2, 0, [F("name", "string"), F("topic_id", "uuid")]),
    RecordType("PartitionRecord", 3, 2, [
        F("partition_id", "int32", default=-1), F("topic_id", "uuid"), F("replicas", "[]int32"), F("isr", "[]int32"),
        F("removing_replicas", "[]int32"), F("adding_replicas", "[]int32"), F("leader", "int32", default=-1),
        F("leader_recovery_state", "int8", tag=0), F("leader_epoch", "int32", default=-1),
        F("partition_epoch", "int32", default=-1), F("directories", "[]uuid", 1),
        F("eligible_leader_replicas", "[]int32", 2, nullable=2, tag=1, default=None),
        F("last_known_elr", "[]int32", 2, nullable=2, tag=2, default=None),
    ]),
    RecordType("ConfigRecord", 4, 0, [
        F("resource_type", "int8"), F("resource_name", "string"), F("name", "string"),
        F("value", "string", nullable=0, default=None),
    ]),
    RecordType("PartitionChangeRecord", 5, 2, [
        F("partition_id", "int32", default=-1), F("topic_id", "uuid"),
        F("isr", "[]int32", nullable=0, tag=0, default=None), F("leader", "int32", tag=1, default=-2),
        F("replicas", "[]int32", nullable=0, tag=2, default=None),
        F("removing_replicas", "[]int32", nullable=0, tag=3, default=None),
        F("adding_replicas", "[]int32", nullable=0, tag=4, default=None),
        F("leader_recovery_state", "int8", tag=5, default=-1),
        F("directories", "[]uuid", 1, nullable=1, tag=8, default=None),
        F("eligible_leader_replicas", "[]int32", 2, nullable=2, tag=6, default=None),
        F("last_known_elr", "[]int32", 2, nullable=2, tag=7, default=None),
    ]),
    RecordType("FenceBrokerRecord", 7, 0, [F("id", "int32"), F("epoch", "int64")]),
    RecordType("UnfenceBrokerRecord", 8, 0, [F("id", "int32"), F("epoch", "int64")]),
    RecordType("RemoveTopicRecord", 9, 0, [F("topic_id", "uuid")]),
    RecordType("FeatureLevelRecord", 12, 0, [F("name", "string"), F("feature_level", "int16")]),
    RecordType("ProducerIdsRecord", 15, 0, [
        F("broker_id", "int32"), F("broker_epoch", "int64", default=-1), F("next_producer_id", "int64"),
    ]),
    RecordType("BrokerRegistrationChangeRecord", 17, 2, [
        F("broker_id", "int32"), F("broker_epoch", "int64"), F("fenced", "int8", tag=0),
        F("in_controlled_shutdown", "int8", 1, tag=1), F("log_dirs", "[]uuid", 2, tag=2),
    ]),
    RecordType("NoOpRecord", 20, 0, []),
]

RECORD_TYPES: dict[str, int] = {t.name: t.api_key for t in _TYPES}
_BY_NAME = {t.name: t for t in _TYPES}
_BY_KEY = {t.api_key: t for t in _TYPES}

# Writers that tell us apart from Kafka: the versions we write by default.
WRITE_VERSIONS = {"RegisterBrokerRecord": 3, "PartitionRecord": 1, "PartitionChangeRecord": 1,
                  "BrokerRegistrationChangeRecord": 1}

_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
          "int32": struct.Struct(">i"), "int64": struct.Struct(">q"), "bool": struct.Struct(">?")}
_INT32 = _FIXED["int32"]


# --- encoding ---

def encode_record(name: str, fields: dict, version: int | None = None) -> bytes:
    record_type = _BY_NAME[name]
    version = WRITE_VERSIONS.get(name, record_type.max_version) if version is None else version
    out = bytearray()
    write_uvarint(FRAME_VERSION, out)
    write_uvarint(record_type.api_key, out)
    write_uvarint(version, out)
    _encode_struct(record_type.fields, fields, version, out)
    return bytes(out)


def _encode_struct(spec: list[Field], values: dict, version: int, out: bytearray) -> None:
    tagged = []
    for field in spec:
        if not field.present(version):
            continue
        value = values.get(field.name, field.default)
        if field.tag is not None:
            if value != field.default:
                tagged.append((field.tag, field, value))
            continue
        _encode_value(field, value, version, out)
    write_uvarint(len(tagged), out)
    for tag, field, value in sorted(tagged, key=lambda t: t[0]):
        body = bytearray()
        _encode_value(field, value, version, body)
        write_uvarint(tag, out)
        write_uvarint(len(body), out)
        out += body


def _encode_value(field: Field, value, version: int, out: bytearray) -> None:
    kind = field.type
    if kind in _FIXED:
        out += _FIXED[kind].pack(value)
    elif kind == "string":
        if value is None:
            write_uvarint(0, out)
        else:
            data = value.encode()
            write_uvarint(len(data) + 1, out)
            out += data
    elif kind == "uuid":
        out += value.bytes
    elif kind.startswith("[]"):
        if value is None:
            write_uvarint(0, out)
            return
        write_uvarint(len(value) + 1, out)
        element = kind[2:]
        for item in value:
            if element == "int32":
                out += _INT32.pack(item)
            elif element == "uuid":
                out += item.bytes
            else:
                _encode_struct(STRUCTS[element], item, version, out)
    else:
        raise ValueError(f"unknown field type {kind}")


# --- decoding ---

class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data):
        self.data = memoryview(data)
        self.pos = 0

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos)
        return value

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError("metadata record field runs past the end of the record")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk


def decode_record(value) -> tuple[str, int, dict | None]:
    reader = _Reader(value)
    frame_version = reader.uvarint()
    if frame_version != FRAME_VERSION:
        raise CorruptRecordError(f"unsupported metadata record frame version {frame_version}")
    api_key = reader.uvarint()
    version = reader.uvarint()
    record_type = _BY_KEY.get(api_key)
    if record_type is None:
        return f"Unknown{api_key}", version, None
    if version > record_type.max_version:
        raise CorruptRecordError(f"{record_type.name} version {version} is newer than we read")
    return record_type.name, version, _decode_struct(record_type.fields, version, reader)


def _decode_struct(spec: list[Field], version: int, reader: _Reader) -> dict:
    values = {}
    by_tag = {}
    for field in spec:
        if not field.present(version):
            continue
        if field.tag is not None:
            by_tag[field.tag] = field
            values[field.name] = field.default
        else:
            values[field.name] = _decode_value(field, version, reader)
    for _ in range(reader.uvarint()):
        tag = reader.uvarint()
        size = reader.uvarint()
        body = reader.take(size)
        field = by_tag.get(tag)
        if field is not None:
            values[field.name] = _decode_value(field, version, _Reader(body))
    return values


def _decode_value(field: Field, version: int, reader: _Reader):
    kind = field.type
    if kind in _FIXED:
        codec = _FIXED[kind]
        return codec.unpack(reader.take(codec.size))[0]
    if kind == "string":
        length = reader.uvarint() - 1
        return None if length < 0 else bytes(reader.take(length)).decode()
    if kind == "uuid":
        return uuid.UUID(bytes=bytes(reader.take(16)))
    if kind.startswith("[]"):
        count = reader.uvarint() - 1
        if count < 0:
            return None
        element = kind[2:]
        if element == "int32":
            return list(struct.unpack(f">{count}i", reader.take(4 * count)))
        if element == "uuid":
            return [uuid.UUID(bytes=bytes(reader.take(16))) for _ in range(count)]
        return [_decode_struct(STRUCTS[element], version, reader) for _ in range(count)]
    raise ValueError(f"unknown field type {kind}")


# --- batches ---

def encode_metadata_batch(records: list[tuple[str, dict]], *, base_offset: int, leader_epoch: int,
                          timestamp: int) -> bytes:
    values = [(None, encode_record(name, fields)) for name, fields in records]
    return encode_batch(values, base_offset=base_offset, timestamp=timestamp, leader_epoch=leader_epoch)


def iter_metadata_records(data) -> Iterator[tuple[int, str, dict | None]]:
    """(offset, record type name, fields) of every record, skipping control batches."""
    view = memoryview(data)
    for position, header in iter_batch_headers(view):
        if header.is_control:
            continue
        for record in iter_records(view[position:position + header.size]):
            if record.value is None:
                raise CorruptRecordError(f"metadata record at offset {record.offset} has no value")
            name, _, fields = decode_record(record.value)
            yield record.offset, name, fields
