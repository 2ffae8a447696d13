"""KRaft metadata records, encoded and decoded in Kafka's exact framing.

A record value is: unsigned varint frame version (1), unsigned varint record type,
unsigned varint record version, then the body in Kafka's flexible encoding (compact
strings and arrays, then a tagged-field section). Record keys are null. The field tables
below follow Kafka's metadata record schemas; every body is flexible from version 0.
"""
from __future__ import annotations

import functools
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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
    return {"bool": False, "string": "", "bytes": b"", "uuid": uuid.UUID(int=0), "float64": 0.0}.get(type_, 0)


STRUCTS: dict[str, list[Field]] = {
    "BrokerEndpoint": [F("name", "string"), F("host", "string"), F("port", "uint16"), F("security_protocol", "int16")],
    "BrokerFeature": [F("name", "string"), F("min_supported_version", "int16"), F("max_supported_version", "int16")],
    "EntityData": [F("entity_type", "string"), F("entity_name", "string", nullable=0, default=None)],
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
    # Security: SCRAM credentials, ACLs and client quotas.
    RecordType("UserScramCredentialRecord", 11, 0, [
        F("name", "string"), F("mechanism", "int8"), F("salt", "bytes"), F("stored_key", "bytes"),
        F("server_key", "bytes"), F("iterations", "int32"),
    ]),
    RecordType("RemoveUserScramCredentialRecord", 22, 0, [F("name", "string"), F("mechanism", "int8")]),
    RecordType("AccessControlEntryRecord", 18, 0, [
        F("id", "uuid"), F("resource_type", "int8"), F("resource_name", "string"), F("pattern_type", "int8"),
        F("principal", "string"), F("host", "string"), F("operation", "int8"), F("permission_type", "int8"),
    ]),
    RecordType("RemoveAccessControlEntryRecord", 19, 0, [F("id", "uuid")]),
    RecordType("ClientQuotaRecord", 14, 0, [
        F("entity", "[]EntityData"), F("key", "string"), F("value", "float64"), F("remove", "bool"),
    ]),
]

RECORD_TYPES: dict[str, int] = {t.name: t.api_key for t in _TYPES}
_BY_NAME = {t.name: t for t in _TYPES}
_BY_KEY = {t.api_key: t for t in _TYPES}

# Writers that tell us apart from Kafka: the versions we write by default.
WRITE_VERSIONS = {"RegisterBrokerRecord": 3, "PartitionRecord": 1, "PartitionChangeRecord": 1,
                  "BrokerRegistrationChangeRecord": 1}

_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
          "int32": struct.Struct(">i"), "int64": struct.Struct(">q"), "bool": struct.Struct(">?"),
          "float64": struct.Struct(">d")}
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
    elif kind == "bytes":
        write_uvarint(0 if value is None else len(value) + 1, out)
        if value is not None:
            out += value
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
#
# Each (field table, version) is compiled once into a decoder, a function (data, pos) -> (value,
# end): the field checks and type dispatch are paid once, not per record (a node decodes
# thousands of records for one large topic creation).

Decoder = Callable[[memoryview, int], tuple[Any, int]]
_PAST_END = "metadata record field runs past the end of the record"


def decode_record(value) -> tuple[str, int, dict | None]:
    data = memoryview(value)
    frame_version, pos = read_uvarint(data, 0)
    if frame_version != FRAME_VERSION:
        raise CorruptRecordError(f"unsupported metadata record frame version {frame_version}")
    api_key, pos = read_uvarint(data, pos)
    version, pos = read_uvarint(data, pos)
    record_type = _BY_KEY.get(api_key)
    if record_type is None:
        return f"Unknown{api_key}", version, None
    if version > record_type.max_version:
        raise CorruptRecordError(f"{record_type.name} version {version} is newer than we read")
    fields, _ = _struct_decoder(record_type.name, version)(data, pos)
    return record_type.name, version, fields


def _end_within(data: memoryview, end: int) -> int:
    if end > len(data):
        raise CorruptRecordError(_PAST_END)
    return end


@functools.cache
def _struct_decoder(struct_name: str, version: int) -> Decoder:
    """The decoder of a record type's or struct's body at `version`: its fields in order, then
    its tagged fields, which read as their defaults when absent."""
    spec = [f for f in (_BY_NAME[struct_name].fields if struct_name in _BY_NAME else STRUCTS[struct_name])
            if f.present(version)]
    template = {f.name: f.default for f in spec}
    in_order = [(f.name, _value_decoder(f.type, version)) for f in spec if f.tag is None]
    tagged = {f.tag: (f.name, _value_decoder(f.type, version)) for f in spec if f.tag is not None}

    def decode(data: memoryview, pos: int) -> tuple[dict, int]:
        values = template.copy()
        for name, decode_value in in_order:
            values[name], pos = decode_value(data, pos)
        count, pos = read_uvarint(data, pos)
        for _ in range(count):
            tag, pos = read_uvarint(data, pos)
            size, pos = read_uvarint(data, pos)
            end = _end_within(data, pos + size)
            field = tagged.get(tag)
            if field is not None:
                values[field[0]], _ = field[1](data[pos:end], 0)
            pos = end
        return values, pos

    return decode


def _value_decoder(kind: str, version: int) -> Decoder:
    if kind in _FIXED:
        return _fixed_decoder(_FIXED[kind])
    if kind in _SIMPLE_DECODERS:
        return _SIMPLE_DECODERS[kind]
    if kind.startswith("[]"):
        return _array_decoder(_struct_decoder(kind[2:], version))
    raise ValueError(f"unknown field type {kind}")


def _fixed_decoder(codec: struct.Struct) -> Decoder:
    size, unpack_from = codec.size, codec.unpack_from

    def decode(data: memoryview, pos: int) -> tuple[Any, int]:
        end = _end_within(data, pos + size)
        return unpack_from(data, pos)[0], end

    return decode


def _decode_bytes(data: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_uvarint(data, pos)
    if length == 0:
        return None, pos
    end = _end_within(data, pos + length - 1)
    return bytes(data[pos:end]), end


def _decode_string(data: memoryview, pos: int) -> tuple[str | None, int]:
    length, pos = read_uvarint(data, pos)
    if length == 0:
        return None, pos
    end = _end_within(data, pos + length - 1)
    return str(data[pos:end], "utf-8"), end


@functools.lru_cache(maxsize=4096)
def _uuid(raw: bytes) -> uuid.UUID:
    """A topic's id recurs in each of its partitions' records, and directories are mostly the zero id."""
    return uuid.UUID(bytes=raw)


def _decode_uuid(data: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = _end_within(data, pos + 16)
    return _uuid(bytes(data[pos:end])), end


def _decode_int32_array(data: memoryview, pos: int) -> tuple[list[int] | None, int]:
    count, pos = read_uvarint(data, pos)
    if count == 0:
        return None, pos
    end = _end_within(data, pos + 4 * (count - 1))
    return list(struct.unpack_from(f">{count - 1}i", data, pos)), end


def _decode_uuid_array(data: memoryview, pos: int) -> tuple[list[uuid.UUID] | None, int]:
    count, pos = read_uvarint(data, pos)
    if count == 0:
        return None, pos
    end = _end_within(data, pos + 16 * (count - 1))
    return [_uuid(bytes(data[at:at + 16])) for at in range(pos, end, 16)], end


def _array_decoder(decode_element: Decoder) -> Decoder:
    def decode(data: memoryview, pos: int) -> tuple[list | None, int]:
        count, pos = read_uvarint(data, pos)
        if count == 0:
            return None, pos
        elements = []
        for _ in range(count - 1):
            element, pos = decode_element(data, pos)
            elements.append(element)
        return elements, pos

    return decode


_SIMPLE_DECODERS: dict[str, Decoder] = {
    "string": _decode_string, "bytes": _decode_bytes, "uuid": _decode_uuid, "[]int32": _decode_int32_array, "[]uuid": _decode_uuid_array,
}


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
