"""A follower reads its leader's Fetch v12 answers with struct, into tuples of the fields
node.replica_fetcher applies.

Every acks=all write brings each follower one answer, so its cost is part of every write's.
Decoded by kafka.protocol into its data classes, an answer costs more to read, and each field
read after goes through the data class's attribute lookup. The record sets stay memoryviews of
the answer's buffer: nothing is copied.

Tagged fields are read where the follower needs them (a partition's diverging epoch, tag 0) and
skipped otherwise (its current leader and snapshot id, and any tag a later schema adds).
A truncated or malformed answer raises ValueError: the fetcher reconnects, as on any bad answer.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from cluster.formats.records import CorruptRecordError, read_uvarint

# Throttle time, error code, session id.
_ANSWER_FIELDS = struct.Struct(">ihi")
# Partition index, error code, high watermark, last stable offset, log start offset.
_PARTITION_FIELDS = struct.Struct(">ihqqq")
# An aborted transaction: producer id, first offset.
_ABORTED_FIELDS = struct.Struct(">qq")
_PREFERRED_READ_REPLICA = struct.Struct(">i")
# A diverging epoch: epoch, end offset.
_EPOCH_END = struct.Struct(">iq")
_DIVERGING_EPOCH_TAG = 0


class DivergingEpoch(NamedTuple):
    epoch: int
    end_offset: int


# (partition index, error code, high watermark, log start offset, DivergingEpoch or None,
# records or None): plain tuples, since one is made per partition per answer.
FetchedPartition = tuple
# (topic name, [FetchedPartition])
FetchedTopic = tuple


class FetchAnswer(NamedTuple):
    error_code: int
    session_id: int
    responses: list[FetchedTopic]


def read_fetch_answer(body: memoryview) -> FetchAnswer:
    """The Fetch v12 answer in `body` (after the response header)."""
    try:
        return _read_answer(body)
    except (struct.error, IndexError, UnicodeDecodeError, CorruptRecordError) as exc:
        raise ValueError(f"malformed Fetch answer: {exc}") from exc


def _read_answer(body: memoryview) -> FetchAnswer:
    _, error_code, session_id = _ANSWER_FIELDS.unpack_from(body, 0)
    count, pos = _read_count(body, _ANSWER_FIELDS.size)
    topics = []
    for _ in range(count):
        name_size, pos = _read_count(body, pos)
        if name_size < 0:
            raise IndexError("a topic without a name")
        topic = str(body[pos:_within(body, pos + name_size)], "utf-8")
        partition_count, pos = _read_count(body, pos + name_size)
        partitions = []
        for _ in range(partition_count):
            partition, pos = _read_partition(body, pos)
            partitions.append(partition)
        topics.append((topic, partitions))
        pos = _skip_tagged_fields(body, pos)
    _skip_tagged_fields(body, pos)
    return FetchAnswer(error_code, session_id, topics)


def _read_partition(body: memoryview, pos: int) -> tuple[FetchedPartition, int]:
    index, error_code, high_watermark, _, log_start_offset = _PARTITION_FIELDS.unpack_from(body, pos)
    aborted, pos = _read_count(body, pos + _PARTITION_FIELDS.size)
    for _ in range(aborted):
        pos = _skip_tagged_fields(body, pos + _ABORTED_FIELDS.size)
    records_size, pos = _read_count(body, pos + _PREFERRED_READ_REPLICA.size)
    records = None
    if records_size >= 0:
        records = body[pos:_within(body, pos + records_size)]
        pos += records_size
    diverging = None
    if body[pos]:  # (mostly none: one byte, 0)
        diverging, pos = _read_partition_tags(body, pos)
    else:
        pos += 1
    return (index, error_code, high_watermark, log_start_offset, diverging, records), pos


def _read_partition_tags(body: memoryview, pos: int) -> tuple[DivergingEpoch | None, int]:
    diverging = None
    tags, pos = read_uvarint(body, pos)
    for _ in range(tags):
        tag, pos = read_uvarint(body, pos)
        size, pos = read_uvarint(body, pos)
        end = _within(body, pos + size)
        if tag == _DIVERGING_EPOCH_TAG:
            diverging = DivergingEpoch(*_EPOCH_END.unpack_from(body, pos))
        pos = end
    return diverging, pos


def _read_count(body: memoryview, pos: int) -> tuple[int, int]:
    """A compact array's length or a compact string's size: the unsigned varint less one (-1: null)."""
    value = body[pos]
    if value < 0x80:  # one byte: nearly always
        return value - 1, pos + 1
    value, pos = read_uvarint(body, pos)
    return value - 1, pos


def _skip_tagged_fields(body: memoryview, pos: int) -> int:
    if not body[pos]:  # none: one byte, 0
        return pos + 1
    tags, pos = read_uvarint(body, pos)
    for _ in range(tags):
        _, pos = read_uvarint(body, pos)
        size, pos = read_uvarint(body, pos)
        pos = _within(body, pos + size)
    return pos


def _within(body: memoryview, end: int) -> int:
    if end > len(body):
        raise IndexError(f"a field runs to byte {end} of a {len(body)}-byte answer")
    return end
