"""Producer-state snapshots, `<20-digit offset>.snapshot` in a partition directory, as Kafka writes them.

A snapshot holds the state of every producer of the partition as of its offset (the log end
offset when it was taken), so that a log reopened or truncated rebuilds producer state from the
latest snapshot at or below where it needs it, not from the log's first segment. Kafka's layout
(the ProducerSnapshot message, version 1, in ProducerStateManager.writeSnapshot), big-endian:

    version int16 (1) | crc uint32 | entry count int32 | entries
    entry: producer id int64, epoch int16, last sequence int32, last offset int64,
           offset delta int32, timestamp int64, coordinator epoch int32,
           current transaction's first offset int64 (-1: none)

The CRC is CRC-32C over everything after the crc field. The producer state itself (what the
entries mean, when snapshots are taken) is the node's; this module reads, writes, lists and
deletes the files.
"""
from __future__ import annotations

import itertools
import logging
import os
import struct
from pathlib import Path
from typing import Iterable, NamedTuple

import crc32c

from cluster.formats.files import write_bytes_atomically
from cluster.formats.segment import segment_file_name

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size  # 46
_CRC_START = _VERSION.size + _CRC.size  # the CRC covers the count and the entries
HEADER_SIZE = _CRC_START + _COUNT.size


class CorruptSnapshotError(Exception):
    """A snapshot Kafka would refuse: an unknown version, a bad CRC, or a length that does not fit.
    Not a CorruptRecordError: a snapshot is the broker's own file, not records a client sent."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / segment_file_name(offset, SNAPSHOT_SUFFIX)


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    entries = list(entries)
    body = _COUNT.pack(len(entries)) + b"".join(itertools.starmap(_ENTRY.pack, entries))
    return _VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes, source: object = "snapshot") -> list[SnapshotEntry]:
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError(f"{source} is {len(data)} bytes, shorter than a snapshot's header")
    (version,) = _VERSION.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source} has an unknown snapshot version {version}")
    (count,) = _COUNT.unpack_from(data, _CRC_START)
    if count < 0 or len(data) != HEADER_SIZE + count * ENTRY_SIZE:
        raise CorruptSnapshotError(f"{source} is {len(data)} bytes, which does not fit {count} entries")
    (stored,) = _CRC.unpack_from(data, _VERSION.size)
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if stored != computed:
        raise CorruptSnapshotError(f"{source} is corrupt: stored CRC {stored}, computed {computed}")
    return list(map(SnapshotEntry._make, _ENTRY.iter_unpack(memoryview(data)[HEADER_SIZE:])))


def write_snapshot(directory: Path, offset: int, entries: Iterable[SnapshotEntry], *, sync: bool = False) -> Path:
    """Write the snapshot at offset whole (through a temp file and a rename); with sync, on disk
    before it takes its name, as Kafka's takeSnapshot(sync) does."""
    path = snapshot_path(directory, offset)
    write_bytes_atomically(path, encode_snapshot(entries), sync=sync)
    return path


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """The snapshot's entries; CorruptSnapshotError when Kafka would refuse it."""
    return decode_snapshot(Path(path).read_bytes(), path)


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the directory's snapshots, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    stems = (name[:-len(SNAPSHOT_SUFFIX)] for name in names if name.endswith(SNAPSHOT_SUFFIX))
    return sorted(int(stem) for stem in stems if stem.isdigit())


def latest_snapshot(directory: Path, at_or_below: int) -> tuple[int, list[SnapshotEntry]] | None:
    """(offset, entries) of the latest readable snapshot at or below at_or_below. A corrupt one met
    on the way is deleted and the next older one tried, as Kafka's loadFromSnapshot does."""
    for offset in reversed(snapshot_offsets(directory)):
        if offset > at_or_below:
            continue
        path = snapshot_path(directory, offset)
        try:
            return offset, read_snapshot(path)
        except FileNotFoundError:  # (deleted meanwhile)
            continue
        except CorruptSnapshotError as error:
            log.warning("deleting producer snapshot %s: %s", path, error)
            path.unlink(missing_ok=True)
    return None


def delete_snapshots_above(directory: Path, offset: int) -> list[int]:
    """Delete the snapshots strictly above offset (past a truncated log's end); their offsets."""
    return _delete(directory, [o for o in snapshot_offsets(directory) if o > offset])


def delete_snapshots_below(directory: Path, offset: int, *, keep_latest: bool = False) -> list[int]:
    """Delete the snapshots strictly below offset (before a log's first segment); keep_latest spares
    the latest snapshot of all even so. Their offsets."""
    offsets = snapshot_offsets(directory)
    if keep_latest:
        offsets = offsets[:-1]
    return _delete(directory, [o for o in offsets if o < offset])


def delete_all_snapshots(directory: Path) -> list[int]:
    return _delete(directory, snapshot_offsets(directory))


def _delete(directory: Path, offsets: list[int]) -> list[int]:
    for offset in offsets:
        snapshot_path(directory, offset).unlink(missing_ok=True)
    return offsets
