"""The in-memory RaftLog and the divergence rules written over any RaftLog (Kafka's ReplicatedLog defaults)."""
from __future__ import annotations

import pytest

from controller.raft.log import (
    InMemoryRaftLog, LogEntry, OffsetAndEpoch, truncate_to_leader_epoch_end, validate_fetch_position,
)


def log_of(*epochs):
    log = InMemoryRaftLog()
    for epoch in epochs:
        log.append_as_leader([f"{epoch}@{log.end_offset()}".encode()], epoch)
    return log


def test_end_offset_last_epoch_read_and_truncate():
    log = log_of(1, 1, 3)
    assert (log.end_offset(), log.last_epoch()) == (3, 3)
    assert log.read(1, 5) == [LogEntry(1, 1, b"1@1"), LogEntry(2, 3, b"3@2")]
    assert log.read(3, 5) == []
    log.truncate_to(2)
    assert (log.end_offset(), log.last_epoch()) == (2, 1)
    assert (InMemoryRaftLog().end_offset(), InMemoryRaftLog().last_epoch()) == (0, 0)


def test_end_offset_for_epoch_is_where_the_largest_epoch_not_above_it_ends():
    log = log_of(1, 1, 3, 3, 5)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(4, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(5, 5)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(5, 5)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_follower_appends_must_continue_the_log_and_never_go_back_in_epoch():
    log = log_of(2)
    with pytest.raises(ValueError, match="append at offset 2 to a log ending at 1"):
        log.append_as_follower([LogEntry(2, 2, b"x")])
    with pytest.raises(ValueError, match="entry of epoch 1 after epoch 2"):
        log.append_as_follower([LogEntry(1, 1, b"x")])


@pytest.mark.parametrize("fetch_offset, last_epoch, diverging", [
    (0, 0, None),                      # an empty follower always matches
    (2, 1, None),                      # ends where epoch 1 ends
    (1, 1, None),                      # behind inside epoch 1
    (4, 2, OffsetAndEpoch(2, 1)),      # an epoch the leader never had: back to the end of 1
    (3, 1, OffsetAndEpoch(2, 1)),      # more of epoch 1 than the leader has
    (5, 3, OffsetAndEpoch(4, 3)),      # beyond the leader's end
])
def test_validate_fetch_position_names_where_the_follower_diverged(fetch_offset, last_epoch, diverging):
    assert validate_fetch_position(log_of(1, 1, 3, 3), fetch_offset, last_epoch) == diverging


def test_truncation_to_the_leaders_epoch_end_as_kafka_truncate_to_end_offset():
    follower = log_of(1, 1, 2, 2, 2)
    assert truncate_to_leader_epoch_end(follower, OffsetAndEpoch(2, 1)) == 2
    assert [entry.epoch for entry in follower.entries] == [1, 1]
    shorter_leader = log_of(1, 1, 1, 1)
    assert truncate_to_leader_epoch_end(shorter_leader, OffsetAndEpoch(3, 1)) == 3
    missing_epoch = log_of(1, 3, 3)  # no entry of epoch 2 here: cut after epoch 1
    assert truncate_to_leader_epoch_end(missing_epoch, OffsetAndEpoch(5, 2)) == 1
