"""The leader epochs a partition log holds, as Kafka's LeaderEpochFileCache keeps them: (epoch,
start offset) pairs, ascending, in the partition's `leader-epoch-checkpoint` (version 0, a count,
then one `epoch start_offset` line per epoch), rewritten whenever they change."""
from __future__ import annotations

import bisect
from pathlib import Path

from cluster.formats.files import write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: Path, entries: list[tuple[int, int]]):
        self.path = directory / CHECKPOINT_FILE
        self.entries = entries

    @classmethod
    def load(cls, directory: Path) -> "LeaderEpochCache":
        """The epochs the directory's checkpoint holds; none when it has no checkpoint."""
        path = directory / CHECKPOINT_FILE
        if not path.exists():
            return cls(directory, [])
        lines = path.read_text().split("\n")
        count = int(lines[1]) if len(lines) > 1 and lines[1].strip() else 0
        return cls(directory, [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]])

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        if self.entries and self.entries[-1][0] >= epoch:
            return
        self.entries = [(e, s) for e, s in self.entries if s < start_offset]
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """As Kafka's LeaderEpochFileCache.endOffsetFor: the latest epoch ends at the log end;
        an older one at the start of the next higher epoch, answered with the largest known
        epoch <= it (or itself when it predates them all); an unknown higher one is (-1, -1)."""
        if epoch < 0 or not self.entries:
            return -1, -1
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self.entries, epoch, key=lambda entry: entry[0])
        if higher == len(self.entries):
            return -1, -1
        floor_epoch = self.entries[higher - 1][0] if higher > 0 else epoch
        return floor_epoch, self.entries[higher][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Entries starting at or after the new log end go."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Entries ending before the new log start go; the one spanning it now starts there."""
        first_kept = max(bisect.bisect_right(self.entries, start_offset, key=lambda entry: entry[1]) - 1, 0)
        kept = self.entries[first_kept:]
        if kept and kept[0][1] < start_offset:
            kept[0] = (kept[0][0], start_offset)
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        body = "".join(f"{epoch} {start}\n" for epoch, start in self.entries)
        write_atomically(self.path, f"0\n{len(self.entries)}\n{body}")
