"""Kafka's offset checkpoint files (`replication-offset-checkpoint`, ...): version 0, a count, then
one `topic partition offset` line per partition."""
from __future__ import annotations

from pathlib import Path

from cluster.formats.files import write_atomically

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
VERSION = 0


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The offsets a checkpoint file holds; empty when it is missing or not in Kafka's format."""
    try:
        lines = path.read_text().splitlines()
        if int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            return {}
        offsets = {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            offsets[(topic, int(partition))] = int(offset)
        return offsets
    except (OSError, ValueError, IndexError):
        return {}


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    body = "".join(f"{topic} {partition} {offset}\n" for (topic, partition), offset in sorted(offsets.items()))
    write_atomically(path, f"{VERSION}\n{len(offsets)}\n{body}")
