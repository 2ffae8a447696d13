"""The replicated log as the Raft state machine sees it, and an in-memory one for tests.

Kafka's ReplicatedLog (raft/src/main/java/org/apache/kafka/raft/ReplicatedLog.java) is the model:
an end offset, the epoch of the last entry, `endOffsetForEpoch` (where an epoch's entries end, from
the leader-epoch cache) for divergence, reads, appends as leader and as follower, and truncation.
`RaftLog` keeps only those primitives so that an adapter over the metadata PartitionLog stays
small; divergence checks and truncation to a leader's epoch end are written once here, over the
primitives, as Kafka's ReplicatedLog default methods are.

Differs from Kafka: the state machine sees entries, not records. In memory one entry is one offset;
on disk (controller/metadata_raft_log.py) one entry is one record batch, starting at the batch's
base offset, so offsets count records as Kafka's do. A control entry (the LeaderChangeMessage a new
leader writes) is an entry with `control` set. A quorum's logs keep everything from offset 0, so a
fetch is never answered with a snapshot id.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class LogEntry:
    offset: int
    epoch: int
    payload: bytes
    control: bool = False


@dataclass(frozen=True)
class OffsetAndEpoch:
    offset: int
    epoch: int

    def __ge__(self, other: "OffsetAndEpoch") -> bool:
        """Kafka's OffsetAndEpoch order: by epoch, then by offset (a log is "at least as up to date")."""
        return (self.epoch, self.offset) >= (other.epoch, other.offset)


class RaftLog(Protocol):
    """What the state machine needs of a log. Appends are durable when the call returns."""

    def end_offset(self) -> int:
        """The offset the next entry gets."""

    def last_epoch(self) -> int:
        """The epoch of the last entry, 0 when the log is empty."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's endOffsetForEpoch: the largest epoch in the log at most `epoch`, and the offset
        where its entries end (the next epoch's first offset, or the end offset). (0, 0) when no
        entry has such an epoch."""

    def read(self, start: int, max_entries: int) -> Sequence[LogEntry]:
        """Entries from `start` (at most `max_entries`), empty at or beyond the end."""

    def append_as_leader(self, payloads: Sequence[bytes], epoch: int, control: bool = False) -> int:
        """Appends one entry per payload in `epoch`; returns the first one's offset."""

    def append_as_follower(self, entries: Sequence[LogEntry]) -> None:
        """Appends entries read from the leader; the first one's offset is the end offset."""

    def truncate_to(self, offset: int) -> None:
        """Removes every entry at `offset` and after."""


def validate_fetch_position(log: RaftLog, fetch_offset: int, last_fetched_epoch: int) -> OffsetAndEpoch | None:
    """Kafka's validateOffsetAndEpoch on the leader: None when the follower's log matches the
    leader's up to `fetch_offset`, else where the leader's log for the follower's epoch ends (the
    diverging epoch the follower truncates to)."""
    if fetch_offset == 0:
        return None
    found = log.end_offset_for_epoch(last_fetched_epoch)
    if found.epoch != last_fetched_epoch or found.offset < fetch_offset:
        return found
    return None


def truncate_to_leader_epoch_end(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Kafka's truncateToEndOffset on a follower: cuts the log where it stops agreeing with the
    leader's end of `diverging.epoch`; returns the new end offset."""
    if diverging.epoch == 0:
        truncation = min(diverging.offset, log.end_offset())
    else:
        local = log.end_offset_for_epoch(diverging.epoch)
        # Same epoch on both sides: the shorter end wins. The follower has no entry of that epoch:
        # its entries after its own last earlier epoch cannot be the leader's.
        truncation = min(local.offset, diverging.offset if local.epoch == diverging.epoch else log.end_offset())
    log.truncate_to(truncation)
    return truncation


class InMemoryRaftLog:
    """A `RaftLog` in a list, for tests and the simulation; it outlives the replica that uses it,
    as a log directory outlives a crashed process."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        # Kafka's leader-epoch cache: each epoch and the offset of its first entry, ascending.
        self._epoch_starts: list[tuple[int, int]] = []

    def end_offset(self) -> int:
        return len(self.entries)

    def last_epoch(self) -> int:
        return self._epoch_starts[-1][0] if self._epoch_starts else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        index = bisect.bisect_right(self._epoch_starts, (epoch, float("inf"))) - 1
        if index < 0:
            return OffsetAndEpoch(0, 0)
        found_epoch = self._epoch_starts[index][0]
        if index + 1 < len(self._epoch_starts):
            return OffsetAndEpoch(self._epoch_starts[index + 1][1], found_epoch)
        return OffsetAndEpoch(len(self.entries), found_epoch)

    def read(self, start: int, max_entries: int) -> Sequence[LogEntry]:
        return self.entries[start:start + max_entries]

    def append_as_leader(self, payloads: Sequence[bytes], epoch: int, control: bool = False) -> int:
        first = len(self.entries)
        self._append([LogEntry(first + i, epoch, payload, control) for i, payload in enumerate(payloads)])
        return first

    def append_as_follower(self, entries: Sequence[LogEntry]) -> None:
        if entries and entries[0].offset != len(self.entries):
            raise ValueError(f"append at offset {entries[0].offset} to a log ending at {len(self.entries)}")
        self._append(entries)

    def _append(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            if entry.epoch < self.last_epoch():
                raise ValueError(f"entry of epoch {entry.epoch} after epoch {self.last_epoch()}")
            if entry.epoch != self.last_epoch():
                self._epoch_starts.append((entry.epoch, entry.offset))
            self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        del self.entries[offset:]
        while self._epoch_starts and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()
