"""When each step of a request ran, in every process: the data of `python -m benchmarks.timeline`.

Off unless KRAFTWERK_TIMELINE names a directory when the process starts. Then every `mark` keeps
(time, step) in memory, and the process writes them to <directory>/<pid>.timeline as it exits.
The times are time.perf_counter_ns, CLOCK_MONOTONIC on Linux: one clock for every process on the
machine, so the steps of one acks=all write line up across the client, its leader and the
followers. Off, a mark costs its call site one test of the ENABLED constant.
"""
from __future__ import annotations

import atexit
import os
import time

DIRECTORY = os.environ.get("KRAFTWERK_TIMELINE")
ENABLED = bool(DIRECTORY)
SUFFIX = ".timeline"
_marks: list[tuple[int, str]] = []


def mark(step: str) -> None:
    _marks.append((time.perf_counter_ns(), step))


def _write() -> None:
    # (registered in the fork server before it forks: each node writes its own marks under its own pid)
    if _marks:
        with open(os.path.join(DIRECTORY, f"{os.getpid()}{SUFFIX}"), "w") as out:
            out.writelines(f"{at} {step}\n" for at, step in _marks)


if ENABLED:
    atexit.register(_write)
