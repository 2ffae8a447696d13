"""A follower's connection to its leader: one request at a time, its answer cut from what the
socket delivers.

The event loop hands each chunk the socket delivers to `data_received`; once a whole answer is
there, the waiting fetcher's future gets it. An answer that comes in one chunk, as a follower's
small answers do, is not copied. With no answer within the timeout the connection is aborted and
the wait fails: the fetcher reconnects instead of waiting out TCP's retransmission backoff after a
network cut heals.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from cluster.runtime import timeline

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class LeaderConnection(asyncio.Protocol):
    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.partial = bytearray()  # what came of an answer not yet whole
        self.answer: asyncio.Future | None = None
        self.lost: Exception | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> "LeaderConnection":
        _, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    async def exchange(self, request: bytes, timeout_s: float) -> memoryview:
        """Send a framed request and return its framed answer without the size."""
        if self.lost is not None:
            raise self.lost
        loop = asyncio.get_running_loop()
        self.answer = answer = loop.create_future()
        # One uvloop timer, set and cancelled: asyncio.timeout costs several times as much a request.
        give_up = loop.call_later(timeout_s, self._give_up, timeout_s)
        try:
            if timeline.ENABLED:
                timeline.mark("follower sent fetch")
            self.transport.write(request)
            if self.partial:
                self._deliver(b"")
            return await answer
        finally:
            give_up.cancel()
            self.answer = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.answer is None or self.answer.done():
            self.partial += data  # (nobody asked: kept for the next answer, as a stream would)
        else:
            self._deliver(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc if isinstance(exc, OSError) else ConnectionResetError("the leader closed the connection")
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(self.lost)

    def _deliver(self, data: bytes) -> None:
        if not self.partial and len(data) >= 4 and _SIZE.unpack_from(data)[0] + 4 == len(data):
            self.answer.set_result(memoryview(data)[4:])
            return
        self.partial += data
        if len(self.partial) < 4:
            return
        (size,) = _SIZE.unpack_from(self.partial)
        if size < 0:
            self.answer.set_exception(ValueError(f"the leader's answer has size {size}"))
            self.transport.abort()
            return
        end = 4 + size
        if len(self.partial) == end:  # (the usual case: one request at a time, so nothing comes after)
            whole, self.partial = self.partial, bytearray()
        elif len(self.partial) > end:
            whole = self.partial[:end]
            del self.partial[:end]
        else:
            return
        self.answer.set_result(memoryview(whole)[4:])

    def _give_up(self, timeout_s: float) -> None:
        log.info("no answer from %s within %.1f s: reconnecting", self.transport.get_extra_info("peername"),
                 timeout_s)
        self.transport.abort()
