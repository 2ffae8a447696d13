"""Producer-state snapshots (`.snapshot`): Kafka's layout, corruption, and which ones a log keeps."""
from __future__ import annotations

import struct
import time

import crc32c
import pytest

from cluster.formats.cleaned_segments import cleaning_job, swap_cleaned
from cluster.formats.log_cleaner import clean
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.producer_snapshot import (
    CorruptSnapshotError, SnapshotEntry, delete_all_snapshots, delete_snapshots_above, delete_snapshots_below,
    latest_snapshot, read_snapshot, snapshot_offsets, snapshot_path, write_snapshot,
)
from cluster.formats.records import encode_records

ENTRIES = [
    SnapshotEntry(producer_id=0x0102030405060708, epoch=3, last_sequence=41, last_offset=1_000, offset_delta=4,
                  timestamp=1_700_000_000_123, coordinator_epoch=7, current_txn_first_offset=996),
    SnapshotEntry(producer_id=9, epoch=-1, last_sequence=-1, last_offset=-1, offset_delta=0, timestamp=-1,
                  coordinator_epoch=-1, current_txn_first_offset=-1),
]


def write(log: PartitionLog, key: bytes = b"k", records: int = 1) -> None:
    now = int(time.time() * 1000)
    log.append(encode_records([(now, key, b"v", ())] * records), leader_epoch=0)


def snapshots_at(log: PartitionLog, *offsets: int) -> None:
    for offset in offsets:
        write_snapshot(log.directory, offset, ENTRIES)


# --- the file ---

def test_a_snapshot_is_laid_out_as_kafkas_producer_snapshot_v1(tmp_path):
    path = write_snapshot(tmp_path, 1_001, ENTRIES)
    assert path.name == "00000000000000001001.snapshot"
    data = path.read_bytes()
    assert len(data) == 2 + 4 + 4 + 2 * 46
    assert data[0:2] == b"\x00\x01"  # version int16 = 1
    assert struct.unpack(">I", data[2:6])[0] == crc32c.crc32c(data[6:])  # CRC-32C of all after the crc field
    assert data[6:10] == b"\x00\x00\x00\x02"  # the entry count, int32
    first = data[10:56]
    assert first[0:8] == bytes([1, 2, 3, 4, 5, 6, 7, 8])  # producerId int64
    assert first[8:10] == b"\x00\x03"  # epoch int16
    assert first[10:14] == struct.pack(">i", 41)  # lastSequence int32
    assert first[14:22] == struct.pack(">q", 1_000)  # lastOffset int64
    assert first[22:26] == struct.pack(">i", 4)  # offsetDelta int32
    assert first[26:34] == struct.pack(">q", 1_700_000_000_123)  # timestamp int64
    assert first[34:38] == struct.pack(">i", 7)  # coordinatorEpoch int32
    assert first[38:46] == struct.pack(">q", 996)  # currentTxnFirstOffset int64
    assert data[56:] == struct.pack(">qhiqiqiq", 9, -1, -1, -1, 0, -1, -1, -1)
    assert read_snapshot(path) == ENTRIES


def test_the_crc_is_castagnolis():
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_an_empty_snapshot_is_its_header(tmp_path):
    data = write_snapshot(tmp_path, 0, []).read_bytes()
    assert data == b"\x00\x01" + struct.pack(">I", crc32c.crc32c(b"\x00\x00\x00\x00")) + b"\x00\x00\x00\x00"
    assert read_snapshot(snapshot_path(tmp_path, 0)) == []


def _rewritten(data: bytes, body: bytes) -> bytes:
    return data[:2] + struct.pack(">I", crc32c.crc32c(body)) + body


@pytest.mark.parametrize("damage", [
    lambda data: b"\x00\x02" + data[2:],  # a version Kafka does not know
    lambda data: b"\x00\x00" + data[2:],
    lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],  # a flipped bit: the CRC fails
    lambda data: data[:-1],  # torn
    lambda data: data + b"\x00",
    lambda data: data[:7],
    lambda data: _rewritten(data, struct.pack(">i", -1)),  # a null array, whatever its CRC
    lambda data: _rewritten(data, struct.pack(">i", 3) + data[10:]),  # a count the bytes do not fit
], ids=["version-2", "version-0", "crc", "torn", "trailing-byte", "short-header", "null-array", "bad-count"])
def test_a_damaged_snapshot_is_corrupt(tmp_path, damage):
    path = write_snapshot(tmp_path, 5, ENTRIES)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_a_snapshot_is_written_whole_through_a_rename(tmp_path):
    write_snapshot(tmp_path, 5, ENTRIES)
    write_snapshot(tmp_path, 5, ENTRIES[:1], sync=True)
    assert read_snapshot(snapshot_path(tmp_path, 5)) == ENTRIES[:1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000005.snapshot"]


def test_offsets_are_listed_ascending_and_other_files_ignored(tmp_path):
    for offset in (30, 4, 100):
        write_snapshot(tmp_path, offset, [])
    for stray in ("00000000000000000050.snapshot.tmp", "leader-epoch-checkpoint", "x.snapshot",
                  "00000000000000000000.log"):
        (tmp_path / stray).write_bytes(b"")
    assert snapshot_offsets(tmp_path) == [4, 30, 100]
    assert snapshot_offsets(tmp_path / "absent") == []


def test_the_latest_snapshot_falls_back_past_corrupt_ones_and_deletes_them(tmp_path):
    for offset in (10, 20, 30, 40):
        write_snapshot(tmp_path, offset, ENTRIES[:1] if offset == 10 else ENTRIES)
    snapshot_path(tmp_path, 30).write_bytes(b"\x00\x01garbage")
    snapshot_path(tmp_path, 20).write_bytes(snapshot_path(tmp_path, 20).read_bytes()[:-3])
    assert latest_snapshot(tmp_path, at_or_below=35) == (10, ENTRIES[:1])
    assert snapshot_offsets(tmp_path) == [10, 40]  # the corrupt ones met are gone, 40 was never looked at
    assert latest_snapshot(tmp_path, at_or_below=40) == (40, ENTRIES)
    assert latest_snapshot(tmp_path, at_or_below=9) is None
    snapshot_path(tmp_path, 10).write_bytes(b"")
    assert latest_snapshot(tmp_path, at_or_below=39) is None and snapshot_offsets(tmp_path) == [40]


def test_deletions_above_and_below_are_strict(tmp_path):
    for offset in (10, 20, 30):
        write_snapshot(tmp_path, offset, [])
    assert delete_snapshots_above(tmp_path, 20) == [30]
    assert delete_snapshots_below(tmp_path, 20) == [10]
    assert snapshot_offsets(tmp_path) == [20]
    assert delete_snapshots_below(tmp_path, 25, keep_latest=True) == []
    assert delete_all_snapshots(tmp_path) == [20] and snapshot_offsets(tmp_path) == []


def test_kafkas_own_snapshots_read(shared_dir, tmp_path):
    found = sorted((shared_dir / "fixtures").rglob("*.snapshot"))
    if not found:
        pytest.skip("the shared fixtures hold no producer snapshot written by Kafka")
    for path in found:
        entries = read_snapshot(path)
        assert all(entry.producer_id >= 0 for entry in entries)


# --- in a log ---

def test_a_truncation_deletes_the_snapshots_past_the_new_log_end(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    write(log, records=3)  # 0..2
    write(log, records=3)  # 3..5
    log.roll()
    write(log, records=2)  # 6..7
    snapshots_at(log, 3, 6, 8)
    log.truncate_to(5)  # the batch 3..5 goes whole: the log now ends at 3
    assert log.log_end_offset == 3
    assert snapshot_offsets(log.directory) == [3]  # at the new end: still true
    log.truncate_to(10)  # nothing to cut
    assert snapshot_offsets(log.directory) == [3]
    log.close()


def test_a_full_truncation_deletes_every_snapshot(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    write(log, records=3)
    snapshots_at(log, 0, 3)
    log.truncate_fully_and_start_at(100)
    assert snapshot_offsets(log.directory) == []
    log.close()


def test_deleted_segments_take_their_snapshots_but_the_latest_stays(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(retention_ms=1000))
    for _ in range(3):
        write(log, records=2)
        log.roll()  # bases 0, 2, 4, 6
    snapshots_at(log, 0, 1, 2, 4)
    assert log.advance_log_start_offset(3)  # deletes the segment at 0
    assert snapshot_offsets(log.directory) == [2, 4]
    log.segments[0].max_timestamp = int(time.time() * 1000) - 5000
    log.segments[1].max_timestamp = int(time.time() * 1000) - 5000
    assert log.enforce_retention() == 2  # the segments at 2 and 4 go: 6 is first, 4 was the latest snapshot
    assert snapshot_offsets(log.directory) == [4]
    assert not log.advance_log_start_offset(3)  # (no move, no deletion)
    log.close()


def test_a_cleaning_deletes_the_snapshots_of_the_segments_it_merged_away(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    for _ in range(3):
        write(log, b"a")
        log.roll()
    write(log, b"tail")
    snapshots_at(log, 0, 1, 2, 3)
    job = cleaning_job(log, 0, 0, producers={}, segment_bytes=1 << 20, index_interval_bytes=64,
                       delete_retention_ms=86_400_000, max_map_keys=1000, io_bytes_per_s=float("inf"))
    result = clean(job)
    assert [group.source_bases for group in result.groups] == [[0, 1, 2]]
    assert all(swap_cleaned(log, group) for group in result.groups)
    assert snapshot_offsets(log.directory) == [0, 3]  # as Kafka: 0's segment was replaced in place
    log.close()


def test_the_roll_and_close_hooks_see_the_new_base_and_the_log_end(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    calls = []
    log.on_roll = lambda base: calls.append(("roll", base, log.active.base_offset))
    log.on_close = lambda end: calls.append(("close", end, log.active.fd >= 0))
    write(log, records=3)
    log.roll()
    log.roll()  # an empty active segment does not roll
    write(log, records=2)
    log.close()
    log.close()
    assert calls == [("roll", 3, 3), ("close", 5, True)]
