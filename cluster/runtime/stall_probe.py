"""How late an event loop runs a task that asks to wake every millisecond: its longest stall.

Used by the benchmarks only (a node arms one through its admin port while a benchmark runs):
an idle process must not wake a thousand times a second.
"""
from __future__ import annotations

import asyncio
import time

PROBE_INTERVAL_S = 0.001


class StallProbe:
    """Records the longest delay between asking the event loop to wake and waking: in wall-clock
    time, and in this thread's CPU time (the part the process's own work caused, without the
    time the operating system gave other processes on a busy machine)."""

    def __init__(self):
        self.longest_s = self.longest_cpu_s = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            asked, asked_cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.longest_s = max(self.longest_s, time.perf_counter() - asked - PROBE_INTERVAL_S)
            self.longest_cpu_s = max(self.longest_cpu_s, time.thread_time() - asked_cpu - PROBE_INTERVAL_S)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self.longest_s = self.longest_cpu_s = 0.0
        if not self.running:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> tuple[float, float]:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        return self.longest_s, self.longest_cpu_s
