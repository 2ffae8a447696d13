"""A partition's producers and transactions: open transactions, markers, the last stable offset, the
aborted-transaction index and producer snapshots, as node.producer_state keeps them."""
from __future__ import annotations

import pytest

from cluster.formats import control_records
from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.producer_snapshot import snapshot_offsets
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch, read_header
from cluster.formats.transaction_index import AbortedTxn
from node.producer_state import MarkerError, PartitionProducers


def write(log: PartitionLog, producers: PartitionProducers, producer_id: int, epoch: int, sequence: int,
          values: list[bytes], transactional: bool = True) -> int:
    """Append a (transactional) batch as a leader does; returns its first offset."""
    batch = encode_batch([(None, v) for v in values], timestamp=1_000, producer_id=producer_id, producer_epoch=epoch,
                         base_sequence=sequence, attributes=ATTR_TRANSACTIONAL if transactional else 0)
    producers.check(read_header(batch))
    appended = log.append(batch, leader_epoch=0)
    producers.record(read_header(batch)._replace(base_offset=appended.first_offset), appended.first_offset)
    return appended.first_offset


def end(log: PartitionLog, producers: PartitionProducers, producer_id: int, epoch: int, commit: bool,
        coordinator_epoch: int = 0) -> int:
    """Append a marker as a leader does; returns its offset."""
    producers.check_marker(producer_id, epoch, coordinator_epoch)
    appended = log.append(control_records.end_txn_marker(producer_id, epoch, commit, coordinator_epoch, 2_000),
                          leader_epoch=0)
    aborted = producers.end_transaction(producer_id, epoch, appended.first_offset, commit, coordinator_epoch)
    if aborted is not None:
        log.add_aborted_transaction(AbortedTxn(*aborted))
    return appended.first_offset


@pytest.fixture
def log(tmp_path):
    partition_log = PartitionLog(tmp_path / "t-0", config=LogConfig())
    yield partition_log
    partition_log.close()


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset(log):
    producers = PartitionProducers()
    write(log, producers, 1, 0, 0, [b"plain"], transactional=False)
    first = write(log, producers, 2, 0, 0, [b"a", b"b"])
    write(log, producers, 3, 0, 0, [b"other"], transactional=False)
    assert producers.stable_below(log.log_end_offset) == first == 1
    assert producers.stable_below(0) == 0  # never above the high watermark

    marker = end(log, producers, 2, 0, commit=True)
    # Decided, but until the high watermark passes the marker, not yet stable.
    assert producers.stable_below(marker) == first
    assert producers.stable_below(marker + 1) == marker + 1
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []


def test_an_abort_indexes_the_transaction_with_the_next_open_one_as_its_last_stable_offset(log):
    producers = PartitionProducers()
    aborted_first = write(log, producers, 5, 0, 0, [b"x"])
    still_open = write(log, producers, 6, 0, 0, [b"y"])
    marker = end(log, producers, 5, 0, commit=False)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(5, aborted_first, marker, still_open)]
    assert producers.stable_below(log.log_end_offset) == still_open


def test_a_marker_from_an_older_producer_or_coordinator_epoch_is_refused(log):
    producers = PartitionProducers()
    write(log, producers, 7, 3, 0, [b"x"])
    end(log, producers, 7, 3, commit=True, coordinator_epoch=4)
    with pytest.raises(MarkerError) as stale_producer:
        producers.check_marker(7, 2, 4)
    assert stale_producer.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(MarkerError) as stale_coordinator:
        producers.check_marker(7, 3, 3)
    assert stale_coordinator.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_an_abort_at_a_bumped_epoch_fences_the_old_producer_and_its_successor_starts_at_sequence_zero(log):
    producers = PartitionProducers()
    write(log, producers, 8, 0, 0, [b"a", b"b"])
    end(log, producers, 8, 1, commit=False)  # the coordinator fenced epoch 0 and aborted its transaction
    assert not producers.has_open_transaction(8)
    stale = encode_batch([(None, b"late")], timestamp=1, producer_id=8, producer_epoch=0, base_sequence=2,
                         attributes=ATTR_TRANSACTIONAL)
    with pytest.raises(Exception) as fenced:
        producers.check(read_header(stale))
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    write(log, producers, 8, 2, 0, [b"next"])  # a new epoch starts over at sequence 0
    assert producers.has_open_transaction(8)


def test_state_is_rebuilt_from_a_snapshot_and_the_log_after_it(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=300))
    producers = PartitionProducers()
    log.on_roll = lambda offset: producers.write_snapshot(log.directory, offset)
    committed = write(log, producers, 1, 0, 0, [b"c" * 100])
    end(log, producers, 1, 0, commit=True)
    aborted = write(log, producers, 2, 0, 0, [b"a" * 100])
    open_first = write(log, producers, 3, 0, 0, [b"o" * 100])
    marker = end(log, producers, 2, 0, commit=False)
    write(log, producers, 1, 0, 1, [b"d" * 100])
    assert len(log.segments) > 1 and snapshot_offsets(log.directory), "the log rolled and took snapshots"
    log.close()

    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=300))
    rebuilt = PartitionProducers.from_log(reopened)
    assert rebuilt.open_transactions == {3: open_first, 1: producers.open_transactions[1]}
    assert rebuilt.stable_below(reopened.log_end_offset) == open_first
    assert rebuilt.find_duplicate(read_header(encode_batch(
        [(None, b"d" * 100)], timestamp=1_000, producer_id=1, producer_epoch=0, base_sequence=1))) is not None
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == [
        AbortedTxn(2, aborted, marker, open_first)]
    assert committed == 0
    reopened.close()


def test_a_crash_that_lost_the_index_entry_of_an_abort_gets_it_back_on_replay(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig())
    producers = PartitionProducers()
    first = write(log, producers, 4, 0, 0, [b"x"])
    marker = end(log, producers, 4, 0, commit=False)
    log.close()
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()

    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig())
    PartitionProducers.from_log(reopened)
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == [AbortedTxn(4, first, marker, marker + 1)]
    reopened.close()
