"""The aborted-transaction index (`.txnindex`): Kafka's layout, and its life with a log's segments."""
from __future__ import annotations

import os
import struct
import time

import pytest

from cluster.formats.cleaned_segments import cleaning_job, swap_cleaned
from cluster.formats.control_records import end_txn_marker
from cluster.formats.log_cleaner import SWAP, clean
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_records
from cluster.formats.transaction_index import (
    ENTRY_SIZE, AbortedTxn, CorruptIndexError, TransactionIndex, read_entries,
)

CLEANING = dict(segment_bytes=1 << 20, index_interval_bytes=64, delete_retention_ms=86_400_000, max_map_keys=1000,
                io_bytes_per_s=float("inf"))


def now_ms() -> int:
    return int(time.time() * 1000)


def write(log: PartitionLog, key: bytes = b"k", producer_id: int = -1) -> int:
    """One record, transactional when it has a producer; its offset."""
    attributes = ATTR_TRANSACTIONAL if producer_id >= 0 else 0
    return log.append(encode_records([(now_ms(), key, b"v", ())], attributes=attributes, producer_id=producer_id,
                                     producer_epoch=0, base_sequence=0 if producer_id >= 0 else -1),
                      leader_epoch=0).first_offset


def abort(log: PartitionLog, producer_id: int, first_offset: int) -> AbortedTxn:
    """Write an ABORT marker and index the transaction, as a partition leader does."""
    marker = log.append(end_txn_marker(producer_id, 0, commit=False, coordinator_epoch=0, timestamp=now_ms()),
                        leader_epoch=0).first_offset
    entry = AbortedTxn(producer_id, first_offset, marker, marker + 1)
    log.add_aborted_transaction(entry)
    return entry


def aborted_transaction(log: PartitionLog, producer_id: int, records: int = 1) -> AbortedTxn:
    first = write(log, producer_id=producer_id)
    for _ in range(records - 1):
        write(log, producer_id=producer_id)
    return abort(log, producer_id, first)


# --- the file ---

def test_an_entry_is_kafkas_34_bytes_big_endian(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(producer_id=0x0102030405060708, first_offset=9, last_offset=12, last_stable_offset=13))
    data = index.path.read_bytes()
    assert len(data) == ENTRY_SIZE == 34
    assert data[0:2] == b"\x00\x00"  # version 0
    assert data[2:10] == bytes([1, 2, 3, 4, 5, 6, 7, 8])  # producer id
    assert struct.unpack(">qqq", data[10:34]) == (9, 12, 13)  # first, last, last stable offset


def test_the_file_comes_with_its_first_entry_and_nothing_is_read_before_asked(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert index.entries() == [] and index.collect(0, 100).aborted_transactions == []
    index.truncate_to(0)
    index.flush()
    assert not path.exists()
    index.append(AbortedTxn(1, 0, 1, 2))
    assert path.exists()
    path.write_bytes(b"")  # were it read again, it would now be empty
    assert TransactionIndex(path).entries() == []
    assert index.entries() == [AbortedTxn(1, 0, 1, 2)]


def test_last_offsets_must_increase_across_a_reopen(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    index.append(AbortedTxn(1, 0, 5, 6))
    for stale in (AbortedTxn(2, 0, 4, 6), AbortedTxn(2, 0, 5, 6)):
        with pytest.raises(ValueError):
            index.append(stale)
    index.close()
    reopened = TransactionIndex(path)
    with pytest.raises(ValueError):
        reopened.append(AbortedTxn(2, 3, 5, 6))
    reopened.append(AbortedTxn(2, 3, 7, 8))
    assert read_entries(path) == [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 7, 8)]


def test_a_torn_trailing_entry_is_ignored_and_cut_on_load(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    index.append(AbortedTxn(1, 0, 1, 2))
    index.append(AbortedTxn(2, 3, 4, 5))
    index.close()
    with open(path, "ab") as torn:
        torn.write(struct.pack(">hqqqq", 0, 3, 6, 7, 8)[:20])
    assert read_entries(path) == [AbortedTxn(1, 0, 1, 2), AbortedTxn(2, 3, 4, 5)]  # a reader leaves the file be
    assert path.stat().st_size == 2 * ENTRY_SIZE + 20
    reopened = TransactionIndex(path)
    reopened.append(AbortedTxn(3, 6, 7, 8))
    assert path.stat().st_size == 3 * ENTRY_SIZE
    assert read_entries(path)[-1] == AbortedTxn(3, 6, 7, 8)


def test_an_unknown_entry_version_is_corruption(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 0, 1, 2))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path).entries()


def test_collect_finds_overlapping_transactions_until_the_last_stable_offset_passes_the_bound(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    spans = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 3, 10, 5), AbortedTxn(3, 12, 15, 16), AbortedTxn(4, 20, 25, 26)]
    for entry in spans:
        index.append(entry)
    assert index.collect(5, 12) == ([spans[1]], True)  # entry 3 starts at the bound; its LSO 16 ends the search
    assert index.collect(0, 3) == ([spans[0]], True)
    assert index.collect(11, 21) == ([spans[2], spans[3]], True)
    assert index.collect(26, 40) == ([], False)  # the next segment's index may hold more
    assert index.collect(4, 4) == ([spans[0]], True)  # as Kafka's: an empty range, and the first LSO ends it


def test_truncate_to_drops_the_entries_ending_at_or_after_the_offset(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    for entry in (AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 15, 16)):
        index.append(entry)
    index.truncate_to(10)
    assert index.entries() == [AbortedTxn(1, 0, 4, 5)] and path.stat().st_size == ENTRY_SIZE
    index.append(AbortedTxn(4, 6, 8, 9))  # a last offset below the dropped ones is welcome again
    assert read_entries(path) == [AbortedTxn(1, 0, 4, 5), AbortedTxn(4, 6, 8, 9)]
    index.truncate_to(0)
    assert path.stat().st_size == 0 and index.entries() == []


# --- in a log ---

def test_collect_walks_the_segments_from_the_fetch_offsets(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    first = aborted_transaction(log, 1, records=2)  # 0..2
    write(log)  # 3
    spanning_start = write(log, producer_id=2)  # 4
    log.roll()
    write(log)  # 5
    spanning = abort(log, 2, spanning_start)  # 6: indexed in the second segment
    log.roll()
    later = aborted_transaction(log, 3)  # 7..8
    assert [s.base_offset for s in log.segments] == [0, 5, 7]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [first, spanning, later]
    assert log.collect_aborted_transactions(3, 5) == [spanning]  # from the segment at 0, the span starting at 4
    assert log.collect_aborted_transactions(5, 7) == [spanning]  # (its LSO 7 ends the search)
    assert log.collect_aborted_transactions(7, 9) == [later]
    assert log.collect_aborted_transactions(9, 9) == []
    log.close()
    reopened = PartitionLog(tmp_path / "t-0")
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == [first, spanning, later]
    reopened.close()


def test_a_rolled_and_truncated_log_keeps_the_entries_below_the_truncation(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    kept = aborted_transaction(log, 1)  # 0..1
    log.roll()
    cut = aborted_transaction(log, 2, records=2)  # 2..4
    write(log)  # 5
    log.roll()
    gone = aborted_transaction(log, 3)  # 6..7, in a segment the truncation deletes
    assert (tmp_path / "t-0" / "00000000000000000006.txnindex").exists()
    log.truncate_to(4)  # the second transaction loses its marker
    assert [s.base_offset for s in log.segments] == [0, 2] and log.log_end_offset == 4
    assert not (tmp_path / "t-0" / "00000000000000000006.txnindex").exists()
    assert log.collect_aborted_transactions(0, 100) == [kept]
    again = abort(log, 2, cut.first_offset)  # the follower writes the leader's marker at 4
    log.close()
    reopened = PartitionLog(tmp_path / "t-0")
    assert reopened.collect_aborted_transactions(0, 100) == [kept, again]
    assert gone not in reopened.collect_aborted_transactions(0, 100)
    reopened.truncate_fully_and_start_at(50)
    assert reopened.collect_aborted_transactions(50, 100) == []
    assert not list((tmp_path / "t-0").glob("*.txnindex"))
    reopened.close()


def test_deleted_segments_take_their_indexes_with_them(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(retention_ms=1000))
    aborted_transaction(log, 1)  # 0..1
    log.roll()
    second = aborted_transaction(log, 2)  # 2..3
    log.roll()
    third = aborted_transaction(log, 3)  # 4..5
    log.roll()
    write(log)
    assert log.advance_log_start_offset(3)
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()
    assert log.collect_aborted_transactions(3, 100) == [second, third]
    log.segments[0].max_timestamp = now_ms() - 5000  # the segment at 2 has expired
    assert log.enforce_retention() == 1
    assert not (tmp_path / "t-0" / "00000000000000000002.txnindex").exists()
    assert log.collect_aborted_transactions(4, 100) == [third]
    log.close()


def test_a_roll_fsyncs_the_index_of_the_segment_it_seals(tmp_path, monkeypatch):
    log = PartitionLog(tmp_path / "t-0")
    aborted_transaction(log, 1)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    log.roll()
    assert any(path.endswith("00000000000000000000.txnindex") for path in synced)
    log.close()


def test_closing_a_segment_closes_its_index(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    aborted_transaction(log, 1)
    index = log.active.txn_index
    assert index.fd >= 0
    log.close()
    assert index.fd == -1


# --- cleaning ---

def compacted_log_with_aborted_transactions(tmp_path) -> tuple[PartitionLog, list[AbortedTxn]]:
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    entries = [aborted_transaction(log, 1)]  # 0..1
    write(log, b"a")  # 2
    log.roll()
    write(log, b"a")  # 3
    log.roll()
    entries.append(aborted_transaction(log, 2))  # 4..5
    write(log, b"a")  # 6
    log.roll()
    write(log, b"tail")  # the active segment is never cleaned
    return log, entries


def test_a_cleaned_segment_carries_the_entries_of_the_segments_it_replaces(tmp_path):
    log, entries = compacted_log_with_aborted_transactions(tmp_path)
    result = clean(cleaning_job(log, 0, 0, producers={}, **CLEANING))
    (group,) = result.groups
    assert group.source_bases == [0, 3, 4]
    assert all(swap_cleaned(log, group) for group in result.groups)
    assert [s.base_offset for s in log.segments] == [0, 7]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.txnindex")) == ["00000000000000000000.txnindex"]
    assert log.segments[0].txn_index.entries() == entries
    assert log.collect_aborted_transactions(0, 100) == entries
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert reopened.collect_aborted_transactions(0, 100) == entries
    reopened.close()


def test_a_cleaning_of_segments_without_aborted_transactions_makes_no_index(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    for _ in range(3):
        write(log, b"a")
        log.roll()
    write(log, b"tail")
    result = clean(cleaning_job(log, 0, 0, producers={}, **CLEANING))
    assert all(swap_cleaned(log, group) for group in result.groups)
    assert not list((tmp_path / "t-0").glob("*.txnindex*"))
    log.close()


@pytest.mark.parametrize("renamed_to_final", [(), (".index", ".timeindex", ".txnindex")])
def test_a_swap_a_crash_interrupted_keeps_the_entries(tmp_path, renamed_to_final):
    log, entries = compacted_log_with_aborted_transactions(tmp_path)
    (group,) = clean(cleaning_job(log, 0, 0, producers={}, **CLEANING)).groups
    # The crash came after every cleaned file became .swap (the .log last), and after the old segments
    # went: then perhaps after some indexes took their final names, before the .log did.
    for suffix in (".index", ".timeindex", ".txnindex", ".log"):
        os.replace(group.path(suffix), group.path(suffix, SWAP))
    for segment in log.segments[:-1]:
        segment.delete_files()
    for suffix in renamed_to_final:
        os.replace(group.path(suffix, SWAP), tmp_path / "t-0" / f"00000000000000000000{suffix}")
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert [s.base_offset for s in reopened.segments] == [0, 7]
    assert reopened.collect_aborted_transactions(0, 100) == entries
    assert not list((tmp_path / "t-0").glob(f"*{SWAP}"))
    reopened.close()


def test_a_cleaning_a_crash_interrupted_leaves_the_indexes_as_they_were(tmp_path):
    log, entries = compacted_log_with_aborted_transactions(tmp_path)
    (group,) = clean(cleaning_job(log, 0, 0, producers={}, **CLEANING)).groups
    assert group.path(".txnindex").exists()
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert not group.path(".txnindex").exists()
    assert [s.base_offset for s in reopened.segments] == [0, 3, 4, 7]
    assert reopened.collect_aborted_transactions(0, 100) == entries
    reopened.close()


def test_index_swaps_without_their_logs_swap_are_a_swap_not_begun(tmp_path):
    log, entries = compacted_log_with_aborted_transactions(tmp_path)
    (group,) = clean(cleaning_job(log, 0, 0, producers={}, **CLEANING)).groups
    for suffix in (".index", ".timeindex", ".txnindex"):  # the crash came before the .log's rename
        os.replace(group.path(suffix), group.path(suffix, SWAP))
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert not list((tmp_path / "t-0").glob(f"*{SWAP}")) and not list((tmp_path / "t-0").glob("*.cleaned"))
    assert [s.base_offset for s in reopened.segments] == [0, 3, 4, 7]
    assert reopened.collect_aborted_transactions(0, 100) == entries
    reopened.close()
