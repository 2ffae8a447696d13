"""Long loops on an event loop give way every few milliseconds.

The controller serves every node's heartbeats, metadata fetches and admin requests on one
event loop, and a node serves its clients, replication and its own heartbeats on one, so a
loop over thousands of partitions must not hold either: it runs in slices of SLICE_SECONDS
and lets everything else (and a SIGTERM) in between.
"""
from __future__ import annotations

import asyncio
import gc
import time
from typing import AsyncIterator, Iterable, TypeVar

SLICE_SECONDS = 0.002
# Records in one metadata batch from which the objects it added are moved out of the GC's reach.
FREEZE_AFTER_RECORDS = 1000

T = TypeVar("T")


class TimeSlice:
    def __init__(self, seconds: float = SLICE_SECONDS):
        self.seconds = seconds
        self.started = time.perf_counter()

    async def give_way(self) -> None:
        """Let the event loop run other work if this slice is used up."""
        if time.perf_counter() - self.started >= self.seconds:
            # Twice: after the first, the loop queues the timers and I/O that came due behind this
            # task; the second lets them run before this task's next slice rather than after it.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            self.started = time.perf_counter()


async def gently(items: Iterable[T], time_slice: TimeSlice | None = None) -> AsyncIterator[T]:
    """Iterate items, giving way to the event loop every SLICE_SECONDS (of time_slice, if several
    loops share one)."""
    time_slice = time_slice or TimeSlice()
    for item in items:
        yield item
        await time_slice.give_way()


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic GC's generations.

    Called after a large metadata batch is applied: the objects it added (partitions, logs) live as
    long as their topics, and a full GC pass walking them all holds the event loop for many
    milliseconds. Young garbage cycles are collected first (a short pass), so that freezing keeps
    none of them; frozen objects are still freed by reference counting.
    """
    gc.collect(1)
    gc.freeze()
