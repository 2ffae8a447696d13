"""Compaction of a partition log's segments, as Kafka's LogCleaner does it: file in, file out.

A cleaning reads the dirty part of the log (from the cleaner's checkpoint to the first offset it
may not clean yet, never past the last stable offset) into an offset map (key -> the offset of its
latest record), then rewrites the segments from the log start up to where the map ends, keeping a
record only if it is the latest of its key (or lies past the map). Surviving records keep their
offsets: a batch keeps its base and last offset, its sequence numbers and its timestamps, and only
loses records, so gaps appear between offsets, as on Kafka. A batch left without records is
dropped, unless it is its producer's last, which stays as an empty batch so that the producer's
sequence and epoch survive (Kafka's RETAIN_EMPTY). Keyless records are dropped, as Kafka drops them.

Delete horizons, as KIP-534 (Kafka 3.1 on) keeps them: the first cleaning that keeps a tombstone
as its key's latest record, or finds a transaction marker with nothing of its transaction left,
stamps its batch with a delete horizon, the cleaning's time plus delete.retention.ms (attribute
0x40; the horizon is the batch's base timestamp, and record timestamps are kept through their
deltas). A later cleaning past that horizon removes the tombstone, or the marker.

Transactions (cleaner_transactions): the records of aborted transactions, found from the
aborted-transaction indexes, never enter the offset map and are removed; a marker stays while any
batch of its transaction is left.

Each group of consecutive segments (at most segment.bytes together) becomes one `<base>.log.cleaned`
file, with its indexes and an aborted-transaction index holding the entries of the ABORT markers it
keeps for records it still holds; the log swaps it in (cleaned_segments.swap_cleaned). Everything
here runs in a worker process (node.log_cleaner): it reads and writes files only, at most
`io_bytes_per_s`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

from cluster.formats.cleaner_transactions import CleanedTransactions
from cluster.formats.compression import compress, decompress
from cluster.formats.records import (
    ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, HEADER_SIZE, BatchHeader,
    iter_batch_headers, read_header, seal_batch,
)
from cluster.formats.segment import Segment, segment_file_name
from cluster.formats.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, encode_entries, read_entries
from cluster.formats.varints import read_varint, write_varint

CLEANED = ".cleaned"  # a cleaned segment's files, written beside the log: <base>.log.cleaned, ...
SWAP = ".swap"  # ... renamed so once complete: a log opened with them present finishes the swap
# The .log last: renamed last, its .swap is there only once every index's is (see cleaned_segments).
INDEX_SUFFIXES = (".index", ".timeindex", TXN_INDEX_SUFFIX)
SEGMENT_SUFFIXES = INDEX_SUFFIXES + (".log",)
READ_CHUNK_BYTES = 1 << 20
OFFSET_MAP_ENTRY_BYTES = 24  # Kafka's SkimpyOffsetMap: a 16-byte hash and an 8-byte offset
OFFSET_MAP_LOAD_FACTOR = 0.9


@dataclass
class SegmentFile:
    base_offset: int
    path: Path
    size: int
    modified_ms: int


class ProducerLastRecord(NamedTuple):
    """What the partition's producer state says of a producer (Kafka's LastRecord): the last offset of
    its last data batch (-1 when it has none since its epoch began), and its epoch."""
    data_offset: int
    epoch: int


@dataclass
class CleaningJob:
    """What the log hands the worker: its segments below the first uncleanable offset (a segment's
    base, at most the last stable offset), in order."""
    segments: list[SegmentFile]
    first_dirty_offset: int
    first_uncleanable_offset: int
    segment_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    producers: dict[int, ProducerLastRecord]  # the partition's producers, by id
    max_map_keys: int
    io_bytes_per_s: float
    # The .txnindex files of the segments from the first uncleanable offset on: a transaction whose
    # records are cleaned may have its ABORT marker, and so its entry, there.
    later_txn_indexes: list[Path] = field(default_factory=list)
    now_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass
class CleanedGroup:
    """A cleaned segment's files (`<base>.log.cleaned` and its indexes) and what they replace."""
    directory: Path
    source_bases: list[int]  # the segments it replaces, the first being its own base
    modified_ms: int

    def path(self, suffix: str, state: str = CLEANED) -> Path:
        return self.directory / (segment_file_name(self.source_bases[0], suffix) + state)


@dataclass
class CleaningResult:
    groups: list[CleanedGroup]
    cleaned_up_to: int  # the next cleaning's first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0


class Throttle:
    """At most bytes_per_s of I/O, as Kafka's cleaner Throttler: a sleep when it runs ahead."""

    def __init__(self, bytes_per_s: float):
        self.bytes_per_s = bytes_per_s
        self.started = time.monotonic()
        self.done = 0

    def account(self, count: int) -> None:
        self.done += count
        if self.bytes_per_s <= 0 or self.bytes_per_s == float("inf"):
            return
        ahead_s = self.done / self.bytes_per_s - (time.monotonic() - self.started)
        if ahead_s > 0:
            time.sleep(ahead_s)


# --- reading ---

def batches(path: Path, throttle: Throttle) -> Iterator[tuple[bytes, BatchHeader]]:
    """Every whole batch of a segment file, with its header, reading it a chunk at a time."""
    with open(path, "rb") as segment:
        pending = b""
        while True:
            chunk = segment.read(READ_CHUNK_BYTES)
            throttle.account(len(chunk))
            data = pending + chunk
            used = 0
            for position, header in iter_batch_headers(data):
                yield data[position:position + header.size], header
                used = position + header.size
            pending = data[used:]
            if not chunk:
                return


def records_body(batch: bytes, header: BatchHeader) -> bytes:
    body = batch[HEADER_SIZE:]
    return decompress(header.compression, body) if header.compression else body


def record_spans(body: bytes, header: BatchHeader) -> Iterator[tuple[int, int, int, int, bytes | None, bool]]:
    """(start, end, offset, timestamp, key, is_tombstone) of each record, without decoding headers."""
    cursor = 0
    for _ in range(header.record_count):
        start = cursor
        length, cursor = read_varint(body, cursor)
        end = cursor + length
        cursor += 1  # attributes
        timestamp_delta, cursor = read_varint(body, cursor)
        offset_delta, cursor = read_varint(body, cursor)
        key_length, cursor = read_varint(body, cursor)
        key = None
        if key_length >= 0:
            key = body[cursor:cursor + key_length]
            cursor += key_length
        value_length, cursor = read_varint(body, cursor)
        yield start, end, header.base_offset + offset_delta, header.base_timestamp + timestamp_delta, key, \
            value_length < 0
        cursor = end


def has_keyless_record(data, max_decompressed_bytes: int) -> bool:
    """Whether any record of these batches lacks a key, which a compacted topic refuses (Kafka's
    LogValidator); DecompressedTooLargeError past max_decompressed_bytes, CorruptRecordError."""
    view = memoryview(data)
    for position, header in iter_batch_headers(view):
        body = view[position + HEADER_SIZE:position + header.size]
        if header.compression:
            body = decompress(header.compression, body, max_size=max_decompressed_bytes)
        if any(key is None for _, _, _, _, key, _ in record_spans(body, header)):
            return True
    return False


# --- the offset map ---

@dataclass
class OffsetMap:
    latest: dict[bytes, int]
    latest_offset: int  # the last offset put: records after it are kept whatever their key
    end_offset: int  # the map covers [first dirty offset, end_offset)


def build_offset_map(job: CleaningJob, throttle: Throttle, aborted: list[AbortedTxn]) -> OffsetMap:
    """Keys of the dirty segments to their latest offsets, leaving out the records of aborted
    transactions (`aborted`: the log's aborted-transaction index entries); it stops at a segment
    boundary once max_map_keys is reached (the rest is the next cleaning's), as Kafka's buildOffsetMap."""
    latest: dict[bytes, int] = {}
    latest_offset = -1
    end_offset = job.first_dirty_offset
    dirty = [(s, _segment_end(job, i)) for i, s in enumerate(job.segments)
             if _segment_end(job, i) > job.first_dirty_offset and s.base_offset < job.first_uncleanable_offset]
    transactions = CleanedTransactions(aborted, dirty[0][0].base_offset if dirty else 0)
    for segment, segment_end in dirty:
        if latest and len(latest) >= job.max_map_keys:
            break
        for batch, header in batches(segment.path, throttle):
            if header.base_offset >= job.first_uncleanable_offset:
                break
            if header.is_control:
                transactions.on_marker(header, batch)
                continue
            if transactions.on_batch(header) or header.next_offset <= job.first_dirty_offset:
                continue  # aborted (its keys must shadow nothing), or not dirty
            for _, _, offset, _, key, _ in record_spans(records_body(batch, header), header):
                if key is not None and offset >= job.first_dirty_offset:
                    latest[key] = offset
                    latest_offset = max(latest_offset, offset)
        end_offset = min(segment_end, job.first_uncleanable_offset)
    return OffsetMap(latest, latest_offset, end_offset)


def aborted_transactions(job: CleaningJob) -> list[AbortedTxn]:
    """Every entry of the log's aborted-transaction indexes, from its first segment on."""
    paths = [_txn_index_path(segment) for segment in job.segments] + list(job.later_txn_indexes)
    return [entry for path in paths for entry in read_entries(path)]


def _segment_end(job: CleaningJob, index: int) -> int:
    return job.segments[index + 1].base_offset if index + 1 < len(job.segments) else job.first_uncleanable_offset


# --- cleaning ---

def clean(job: CleaningJob) -> CleaningResult:
    """Clean the job's log; the cleaned files are left beside the segments for the log to swap in."""
    throttle = Throttle(job.io_bytes_per_s)
    aborted = aborted_transactions(job)
    offset_map = build_offset_map(job, throttle, aborted)
    result = CleaningResult([], offset_map.end_offset)
    if offset_map.end_offset <= job.first_dirty_offset:
        return result
    to_clean = [s for i, s in enumerate(job.segments) if _segment_end(job, i) <= offset_map.end_offset]
    # One walk through every group, from the log's first batch: a transaction may span groups.
    transactions = CleanedTransactions(aborted)
    for group in _groups(to_clean, job.segment_bytes):
        result.groups.append(_clean_group(group, job, offset_map, transactions, throttle, result))
    return result


def _groups(segments: list[SegmentFile], segment_bytes: int) -> list[list[SegmentFile]]:
    """Consecutive segments, at most segment_bytes together (each at least one segment)."""
    groups: list[list[SegmentFile]] = []
    for segment in segments:
        if groups and sum(s.size for s in groups[-1]) + segment.size <= segment_bytes:
            groups[-1].append(segment)
        else:
            groups.append([segment])
    return groups


def _clean_group(group: list[SegmentFile], job: CleaningJob, offset_map: OffsetMap,
                 transactions: CleanedTransactions, throttle: Throttle, result: CleaningResult) -> CleanedGroup:
    cleaned = CleanedGroup(group[0].path.parent, [s.base_offset for s in group], max(s.modified_ms for s in group))
    indexes = Segment(cleaned.directory, group[0].base_offset)  # its index entries only: no file is opened
    with open(cleaned.path(".log"), "wb") as out:
        for segment in group:
            for batch, header in batches(segment.path, throttle):
                result.bytes_read += len(batch)
                kept = _kept_batch(batch, header, job, offset_map, transactions, result)
                if kept:
                    indexes.track_batch(indexes.size, read_header(kept), job.index_interval_bytes)
                    out.write(kept)
                    throttle.account(len(kept))
                    result.bytes_written += len(kept)
        out.flush()
        os.fsync(out.fileno())
    indexes.maybe_add_time_entry()
    _write_synced(cleaned.path(".index"), indexes.index_bytes())
    _write_synced(cleaned.path(".timeindex"), indexes.time_index_bytes())
    aborted = transactions.take_kept_entries()  # those of the ABORT markers this group keeps
    if aborted:  # (lazy, as every .txnindex: none without an entry)
        _write_synced(cleaned.path(TXN_INDEX_SUFFIX), encode_entries(aborted))
    return cleaned


def _txn_index_path(segment: SegmentFile) -> Path:
    return segment.path.with_name(segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX))


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _kept_batch(batch: bytes, header: BatchHeader, job: CleaningJob, offset_map: OffsetMap,
                transactions: CleanedTransactions, result: CleaningResult) -> bytes:
    """What is left of one batch: itself, a batch of its surviving records, an empty batch, or nothing."""
    if header.is_control:
        return _kept_marker(batch, header, job, transactions)
    if transactions.on_batch(header):  # aborted: none of its records stays
        result.records_read += header.record_count
        return _empty(header) if _last_of_producer(header, job.producers) else b""
    body = records_body(batch, header)
    horizon = header.delete_horizon_ms
    tombstones_expired = horizon is not None and horizon <= job.now_ms
    spans = []
    tombstones = False
    for start, end, offset, timestamp, key, tombstone in record_spans(body, header):
        result.records_read += 1
        if key is None:
            continue
        if offset > offset_map.latest_offset or (offset >= offset_map.latest.get(key, -1)
                                                 and not (tombstone and tombstones_expired)):
            spans.append((start, end, timestamp))
            tombstones = tombstones or tombstone
    result.records_kept += len(spans)
    if tombstones and horizon is None:  # a tombstone kept for the first time: it goes after delete.retention.ms
        return _rebuilt(header, body, spans, delete_horizon_ms=job.now_ms + job.delete_retention_ms)
    if len(spans) == header.record_count:
        return batch
    if spans:
        return _rebuilt(header, body, spans)
    return _empty(header) if _last_of_producer(header, job.producers) else b""


def _kept_marker(batch: bytes, header: BatchHeader, job: CleaningJob, transactions: CleanedTransactions) -> bytes:
    """A transaction marker stays while its transaction has batches left. Once it has none it is
    stamped with a delete horizon, and removed by the first cleaning after that (Kafka's
    checkBatchRetention for control batches); a producer's last marker stays, as an empty batch."""
    needless = transactions.on_marker(header, batch)
    horizon = header.delete_horizon_ms
    if header.record_count == 0 or (needless and horizon is not None and horizon <= job.now_ms):
        return _empty(header) if _last_of_producer(header, job.producers) else b""
    if needless and horizon is None:
        body = records_body(batch, header)
        spans = [(start, end, timestamp) for start, end, _, timestamp, _, _ in record_spans(body, header)]
        return _rebuilt(header, body, spans, delete_horizon_ms=job.now_ms + job.delete_retention_ms)
    return batch


def _last_of_producer(header: BatchHeader, producers: dict[int, ProducerLastRecord]) -> bool:
    """Whether the batch holds what the producer state needs of its producer (Kafka's
    isBatchLastRecordOfProducer): its last data batch, or, when it has none since its epoch began,
    a marker of its current epoch (which fences older ones)."""
    last = producers.get(header.producer_id) if header.producer_id >= 0 else None
    if last is None:
        return False
    if last.data_offset >= 0:
        return header.last_offset == last.data_offset
    return header.is_control and header.producer_epoch == last.epoch


def _rebuilt(header: BatchHeader, body: bytes, spans: list[tuple[int, int, int]],
             delete_horizon_ms: int | None = None) -> bytes:
    """The batch with only these records, at their offsets: same base and last offset, producer,
    sequence and timestamps (Kafka's buildRetainedRecordsInto with overrideLastOffset). With
    delete_horizon_ms, the batch's base timestamp becomes that horizon (KIP-534) and each record's
    timestamp delta is rewritten to keep its timestamp."""
    if delete_horizon_ms is None:
        records = b"".join(body[start:end] for start, end, _ in spans)
        base_timestamp, attributes = header.base_timestamp, header.attributes
    else:
        records = b"".join(_retimed(body[start:end], timestamp - delete_horizon_ms) for start, end, timestamp in spans)
        base_timestamp, attributes = delete_horizon_ms, header.attributes | ATTR_DELETE_HORIZON
    if header.compression:
        records = compress(header.compression, records)
    max_timestamp = header.max_timestamp if header.uses_log_append_time else max(t for _, _, t in spans)
    return seal_batch(records, len(spans), base_offset=header.base_offset, timestamp=base_timestamp,
                      max_timestamp=max_timestamp, leader_epoch=header.partition_leader_epoch,
                      attributes=attributes, producer_id=header.producer_id,
                      producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                      last_offset_delta=header.last_offset_delta)


def _retimed(record: bytes, timestamp_delta: int) -> bytes:
    """One framed record with another timestamp delta (length, attributes, delta, then the rest as is)."""
    _, cursor = read_varint(record, 0)
    attributes = record[cursor]
    _, rest = read_varint(record, cursor + 1)
    inner = bytearray((attributes,))
    write_varint(timestamp_delta, inner)
    inner += record[rest:]
    framed = bytearray()
    write_varint(len(inner), framed)
    return bytes(framed + inner)


def _empty(header: BatchHeader) -> bytes:
    """A batch of no records keeping the header that carries its producer's sequence and epoch, and
    whether it is transactional or a marker; as Kafka's writeEmptyHeader, no base timestamp (-1),
    compression or delete horizon."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    return seal_batch(b"", 0, base_offset=header.base_offset, timestamp=-1,
                      max_timestamp=header.max_timestamp, leader_epoch=header.partition_leader_epoch,
                      attributes=attributes, producer_id=header.producer_id,
                      producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                      last_offset_delta=header.last_offset_delta)


def main() -> None:
    """The worker process: a pickled CleaningJob on stdin, the pickled CleaningResult on stdout."""
    import pickle
    import sys

    # Run as __main__, this module's classes would pickle under that name: the node knows them
    # by the module's own.
    from cluster.formats import log_cleaner

    os.nice(10)  # behind the node's own work when they share a core: produce and fetch come first
    job = pickle.load(sys.stdin.buffer)
    pickle.dump(log_cleaner.clean(job), sys.stdout.buffer)


if __name__ == "__main__":
    main()
