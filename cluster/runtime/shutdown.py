"""Orderly ends for asyncio processes: every task cancelled once, and waited for.

Cancelling a task a second time while it unwinds from the first can interrupt its cleanup:
a condition wait inside `asyncio.wait_for` that is cancelled twice leaves its lock released
by one task and re-acquired by another, and whoever waits on that condition next never wakes
(a controller that hung for the whole stop grace period). `asyncio.run` cancels every task
left when the main coroutine returns, so processes cancel theirs here first, exactly once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

log = logging.getLogger(__name__)

UNWIND_TIMEOUT_S = 5.0


def _cancelling(task: asyncio.Task) -> bool:
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling and cancelling())


async def cancel_and_wait(tasks: Iterable[asyncio.Task], timeout: float = UNWIND_TIMEOUT_S) -> None:
    """Cancel each task not already being cancelled, then wait until all have finished."""
    tasks = list(tasks)
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        if not _cancelling(task):
            task.cancel()
    done, still_running = await asyncio.wait(pending, timeout=timeout) if pending else (set(), set())
    for task in [*done, *(task for task in tasks if task not in pending)]:
        # Retrieved here, also from a task that had ended before (say, failing in the same moment as
        # the one its caller saw end), so that asyncio does not report it as never retrieved; a task
        # that failed because what it talked to closed first is part of stopping, not an error.
        if not task.cancelled() and task.exception() is not None:
            log.debug("%s ended with %r while stopping", _describe(task), task.exception())
    for task in still_running:
        log.warning("%s did not stop within %.0fs", _describe(task), timeout)


def cancel_requested() -> bool:
    """Whether the running task has been asked to stop. Loops check it as well as catching
    CancelledError: up to Python 3.11, `asyncio.wait_for` swallows a cancellation that arrives in
    the same step as what it waits for, and the task would then run on, never asked again."""
    return _cancelling(asyncio.current_task())


def _describe(task: asyncio.Task) -> str:
    coroutine = task.get_coro()
    return getattr(coroutine, "__qualname__", None) or task.get_name()


async def cancel_remaining_tasks(timeout: float = UNWIND_TIMEOUT_S) -> None:
    """Cancel every other task of the running loop once, and wait for them (the last step of a process)."""
    current = asyncio.current_task()
    await cancel_and_wait([task for task in asyncio.all_tasks() if task is not current], timeout)
