"""The log dir's offset checkpoint files, as Kafka keeps them: each hosted partition's high
watermark (`replication-offset-checkpoint`), and each log start offset that DeleteRecords (or a
leader's) moved past its first segment's base (`log-start-offset-checkpoint`).

Read once at start, for the logs opened then; written when what they would hold changed, every
replica.high.watermark.checkpoint.interval.ms in a worker thread, after a DeleteRecords, and when
the node stops.
"""
from __future__ import annotations

import threading
from pathlib import Path

from cluster.formats.offset_checkpoint import (
    HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint, write_offset_checkpoint,
)

Key = tuple[str, int]
Due = list[tuple["CheckpointFile", dict[Key, int]]]


class CheckpointFile:
    def __init__(self, path: Path):
        self.path = path
        self.offsets = read_offset_checkpoint(path)  # as last written, or read at start
        self._writing = threading.Lock()  # a periodic write in a thread may still run when the node stops

    def write(self, offsets: dict[Key, int]) -> None:
        with self._writing:
            write_offset_checkpoint(self.path, offsets)


class LogCheckpoints:
    def __init__(self, log_dir: Path):
        self.high_watermarks = CheckpointFile(Path(log_dir) / HIGH_WATERMARK_CHECKPOINT)
        self.log_starts = CheckpointFile(Path(log_dir) / LOG_START_OFFSET_CHECKPOINT)

    def due(self, partitions: dict) -> Due:
        """Each file whose offsets changed, with what it is to hold now (taken as written: a write
        that fails calls `failed`)."""
        high_watermarks = {key: partition.log.high_watermark for key, partition in partitions.items()}
        log_starts = {key: partition.log.log_start_offset for key, partition in partitions.items()
                      if partition.log.log_start_offset > partition.log.segments[0].base_offset}
        due = []
        for checkpoint, offsets in ((self.high_watermarks, high_watermarks), (self.log_starts, log_starts)):
            if offsets != checkpoint.offsets:
                checkpoint.offsets = offsets
                due.append((checkpoint, offsets))
        return due

    @staticmethod
    def write(due: Due) -> None:
        for checkpoint, offsets in due:
            checkpoint.write(offsets)

    @staticmethod
    def failed(due: Due) -> None:
        for checkpoint, _ in due:
            checkpoint.offsets = {}  # written again next time
