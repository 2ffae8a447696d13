"""Compaction of logs holding transactions, as Kafka's cleaner does it: aborted records never shadow
committed ones and are removed, markers stay while their transactions have batches left and go
once their delete horizon has passed, the cleaned segments' aborted-transaction indexes hold what
read_committed readers still need, nothing at or past the last stable offset is cleaned, and
producer state rebuilt from a cleaned log is what it was."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from cluster.formats import control_records
from cluster.formats.cleaned_segments import cleaning_job, dirty_ratio, first_uncleanable_offset, swap_cleaned
from cluster.formats.log_cleaner import CLEANED, SWAP, clean
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.producer_snapshot import delete_all_snapshots
from cluster.formats.records import (
    ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL, HEADER_SIZE, decode_records, encode_batch,
    iter_batch_headers, read_header, validate_batches,
)
from cluster.formats.transaction_index import AbortedTxn
from node.log_cleaner import producers_last_records
from node.producer_state import PartitionProducers

DAY_MS = 86_400_000
SETTINGS = dict(segment_bytes=1 << 20, index_interval_bytes=64, delete_retention_ms=DAY_MS, max_map_keys=1000,
                io_bytes_per_s=float("inf"))
KINDS = {control_records.COMMIT: "COMMIT", control_records.ABORT: "ABORT"}


def now_ms() -> int:
    return int(time.time() * 1000)


class Leader:
    """A compacted partition's log written as its leader writes it: producers' sequences, markers, the
    aborted-transaction index."""

    def __init__(self, directory: Path):
        self.log = PartitionLog(directory, config=LogConfig(cleanup_policy="compact"))
        self.producers = PartitionProducers()
        self.log.on_roll = lambda offset: self.producers.write_snapshot(self.log.directory, offset)
        self.next_sequence: dict[tuple[int, int], int] = {}

    def send(self, producer_id: int, records: list[tuple[bytes, bytes | None]], epoch: int = 0) -> int:
        """One transactional batch; its first offset."""
        sequence = self.next_sequence.get((producer_id, epoch), 0)
        batch = encode_batch(records, timestamp=now_ms(), attributes=ATTR_TRANSACTIONAL, producer_id=producer_id,
                             producer_epoch=epoch, base_sequence=sequence)
        self.producers.check(read_header(batch))
        first = self.log.append(batch, leader_epoch=0).first_offset
        self.producers.record(read_header(batch)._replace(base_offset=first), first)
        self.next_sequence[(producer_id, epoch)] = sequence + len(records)
        return first

    def end(self, producer_id: int, commit: bool, epoch: int = 0) -> int:
        """A COMMIT or ABORT marker, and the index entry of an abort; its offset."""
        self.producers.check_marker(producer_id, epoch, 0)
        marker = control_records.end_txn_marker(producer_id, epoch, commit, 0, now_ms())
        offset = self.log.append(marker, leader_epoch=0).first_offset
        aborted = self.producers.end_transaction(producer_id, epoch, offset, commit, 0)
        if aborted is not None:
            self.log.add_aborted_transaction(AbortedTxn(*aborted))
        return offset

    def plain(self, key: bytes, value: bytes | None) -> int:
        return self.log.append(encode_batch([(key, value)], timestamp=now_ms()), leader_epoch=0).first_offset

    def job(self, first_dirty: int = 0, **settings):
        return cleaning_job(self.log, first_dirty, 0, self.producers.stable_below(self.log.high_watermark),
                            producers=producers_last_records(self.producers), **{**SETTINGS, **settings})

    def clean(self, first_dirty: int = 0, at_ms: int | None = None, **settings) -> int:
        """One cleaning (at at_ms, for the delete horizon), swapped in; where the next one starts."""
        job = self.job(first_dirty, **settings)
        if at_ms is not None:
            job.now_ms = at_ms
        result = clean(job)
        assert all(swap_cleaned(self.log, group) for group in result.groups)
        return result.cleaned_up_to


def batches_in(log: PartitionLog) -> list[tuple[object, bytes]]:
    data = bytes(log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset).records)
    return [(header, data[position:position + header.size]) for position, header in iter_batch_headers(data)]


def view(log: PartitionLog) -> tuple[list, list, list]:
    """(offset, key, value) of each record a read_uncommitted and a read_committed reader of the whole
    log gets, and (offset, kind) of each marker."""
    aborted = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    uncommitted, committed, markers = [], [], []
    for header, batch in batches_in(log):
        if header.is_control:
            markers.append((header.base_offset, KINDS[control_records.control_type(batch)]
                            if header.record_count else "empty"))
            continue
        records = [(r.offset, r.key, r.value) for r in decode_records(header, batch[HEADER_SIZE:])]
        uncommitted += records
        if not (header.is_transactional and any(a.producer_id == header.producer_id
                                                and a.first_offset <= header.base_offset <= a.last_offset
                                                for a in aborted)):
            committed += records
    return uncommitted, committed, markers


def latest(records) -> dict[bytes, bytes]:
    """Each key's latest value, as a reader that applies a compacted topic to a table sees it."""
    table = {}
    for _, key, value in records:
        table[key] = value
    return {key: value for key, value in table.items() if value is not None}


def header_at(log: PartitionLog, offset: int):
    return next(header for header, _ in batches_in(log) if header.base_offset == offset)


@pytest.fixture
def leader(tmp_path):
    written = Leader(tmp_path / "t-0")
    yield written
    written.log.close()


def test_an_aborted_value_never_shadows_a_committed_one_and_its_records_go(leader):
    leader.send(1, [(b"k", b"committed")])  # 0
    leader.end(1, commit=True)  # 1
    leader.send(2, [(b"k", b"aborted"), (b"j", b"aborted")])  # 2-3
    leader.end(2, commit=False)  # 4
    leader.send(2, [(b"x", b"x1")])  # 5: producer 2's last batch is another one
    leader.end(2, commit=True)  # 6
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 7: the active segment is never cleaned
    before = view(leader.log)

    assert leader.clean() == 7
    uncommitted, committed, markers = view(leader.log)
    assert uncommitted == committed == [(0, b"k", b"committed"), (5, b"x", b"x1"), (7, b"tail", b"t")]
    assert latest(committed) == latest(before[1])
    # Each marker still ends a transaction that had batches in this cleaning: the abort's keeps its entry.
    assert markers == [(1, "COMMIT"), (4, "ABORT"), (6, "COMMIT")]
    assert leader.log.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 2, 4, 5)]


def test_an_aborted_offset_commit_cleaned_later_never_shadows_the_committed_one(leader):
    """As `__consumer_offsets` sees it: a committed value cleaned long ago, then an aborted one."""
    leader.send(1, [(b"group/topic/0", b"offset 10")])  # 0
    leader.end(1, commit=True)  # 1
    leader.log.roll()
    leader.plain(b"other", b"o")  # 2
    first_dirty = leader.clean()
    assert first_dirty == 2
    leader.send(2, [(b"group/topic/0", b"offset 99, aborted")])  # 3
    leader.end(2, commit=False)  # 4
    leader.send(2, [(b"y", b"y")])  # 5
    leader.end(2, commit=True)  # 6
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 7

    assert leader.clean(first_dirty) == 7
    _, committed, _ = view(leader.log)
    assert latest(committed) == {b"group/topic/0": b"offset 10", b"other": b"o", b"y": b"y", b"tail": b"t"}
    assert (3, b"group/topic/0", b"offset 99, aborted") not in view(leader.log)[0]


def test_markers_stay_while_needed_and_go_once_past_their_delete_horizon(leader):
    leader.send(1, [(b"k", b"v1")])  # 0
    leader.end(1, commit=True)  # 1
    leader.send(2, [(b"j", b"aborted")])  # 2
    abort = leader.end(2, commit=False)  # 3
    leader.send(1, [(b"k", b"v2")])  # 4: k's first value is superseded
    leader.end(1, commit=True)  # 5
    leader.send(2, [(b"j", b"j2")])  # 6
    leader.end(2, commit=True)  # 7
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 8
    marker_timestamp = header_at(leader.log, abort).max_timestamp

    # The first cleaning removes the batches at 0 and 2; their markers saw them go, and stay.
    leader.clean()
    assert view(leader.log)[2] == [(1, "COMMIT"), (3, "ABORT"), (5, "COMMIT"), (7, "COMMIT")]
    assert leader.log.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 2, 3, 4)]

    # The next finds them ending nothing: each is stamped with a delete horizon, and the abort loses
    # its entry (no aborted record is left for a reader to drop).
    cleaning_ms = now_ms()
    leader.clean(at_ms=cleaning_ms)
    horizon = cleaning_ms + DAY_MS
    assert view(leader.log)[2] == [(1, "COMMIT"), (3, "ABORT"), (5, "COMMIT"), (7, "COMMIT")]
    assert [header_at(leader.log, o).delete_horizon_ms for o in (1, 3, 5, 7)] == [horizon, horizon, None, None]
    stamped = next(batch for header, batch in batches_in(leader.log) if header.base_offset == abort)
    assert read_header(stamped).attributes & ATTR_DELETE_HORIZON
    (record,) = decode_records(read_header(stamped), stamped[HEADER_SIZE:])
    assert record.timestamp == marker_timestamp == read_header(stamped).max_timestamp  # (kept through the delta)
    assert control_records.coordinator_epoch_of(stamped) == 0
    validate_batches(b"".join(batch for _, batch in batches_in(leader.log)), replicated=True)
    assert leader.log.collect_aborted_transactions(0, 100) == []
    assert not list(leader.log.directory.glob("*.txnindex"))

    leader.clean(at_ms=horizon - 1)
    assert [offset for offset, _ in view(leader.log)[2]] == [1, 3, 5, 7]
    leader.clean(at_ms=horizon)
    assert view(leader.log)[2] == [(5, "COMMIT"), (7, "COMMIT")]
    assert latest(view(leader.log)[1]) == {b"k": b"v2", b"j": b"j2", b"tail": b"t"}


def test_a_producers_last_batch_stays_empty_and_transactional_with_its_abort_marker_and_entry(tmp_path):
    leader = Leader(tmp_path / "t-0")
    leader.send(1, [(b"k", b"committed")])  # 0
    leader.end(1, commit=True)  # 1
    leader.send(2, [(b"k", b"aborted")])  # 2: producer 2's last batch
    leader.end(2, commit=False)  # 3
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 4
    for _ in range(2):  # a second cleaning finds the empty batch, and keeps the marker for it again
        leader.clean()
        empty = header_at(leader.log, 2)
        assert (empty.record_count, empty.last_offset, empty.producer_id, empty.base_sequence) == (0, 2, 2, 0)
        assert empty.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) == ATTR_TRANSACTIONAL
        assert view(leader.log)[2] == [(1, "COMMIT"), (3, "ABORT")]
        assert leader.log.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 2, 3, 4)]
        assert latest(view(leader.log)[1]) == {b"k": b"committed", b"tail": b"t"}
    expected = leader.producers
    leader.log.close()

    # Producer state replayed from the cleaned log alone is what it was: a retry of producer 2's batch
    # is still known, and no transaction is open.
    delete_all_snapshots(tmp_path / "t-0")
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    rebuilt = PartitionProducers.from_log(reopened)
    assert rebuilt.open_transactions == {} == expected.open_transactions
    assert {pid: (e.epoch, e.last_sequence) for pid, e in rebuilt.producers.items()} == {1: (0, 0), 2: (0, 0)}
    assert rebuilt.find_duplicate(read_header(encode_batch(
        [(b"k", b"aborted")], timestamp=1, attributes=ATTR_TRANSACTIONAL, producer_id=2, producer_epoch=0,
        base_sequence=0))) == (2, 2)
    assert rebuilt.stable_below(reopened.log_end_offset) == reopened.log_end_offset
    assert reopened.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 2, 3, 4)]
    reopened.close()


def test_a_fenced_producers_last_marker_stays_as_an_empty_control_batch(tmp_path):
    leader = Leader(tmp_path / "t-0")
    leader.send(5, [(b"k", b"aborted")])  # 0
    leader.end(5, commit=False, epoch=1)  # 1: the coordinator bumped the epoch to fence the producer
    leader.send(6, [(b"k", b"committed")])  # 2
    leader.end(6, commit=True)  # 3
    leader.send(6, [(b"z", b"z")])  # 4
    leader.end(6, commit=True)  # 5
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 6
    leader.clean()
    cleaning_ms = now_ms()
    leader.clean(at_ms=cleaning_ms)
    assert header_at(leader.log, 1).delete_horizon_ms == cleaning_ms + DAY_MS
    leader.clean(at_ms=cleaning_ms + DAY_MS)
    # Producer 5 has no batch since its epoch began: its marker, which carries that epoch, stays empty.
    fenced = header_at(leader.log, 1)
    assert (fenced.record_count, fenced.producer_id, fenced.producer_epoch, fenced.base_timestamp) == (0, 5, 1, -1)
    assert fenced.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_DELETE_HORIZON) == (
        ATTR_TRANSACTIONAL | ATTR_CONTROL)
    assert view(leader.log)[2] == [(1, "empty"), (3, "COMMIT"), (5, "COMMIT")]
    leader.clean(at_ms=cleaning_ms + 2 * DAY_MS)
    assert view(leader.log)[2] == [(1, "empty"), (3, "COMMIT"), (5, "COMMIT")]
    assert latest(view(leader.log)[1]) == {b"k": b"committed", b"z": b"z", b"tail": b"t"}

    # A follower copying it, and a replay of the log, pass over the empty marker.
    copy = PartitionProducers()
    for header, batch in batches_in(leader.log):
        if header.producer_id >= 0:
            assert copy.track(batch, 0, header) is None
    assert copy.open_transactions == {}
    leader.log.close()
    delete_all_snapshots(tmp_path / "t-0")
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert PartitionProducers.from_log(reopened).open_transactions == {}
    reopened.close()


def test_an_open_transaction_stops_the_cleaning_at_its_segment(leader):
    leader.plain(b"k", b"v1")  # 0
    leader.log.roll()
    leader.send(1, [(b"k", b"open")])  # 1
    leader.plain(b"k", b"v2")  # 2
    leader.log.roll()
    leader.plain(b"k", b"v3")  # 3
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 4
    log = leader.log
    assert leader.producers.stable_below(log.high_watermark) == 1
    assert first_uncleanable_offset(log, 0, 1) == first_uncleanable_offset(log, 0, 2) == 1  # a segment's base
    assert first_uncleanable_offset(log, 0) == 4  # the active segment's, with no transaction open
    assert dirty_ratio(log, 0, 1) == 1.0 and dirty_ratio(log, 1, 1) == 0.0

    assert leader.clean() == 1  # the segment at 0 only: nothing at or past the open transaction
    assert view(log)[0] == [(0, b"k", b"v1"), (1, b"k", b"open"), (2, b"k", b"v2"), (3, b"k", b"v3"),
                            (4, b"tail", b"t")]

    leader.end(1, commit=True)  # 5: decided, and the high watermark has passed it
    assert leader.clean(first_dirty=1) == 4
    assert view(log)[0] == [(3, b"k", b"v3"), (4, b"tail", b"t")]
    kept = header_at(log, 1)  # the producer's last batch, emptied
    assert (kept.record_count, kept.producer_id, kept.attributes & ATTR_TRANSACTIONAL) == (0, 1, ATTR_TRANSACTIONAL)


def test_records_aborted_by_a_marker_past_the_cleaned_range_still_go(leader):
    leader.send(1, [(b"k", b"committed")])  # 0
    leader.end(1, commit=True)  # 1
    leader.send(2, [(b"k", b"aborted")])  # 2
    leader.log.roll()
    leader.send(3, [(b"other", b"open")])  # 3: open, so the cleaning stops before it
    leader.end(2, commit=False)  # 4: its index entry is in the segment at 3
    leader.send(2, [(b"z", b"z")])  # 5
    leader.end(2, commit=True)  # 6
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 7

    assert leader.clean() == 3
    uncommitted, committed, _ = view(leader.log)
    assert uncommitted == committed == [(0, b"k", b"committed"), (3, b"other", b"open"), (5, b"z", b"z"),
                                         (7, b"tail", b"t")]
    assert leader.log.collect_aborted_transactions(0, 100) == [AbortedTxn(2, 2, 4, 3)]
    assert (leader.log.directory / "00000000000000000003.txnindex").exists()
    assert not (leader.log.directory / "00000000000000000000.txnindex").exists()


def test_an_abort_marker_keeps_its_entry_in_its_own_cleaned_segment(leader):
    leader.send(1, [(b"a", b"aborted")])  # 0
    leader.log.roll()
    leader.end(1, commit=False)  # 1
    leader.send(2, [(b"b", b"aborted")])  # 2
    leader.end(2, commit=False)  # 3
    leader.send(1, [(b"c", b"c")])  # 4
    leader.end(1, commit=True)  # 5
    leader.send(2, [(b"d", b"d")])  # 6
    leader.end(2, commit=True)  # 7
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 8

    leader.clean(segment_bytes=1)  # one cleaned segment per segment
    assert [s.base_offset for s in leader.log.segments] == [0, 1, 8]
    assert leader.log.segments[0].txn_index.entries() == []
    assert leader.log.segments[1].txn_index.entries() == [AbortedTxn(1, 0, 1, 2), AbortedTxn(2, 2, 3, 4)]
    assert view(leader.log)[0] == [(4, b"c", b"c"), (6, b"d", b"d"), (8, b"tail", b"t")]
    leader.clean(segment_bytes=1)
    assert [s.txn_index.entries() for s in leader.log.segments] == [[], [], []]


# --- a crash at each step of a swap ---

def scenario(directory: Path) -> Leader:
    """Two segments cleaned into one: the first holds an abort's entry, which the second cleaning drops."""
    leader = Leader(directory)
    leader.send(1, [(b"k", b"v1")])  # 0
    leader.end(1, commit=True)  # 1
    leader.send(2, [(b"j", b"aborted")])  # 2
    leader.end(2, commit=False)  # 3
    leader.log.roll()
    leader.send(1, [(b"k", b"v2")])  # 4
    leader.end(1, commit=True)  # 5
    leader.send(2, [(b"j", b"j2")])  # 6
    leader.end(2, commit=True)  # 7
    leader.log.roll()
    leader.plain(b"tail", b"t")  # 8
    return leader


class Killed(Exception):
    pass


def state(log: PartitionLog) -> tuple:
    """What readers see of the log, its aborted-transaction index entries, and which batches carry a
    delete horizon."""
    return (view(log), log.collect_aborted_transactions(0, 100),
            [header.base_offset for header, _ in batches_in(log) if header.delete_horizon_ms is not None])


def crash_at(monkeypatch, step: int) -> list[int]:
    """Renames and deletions fail from the step-th on, as if the node died there; the list counts them."""
    done = [0]
    real_replace, real_unlink = os.replace, Path.unlink

    def counted(operation):
        def run(*args, **kwargs):
            if done[0] >= step:
                raise Killed
            done[0] += 1
            return operation(*args, **kwargs)
        return run

    monkeypatch.setattr(os, "replace", counted(real_replace))
    monkeypatch.setattr(Path, "unlink", counted(real_unlink))
    return done


@pytest.mark.parametrize("cleanings_before", [0, 1])
def test_a_kill_at_each_step_of_a_swap_leaves_a_log_as_it_was_or_as_cleaned(tmp_path, monkeypatch, cleanings_before):
    expected = scenario(tmp_path / "whole" / "t-0")
    for _ in range(cleanings_before + 1):
        expected.clean()
    cleaned_view = state(expected.log)
    expected.log.close()
    step = 0
    while True:
        directory = tmp_path / f"step-{step}" / "t-0"
        leader = scenario(directory)
        for _ in range(cleanings_before):
            leader.clean()
        before_view = state(leader.log)
        job = leader.job()
        result = clean(job)
        done = crash_at(monkeypatch, step)
        try:
            for group in result.groups:
                swap_cleaned(leader.log, group)
            finished = True
        except Killed:
            finished = False
        monkeypatch.undo()
        for segment in leader.log.segments:  # (a dead node writes nothing more)
            segment.close()

        reopened = PartitionLog(directory, config=LogConfig(cleanup_policy="compact"))
        assert not list(directory.glob(f"*{CLEANED}")) and not list(directory.glob(f"*{SWAP}"))
        # All from before the cleaning or all from after: records, markers, index entries, horizons.
        found = state(reopened)
        assert found in (before_view, cleaned_view), f"a kill after {done[0]} steps"
        assert latest(found[0][1]) == {b"k": b"v2", b"j": b"j2", b"tail": b"t"}
        if found == before_view:  # the cleaning done again, with the producers replayed, ends as the whole one
            again = Leader.__new__(Leader)
            again.log, again.producers = reopened, PartitionProducers.from_log(reopened)
            again.clean()
            assert state(reopened) == cleaned_view
        reopened.close()
        shutil.rmtree(directory.parent)
        if finished:
            break
        step += 1
    assert step >= 10  # every rename and deletion of the swap was a place to die
