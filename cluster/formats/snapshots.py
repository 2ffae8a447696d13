"""Metadata snapshots (KIP-630): `.checkpoint` files in `__cluster_metadata-0`, as Kafka writes them.

A snapshot is named after its id, `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`: it holds
the image as of every record below the end offset, written by the leader of that epoch. The file
is a run of magic-2 record batches whose offsets count from 0: a control batch whose one record
is a SnapshotHeaderRecord (control type 3), batches of metadata records (the records that would
rebuild the image from nothing), and a control batch whose one record is a SnapshotFooterRecord
(control type 4). Control records have Kafka's key (int16 version 0, int16 type) and a value of
the record in its flexible encoding at version 0 with no version prefix (MessageUtil.toByteBuffer).
Every batch carries the snapshot's epoch as its partition leader epoch.

A snapshot is written whole to `<id>-<random>.checkpoint.part`, fsynced, then renamed, as
Kafka's FileRawSnapshotWriter.freeze does; a reader checks every batch's CRC and that the file
begins with the header and ends with the footer, so one cut short or damaged is refused.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import struct
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, NamedTuple

from cluster.formats.compression import decompress
from cluster.formats.files import fsync_directory
from cluster.formats.image import MetadataImage
from cluster.formats.metadata_records import decode_record, encode_record
from cluster.runtime.time_slices import TimeSlice
from cluster.formats.records import (
    ATTR_CONTROL, HEADER_SIZE, CorruptRecordError, encode_batch, frame_records, iter_batch_headers, iter_records,
    read_header, read_varint, seal_batch, validate_batch,
)

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETE_SUFFIX = ".checkpoint.deleted"
OFFSET_WIDTH = 20
EPOCH_WIDTH = 10

# Kafka's ControlRecordType ids and the records' current versions (ControlRecordUtils).
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
SNAPSHOT_HEADER_VERSION = 0
SNAPSHOT_FOOTER_VERSION = 0
CONTROL_RECORD_KEY_VERSION = 0

_CONTROL_KEY = struct.Struct(">hh")
_HEADER_VALUE = struct.Struct(">hqB")  # version, last contained log timestamp, no tagged fields
_FOOTER_VALUE = struct.Struct(">hB")  # version, no tagged fields

# Kafka's error codes of FetchSnapshot.
SNAPSHOT_NOT_FOUND = 98
POSITION_OUT_OF_RANGE = 99

# Kafka's defaults for metadata.log.max.record.bytes.between.snapshots and metadata.log.max.snapshot.interval.ms.
SNAPSHOT_BYTES_DEFAULT = 20 * 1024 * 1024
SNAPSHOT_INTERVAL_MS_DEFAULT = 60 * 60 * 1000

# Records per batch of a snapshot's body.
RECORDS_PER_BATCH = 1000

# A PartitionRecord's value: frame version 1, type 3, version, then partition id (int32) and topic id
# (uuid) at fixed places; what follows (replicas, ISR, leader, epochs) repeats across partitions.
_PARTITION_RECORD_PREFIX = b"\x01\x03"
_PARTITION_TAIL = 2 + 1 + 4 + 16
_PARTITION_ID = struct.Struct(">i")
# The fields image_records gives a PartitionRecord.
_PARTITION_FIELDS = {"partition_id", "topic_id", "replicas", "isr", "removing_replicas", "adding_replicas", "leader",
                     "leader_recovery_state", "leader_epoch", "partition_epoch"}


class SnapshotId(NamedTuple):
    end_offset: int  # the offset after the last record the snapshot holds
    epoch: int

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1


class CorruptSnapshotError(Exception):
    """A snapshot file that is cut short, damaged or not a snapshot."""


def snapshot_settings(config) -> tuple[int, float]:
    """(bytes written between snapshots, seconds between snapshots) from a broker config's
    metadata.log.max.record.bytes.between.snapshots and metadata.log.max.snapshot.interval.ms."""
    between = config.get("metadata.log.max.record.bytes.between.snapshots").strip()
    interval = config.get("metadata.log.max.snapshot.interval.ms").strip()
    return (int(between) if between else SNAPSHOT_BYTES_DEFAULT,
            (int(interval) if interval else SNAPSHOT_INTERVAL_MS_DEFAULT) / 1000)


# --- file names ---

def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:0{OFFSET_WIDTH}d}-{snapshot_id.epoch:0{EPOCH_WIDTH}d}{SUFFIX}"


def parse_snapshot_name(name: str) -> SnapshotId | None:
    """The id of a finished snapshot's file name (`.part` and `.deleted` files are not snapshots)."""
    if not name.endswith(SUFFIX) or len(name) != OFFSET_WIDTH + 1 + EPOCH_WIDTH + len(SUFFIX):
        return None
    offset, dash, epoch = name[:OFFSET_WIDTH], name[OFFSET_WIDTH], name[OFFSET_WIDTH + 1:-len(SUFFIX)]
    if dash != "-" or not offset.isdigit() or not epoch.isdigit():
        return None
    return SnapshotId(int(offset), int(epoch))


def list_snapshots(directory) -> list[SnapshotId]:
    """The snapshots of a metadata log directory, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    ids = (parse_snapshot_name(entry.name) for entry in os.scandir(directory))
    return sorted(snapshot_id for snapshot_id in ids if snapshot_id is not None)


def snapshot_path(directory, snapshot_id: SnapshotId) -> Path:
    return Path(directory) / snapshot_file_name(snapshot_id)


def delete_snapshots_before(directory, snapshot_id: SnapshotId) -> list[SnapshotId]:
    """Delete every snapshot older than snapshot_id, and partial files a crash left; returns the ids deleted."""
    directory = Path(directory)
    for leftover in directory.glob("*" + PARTIAL_SUFFIX):
        leftover.unlink(missing_ok=True)
    older = [s for s in list_snapshots(directory) if s < snapshot_id]
    for old in older:
        snapshot_path(directory, old).unlink(missing_ok=True)
    return older


# --- writing ---

def control_batch(control_type: int, value: bytes, *, base_offset: int, epoch: int, timestamp: int) -> bytes:
    """A control batch of one record, as Kafka's MemoryRecordsBuilder writes one for KRaft."""
    key = _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)
    return encode_batch([(key, value)], base_offset=base_offset, timestamp=timestamp, leader_epoch=epoch,
                        attributes=ATTR_CONTROL)


def header_batch(epoch: int, last_contained_log_timestamp: int, timestamp: int) -> bytes:
    value = _HEADER_VALUE.pack(SNAPSHOT_HEADER_VERSION, last_contained_log_timestamp, 0)
    return control_batch(SNAPSHOT_HEADER, value, base_offset=0, epoch=epoch, timestamp=timestamp)


def footer_batch(base_offset: int, epoch: int, timestamp: int) -> bytes:
    value = _FOOTER_VALUE.pack(SNAPSHOT_FOOTER_VERSION, 0)
    return control_batch(SNAPSHOT_FOOTER, value, base_offset=base_offset, epoch=epoch, timestamp=timestamp)


class SnapshotBuilder:
    """The bytes of one snapshot file, built a slice of records at a time (a caller on an event loop
    gives way between slices); `finish` adds the footer."""

    def __init__(self, snapshot_id: SnapshotId, last_contained_log_timestamp: int = 0,
                 now_ms: int | None = None):
        self.snapshot_id = snapshot_id
        self.timestamp = int(time.time() * 1000) if now_ms is None else now_ms
        self.data = bytearray(header_batch(snapshot_id.epoch, last_contained_log_timestamp, self.timestamp))
        self.next_offset = 1
        self._body = bytearray()
        self._count = 0
        self._partition_tails: dict[tuple, tuple[bytes, bytes]] = {}

    def add(self, records: list[tuple[str, dict]]) -> None:
        start = 0
        while start < len(records):
            chunk = records[start:start + RECORDS_PER_BATCH - self._count]
            frame_records([(None, self._encode(name, fields)) for name, fields in chunk], self._count, self._body)
            self._count += len(chunk)
            start += len(chunk)
            if self._count == RECORDS_PER_BATCH:
                self._seal()

    def _encode(self, name: str, fields: dict) -> bytes:
        """encode_record, with the part of a PartitionRecord after its partition and topic ids encoded
        once per distinct replica set and epochs (most of a large snapshot's encoding otherwise)."""
        if name != "PartitionRecord" or fields.keys() != _PARTITION_FIELDS:
            return encode_record(name, fields)
        key = (tuple(fields["replicas"]), tuple(fields["isr"]), tuple(fields["removing_replicas"]),
               tuple(fields["adding_replicas"]), fields["leader"], fields["leader_recovery_state"],
               fields["leader_epoch"], fields["partition_epoch"])
        parts = self._partition_tails.get(key)
        if parts is None:
            value = encode_record(name, fields)
            parts = self._partition_tails[key] = (value[:3], value[_PARTITION_TAIL:])
        return parts[0] + _PARTITION_ID.pack(fields["partition_id"]) + fields["topic_id"].bytes + parts[1]

    def _seal(self) -> None:
        if self._count:
            self.data += seal_batch(self._body, self._count, base_offset=self.next_offset,
                                    leader_epoch=self.snapshot_id.epoch, timestamp=self.timestamp)
            self.next_offset += self._count
            self._body, self._count = bytearray(), 0

    def finish(self) -> bytes:
        self._seal()
        self.data += footer_batch(self.next_offset, self.snapshot_id.epoch, self.timestamp)
        return bytes(self.data)


def write_snapshot_file(directory, snapshot_id: SnapshotId, data: bytes) -> Path:
    """Write a snapshot's bytes as Kafka does: to a `.checkpoint.part` file, fsynced, made read-only,
    then renamed to its name (and the directory fsynced, so the rename survives a crash)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    prefix = snapshot_file_name(snapshot_id)[:-len(SUFFIX)] + "-"
    fd, temp = tempfile.mkstemp(prefix=prefix, suffix=PARTIAL_SUFFIX, dir=directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp)
        raise
    os.close(fd)
    os.chmod(temp, 0o444)
    destination = snapshot_path(directory, snapshot_id)
    os.replace(temp, destination)
    fsync_directory(directory)
    return destination


async def keep_snapshot(partition_log, snapshot_id: SnapshotId, data: bytes, trim_log: bool = True) -> None:
    """Write a snapshot of a metadata PartitionLog (in a thread), then (with `trim_log`) let the log
    start at its end, and delete the snapshots before it. The log was rolled at the snapshot's end,
    so whole segments go."""
    await asyncio.to_thread(write_snapshot_file, partition_log.directory, snapshot_id, data)
    if trim_log:
        partition_log.advance_log_start_offset(snapshot_id.end_offset)
    delete_snapshots_before(partition_log.directory, snapshot_id)


# --- reading ---

class Snapshot(NamedTuple):
    snapshot_id: SnapshotId
    last_contained_log_timestamp: int
    data: memoryview  # the file's batches: control batches are skipped by iter_metadata_records

    def records(self) -> Iterator[tuple[int, str, dict | None]]:
        """(offset within the snapshot, record type, fields) of every metadata record."""
        return _records_sharing_partition_tails(self.data)


def read_snapshot_file(path) -> Snapshot:
    path = Path(path)
    snapshot_id = parse_snapshot_name(path.name)
    if snapshot_id is None:
        raise CorruptSnapshotError(f"{path.name} is not a snapshot file name")
    return parse_snapshot(path.read_bytes(), snapshot_id, path.name)


def load_latest_snapshot(directory, min_end_offset: int = 0,
                         on_refused=None) -> tuple[SnapshotId, MetadataImage] | None:
    """The newest snapshot of directory that reads whole (every batch and record), among those ending
    at min_end_offset or later, replayed into a new image; on_refused(error) hears of each newer one
    skipped because it is cut short or damaged."""
    for snapshot_id in reversed(list_snapshots(directory)):
        if snapshot_id.end_offset < min_end_offset:
            return None
        path = snapshot_path(directory, snapshot_id)
        try:
            image = MetadataImage()
            replay_snapshot(read_snapshot_file(path), image)
            return snapshot_id, image
        except (CorruptSnapshotError, OSError) as exc:
            error = exc
        except CorruptRecordError as exc:
            error = CorruptSnapshotError(f"{path.name}: {exc}")
        if on_refused is not None:
            on_refused(error)
    return None


def parse_snapshot(data, snapshot_id: SnapshotId, name: str = "snapshot") -> Snapshot:
    """Check a snapshot's bytes whole (every batch's CRC, offsets from 0, the header first, the
    footer last and nothing after it); a CorruptSnapshotError says what is wrong."""
    view = memoryview(data)
    position, next_offset, header_timestamp, footer_seen = 0, 0, None, False
    while position < len(view):
        if footer_seen:
            raise CorruptSnapshotError(f"{name}: {len(view) - position} bytes after the snapshot footer")
        if len(view) - position < HEADER_SIZE:
            raise CorruptSnapshotError(f"{name} is cut short: {len(view) - position} bytes of a batch header "
                                       f"at byte {position}")
        header = read_header(view, position)
        if header.batch_length < HEADER_SIZE - 12 or position + header.size > len(view):
            raise CorruptSnapshotError(f"{name} is cut short: the batch at byte {position} needs {header.size} "
                                       f"bytes, {len(view) - position} remain")
        try:
            validate_batch(view, position, position + header.size)
        except CorruptRecordError as exc:
            raise CorruptSnapshotError(f"{name}: the batch at byte {position} is corrupt: {exc}") from None
        if header.base_offset != next_offset:
            raise CorruptSnapshotError(f"{name}: batch at byte {position} starts at offset {header.base_offset}, "
                                       f"expected {next_offset}")
        if header_timestamp is None:
            header_timestamp = _control_value(view, position, header, SNAPSHOT_HEADER, name)[1]
        elif header.is_control:
            _control_value(view, position, header, SNAPSHOT_FOOTER, name)
            footer_seen = True
        next_offset = header.next_offset
        position += header.size
    if header_timestamp is None:
        raise CorruptSnapshotError(f"{name} is empty")
    if not footer_seen:
        raise CorruptSnapshotError(f"{name} is cut short: no snapshot footer")
    return Snapshot(snapshot_id, header_timestamp, view)


def _control_value(view: memoryview, position: int, header, expected_type: int, name: str) -> tuple:
    what = "header" if expected_type == SNAPSHOT_HEADER else "footer"
    if not header.is_control or header.record_count != 1:
        raise CorruptSnapshotError(f"{name}: expected the snapshot {what} control batch at byte {position}")
    record = next(iter_records(view[position:position + header.size]))
    if record.key is None or len(record.key) != _CONTROL_KEY.size or record.value is None:
        raise CorruptSnapshotError(f"{name}: the snapshot {what} record has no key or value")
    _, control_type = _CONTROL_KEY.unpack(record.key)
    layout = _HEADER_VALUE if expected_type == SNAPSHOT_HEADER else _FOOTER_VALUE
    if control_type != expected_type or len(record.value) < layout.size:
        raise CorruptSnapshotError(f"{name}: expected the snapshot {what} record, found control type {control_type}")
    return layout.unpack_from(record.value)


def _records_sharing_partition_tails(data) -> Iterator[tuple[int, str, dict | None]]:
    """iter_metadata_records, decoding each distinct PartitionRecord tail once: the partitions of a
    cluster share a handful of replica sets and epochs, and decoding them is most of a load's time."""
    decoded_tails: dict[bytes, dict] = {}
    topic_ids: dict[bytes, uuid.UUID] = {}
    for offset, value in _record_values(data):
        if value[:2] != _PARTITION_RECORD_PREFIX or len(value) <= _PARTITION_TAIL:
            name, _, fields = decode_record(value)
            yield offset, name, fields
            continue
        tail = value[2:3] + value[_PARTITION_TAIL:]
        shared = decoded_tails.get(tail)
        if shared is None:
            shared = decoded_tails[tail] = decode_record(value)[2]
        fields = shared.copy()
        fields["partition_id"] = _PARTITION_ID.unpack_from(value, 3)[0]
        raw_id = value[7:_PARTITION_TAIL]
        topic_id = topic_ids.get(raw_id)
        if topic_id is None:
            topic_id = topic_ids[raw_id] = uuid.UUID(bytes=raw_id)
        fields["topic_id"] = topic_id
        yield offset, "PartitionRecord", fields


def _record_values(data) -> Iterator[tuple[int, bytes]]:
    """(offset, value) of every record of the data batches, read with the one-byte varints that
    frame metadata records inline (iter_records builds a Record with timestamp, key and headers for
    each, a third of a load's time). Kafka may write a snapshot's batches compressed."""
    whole = bytes(data)
    for position, header in iter_batch_headers(whole):
        if header.is_control:
            continue
        start, end, batch = position + HEADER_SIZE, position + header.size, whole
        if header.compression:
            batch = decompress(header.compression, memoryview(whole)[start:end])
            start, end = 0, len(batch)
        try:
            yield from _batch_values(batch, start, end, header)
        except IndexError:
            raise CorruptRecordError(f"a record of the batch at offset {header.base_offset} runs past its end") from None


def _batch_values(data: bytes, pos: int, end: int, header) -> Iterator[tuple[int, bytes]]:
    base_offset = header.base_offset
    for _ in range(header.record_count):
        length, pos = _short_varint(data, pos)
        record_end = pos + length
        _, cursor = _short_varint(data, pos + 1)  # after the attributes: the timestamp delta
        offset_delta, cursor = _short_varint(data, cursor)
        key_length, cursor = _short_varint(data, cursor)
        value_length, cursor = _short_varint(data, cursor + max(key_length, 0))
        if record_end > end or cursor + value_length > record_end:
            raise CorruptRecordError(f"metadata record at offset {base_offset + offset_delta} runs past its batch")
        if value_length < 0:
            raise CorruptRecordError(f"metadata record at offset {base_offset + offset_delta} has no value")
        yield base_offset + offset_delta, data[cursor:cursor + value_length]
        pos = record_end


def _short_varint(data: bytes, pos: int) -> tuple[int, int]:
    """read_varint, with the one- and two-byte varints that frame records read inline."""
    first = data[pos]
    if first < 0x80:
        return (first >> 1) ^ -(first & 1), pos + 1
    second = data[pos + 1]
    if second < 0x80:
        raw = (first & 0x7F) | (second << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2
    return read_varint(data, pos)


def replay_snapshot(snapshot: Snapshot, image: MetadataImage) -> None:
    """Rebuild an empty image from a snapshot: its offset becomes the snapshot's last contained offset."""
    for _, name, fields in snapshot.records():
        image.apply(snapshot.snapshot_id.last_offset, name, fields)
    image.offset = snapshot.snapshot_id.last_offset


# --- the records that rebuild an image ---

def image_records(image: MetadataImage) -> Iterator[tuple[str, dict]]:
    """The records that recreate `image` in an empty one, in the order Kafka's MetadataImage.write
    writes them: features, brokers, topics and partitions, configs, client quotas, producer ids, ACLs,
    SCRAM credentials."""
    for name, level in sorted(image.features.items(), key=lambda item: item[0] != "metadata.version"):
        yield "FeatureLevelRecord", {"name": name, "feature_level": level}
    for broker in sorted(image.brokers.values(), key=lambda b: b.node_id):
        yield "RegisterBrokerRecord", _broker_fields(broker)
    for topic in list(image.topics.values()):
        yield "TopicRecord", {"name": topic.name, "topic_id": topic.topic_id}
        for partition in list(topic.partitions.values()):
            yield "PartitionRecord", {
                "partition_id": partition.partition, "topic_id": topic.topic_id, "replicas": partition.replicas,
                "isr": partition.isr, "removing_replicas": partition.removing_replicas,
                "adding_replicas": partition.adding_replicas, "leader": partition.leader,
                "leader_recovery_state": partition.leader_recovery_state, "leader_epoch": partition.leader_epoch,
                "partition_epoch": partition.partition_epoch,
            }
    for (resource_type, resource_name), configs in list(image.configs.items()):
        for name, value in list(configs.items()):
            yield "ConfigRecord", {"resource_type": resource_type, "resource_name": resource_name, "name": name,
                                   "value": value}
    for entity, quotas in list(image.client_quotas.items()):
        for key, value in list(quotas.items()):
            yield "ClientQuotaRecord", {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                                        "key": key, "value": value, "remove": False}
    if image.next_producer_id > 0:
        yield "ProducerIdsRecord", {"broker_id": -1, "broker_epoch": -1, "next_producer_id": image.next_producer_id}
    for acl_id, acl in list(image.acls.items()):
        yield "AccessControlEntryRecord", {
            "id": acl_id, "resource_type": acl.resource_type, "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation, "permission_type": acl.permission_type}
    for user, credentials in list(image.scram_credentials.items()):
        for mechanism, credential in list(credentials.items()):
            yield "UserScramCredentialRecord", {
                "name": user, "mechanism": mechanism, "salt": credential.salt, "stored_key": credential.stored_key,
                "server_key": credential.server_key, "iterations": credential.iterations}


def _broker_fields(broker) -> dict:
    return {
        "broker_id": broker.node_id, "incarnation_id": broker.incarnation_id, "broker_epoch": broker.broker_epoch,
        "end_points": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                       for e in broker.endpoints],
        "rack": broker.rack, "fenced": broker.fenced, "in_controlled_shutdown": broker.in_controlled_shutdown,
    }


async def encode_image_gently(image: MetadataImage, snapshot_id: SnapshotId, last_contained_log_timestamp: int = 0,
                              slice_records: int = 100) -> bytes:
    """The snapshot of image, encoded slice_records at a time with the event loop given its way
    between slices; the caller keeps the image from changing meanwhile."""
    builder = SnapshotBuilder(snapshot_id, last_contained_log_timestamp)
    records = image_records(image)
    time_slice = TimeSlice()
    while chunk := list(itertools.islice(records, slice_records)):
        builder.add(chunk)
        await time_slice.give_way()
    return builder.finish()


def snapshot_of(image: MetadataImage, epoch: int, now_ms: int | None = None) -> tuple[SnapshotId, bytes]:
    """A whole snapshot of image at once (tools, tests; the controller builds one in slices)."""
    snapshot_id = SnapshotId(image.offset + 1, epoch)
    builder = SnapshotBuilder(snapshot_id, now_ms=now_ms)
    builder.add(list(image_records(image)))
    return snapshot_id, builder.finish()
