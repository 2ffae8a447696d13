"""The file-system steps of a log dir: making a directory once, and writing a small file whole
through a rename, as Kafka writes its checkpoints."""
from __future__ import annotations

import os
from pathlib import Path


def created_directory(directory: Path) -> bool:
    """Make directory (and its parents); False when it was there already."""
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        return False
    return True


def write_atomically(path: Path, text: str) -> None:
    """Through a temp file and a rename, as Kafka writes checkpoints; plain os calls, as a node
    creating thousands of partitions writes two of these per partition."""
    write_bytes_atomically(path, text.encode())


def write_bytes_atomically(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Through `<path>.tmp` and a rename, so a reader finds the old file or the new one whole;
    with sync, the bytes are on disk before the rename."""
    temp = f"{path}.tmp"
    view = memoryview(data)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)


def fsync_directory(directory: Path) -> None:
    """Make a rename in directory durable, as Kafka's atomicMoveWithFallback flushes the parent."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
