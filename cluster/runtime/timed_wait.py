"""Waiting for a future of our own with a deadline, without asyncio.wait_for's machinery.

`asyncio.wait_for` (Python 3.11) wraps what it waits for, adds a second future, and wakes
the waiting task one loop turn after the future settles. The produce and fetch paths wait
this way several times per acks=all write (a commit waiter, each follower's parked fetch),
so they use `result_within`: one timer that settles the future itself when time is up.
"""
from __future__ import annotations

import asyncio
from typing import Any


async def result_within(future: asyncio.Future, timeout_s: float, timed_out: Any) -> Any:
    """The future's result, or `timed_out` if it is not settled within timeout_s.

    Only for futures the caller created and nobody else awaits: when time is up, the future
    itself is settled with `timed_out`. Cancelling the waiting task cancels the future."""
    if future.done():
        return future.result()
    timer = asyncio.get_running_loop().call_later(timeout_s, _settle, future, timed_out)
    try:
        return await future
    finally:
        timer.cancel()


def _settle(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)
