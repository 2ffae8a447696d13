"""Transaction markers: the control batches that end a transaction in a partition's log.

A marker is a batch of its own with the transactional and control attributes, the producer's id
and epoch, no sequence, and one record: its key says what kind of control record it is (Kafka's
ControlRecordType: version 0, then ABORT 0 or COMMIT 1), its value which coordinator epoch wrote
it (Kafka's EndTransactionMarker: version 0, coordinator epoch). Readers skip control batches;
the partition's producer state and read_committed fetches act on them.
"""
from __future__ import annotations

import struct

from cluster.formats.records import (
    ATTR_CONTROL, ATTR_TRANSACTIONAL, HEADER_SIZE, NO_SEQUENCE, CorruptRecordError, encode_batch, read_header,
    read_varint,
)

ABORT = 0
COMMIT = 1
LEADER_CHANGE = 2  # written by KRaft's quorum, never in a partition's log
CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
MARKER_ATTRIBUTES = ATTR_TRANSACTIONAL | ATTR_CONTROL

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def end_txn_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                   timestamp: int) -> bytes:
    """One COMMIT or ABORT marker batch, at offset 0 (the log assigns its offset)."""
    key = _KEY.pack(CONTROL_RECORD_KEY_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return encode_batch([(key, value)], timestamp=timestamp, attributes=MARKER_ATTRIBUTES,
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE)


def control_type(data, position: int = 0) -> int:
    """The control record type of the control batch at data[position:]: ABORT, COMMIT, or another
    Kafka type. Reads the first record's key only (control batches are never compressed)."""
    view = memoryview(data)
    header = read_header(view, position)
    if header.compression or header.record_count < 1:
        raise CorruptRecordError("a control batch holds one uncompressed record")
    cursor = position + HEADER_SIZE
    _, cursor = read_varint(view, cursor)  # the record's length
    cursor += 1  # attributes
    _, cursor = read_varint(view, cursor)  # timestamp delta
    _, cursor = read_varint(view, cursor)  # offset delta
    key_length, cursor = read_varint(view, cursor)
    if key_length < _KEY.size or cursor + _KEY.size > position + header.size:
        raise CorruptRecordError("a control record's key is too short")
    return _KEY.unpack_from(view, cursor)[1]


def coordinator_epoch_of(data, position: int = 0) -> int:
    """The coordinator epoch an end-transaction marker at data[position:] carries (-1 if none)."""
    view = memoryview(data)
    header = read_header(view, position)
    cursor = position + HEADER_SIZE
    _, cursor = read_varint(view, cursor)
    cursor += 1
    _, cursor = read_varint(view, cursor)
    _, cursor = read_varint(view, cursor)
    key_length, cursor = read_varint(view, cursor)
    cursor += max(key_length, 0)
    value_length, cursor = read_varint(view, cursor)
    if value_length < _VALUE.size or cursor + _VALUE.size > position + header.size:
        return -1
    return _VALUE.unpack_from(view, cursor)[1]
