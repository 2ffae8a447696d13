"""The event loop every server process runs on: uvloop.

uvloop (libuv, written in Cython) is the standard fast loop for asyncio servers: its socket
transports do their reads, writes and callbacks in C where the standard library's selector
loop runs Python per event, and its `writelines` hands a response's buffers to the kernel
as one vectored write instead of joining them first (Python 3.11's selector transport
copies them into one bytes object).
"""
from __future__ import annotations

import asyncio
from typing import Any, Coroutine

import uvloop


def run(main: Coroutine) -> Any:
    """asyncio.run(main) on a uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
