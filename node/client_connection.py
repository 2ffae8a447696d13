"""One client connection: requests cut from what the socket delivers, answers written in order.

The event loop hands each chunk the socket delivers to `data_received`, which cuts the complete
frames out of it and starts each request at once (node.server dispatches it to a task). A client
may pipeline; answers go out strictly in request order, as Kafka's do: when a request's task ends,
its answer and every finished answer behind it are written straight to the transport. No reader
or writer task has to wake for a request, and no queue sits between them. Answers that carry file
regions (sendfile, node.socket_writes) need awaits, so they go out from a task of their own, and
answers that finish meanwhile wait for it.

A client that does not read its answers, or has too many requests in flight, has no more of its
requests started, and is not read, until it catches up, as Kafka mutes such a channel: whole frames
already delivered wait uncut until then, so at most MAX_IN_FLIGHT answers are owed at once. A
client over a quota is muted the same way for its throttle time (`throttle`, node.security.quotas). A
frame we cannot accept closes the connection once the answers owed before it are written; so does
the client's end of the stream. A handler that raises closes it at once.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import Callable

from cluster.formats.segment import FileRegion
from cluster.runtime import timeline
from node.security.session import PLAINTEXT_LISTENER, ListenerInfo, Session
from node.socket_writes import tls_buffers, write_pieces

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Requests per connection that may be in flight before we stop starting and reading its requests.
MAX_IN_FLIGHT = 1024


def _plain_session(listener: ListenerInfo, transport: asyncio.Transport) -> Session:
    peer = transport.get_extra_info("peername")
    return Session.opened(listener, peer[0] if peer else "")


class MalformedRequest(Exception):
    """The request cannot be parsed; Kafka closes the connection."""


class ClientConnection(asyncio.Protocol):
    def __init__(self, start_request: Callable[[memoryview, Session], asyncio.Task], max_request_bytes: int,
                 connections: set, listener: ListenerInfo = PLAINTEXT_LISTENER,
                 open_session: Callable[[ListenerInfo, asyncio.Transport], Session] | None = None):
        self.start_request = start_request
        self.max_request_bytes = max_request_bytes
        self.connections = connections
        self.listener = listener
        self.open_session = open_session or _plain_session
        self.transport: asyncio.Transport | None = None
        self.session = Session.opened(listener, "")
        self.partial = bytearray()  # bytes not cut yet: the start of a frame, or whole ones held back
        self.needed = 4  # bytes `partial` must hold before the next frame can be cut
        self.pending: deque[asyncio.Task] = deque()  # request tasks, in request order
        self.region_writer: asyncio.Task | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.drain_waiters: list[asyncio.Future] = []
        self.ending = False  # read no more; close once the answers owed are written
        self.lost = False
        self.throttles = 0  # quota throttles running: the connection is muted until they end
        self.admit: Callable | None = None  # node.security.quotas' check of a new connection's rate

    # The transport's side.

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.session = self.open_session(self.listener, transport)
        self.session.mute = self.throttle
        self.connections.add(self)
        if self.admit is not None:
            self.admit(self, self.session.client_host)

    def data_received(self, data: bytes) -> None:
        if self.ending:
            return
        if self.partial:
            self.partial += data
            if len(self.partial) < self.needed:
                return
            data = self._take_partial()
        self._cut_frames(memoryview(data))

    def eof_received(self) -> bool:
        self._end()
        # (keep the transport open for the answers still owed; TLS cannot half-close, and asyncio
        # warns when asked to)
        return not self.listener.uses_tls

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_drain_waiters(None)
        self._maybe_resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        # Requests still running finish as usual (a group join must not stop halfway); their
        # answers are dropped.
        self.lost = self.ending = True
        self.connections.discard(self)
        self._wake_drain_waiters(ConnectionResetError("the connection was lost"))

    # Requests in.

    def _cut_frames(self, view: memoryview) -> None:
        try:
            self._start_frames(view)
        except MalformedRequest as exc:
            log.info("closing connection from %s: %s", self.transport.get_extra_info("peername"), exc)
            self._end()
        if self._must_wait() and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def _take_partial(self) -> bytes:
        data = bytes(self.partial)  # (frames are views of it: a bytearray could not grow again)
        self.partial.clear()
        return data

    def _start_frames(self, view: memoryview) -> None:
        """Start each whole frame's request while the connection may take more; the rest waits in
        `partial` (and is started as answers go out, in _maybe_resume_reading)."""
        pos, end = 0, len(view)
        while end - pos >= 4 and not self._must_wait():
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > self.max_request_bytes:
                raise MalformedRequest(f"request size {size} outside 0..{self.max_request_bytes}")
            if end - pos - 4 < size:
                self.needed = 4 + size
                break
            frame = view[pos + 4:pos + 4 + size]
            pos += 4 + size
            if timeline.ENABLED:
                timeline.mark("request read")
            request = self.start_request(frame, self.session)
            self.pending.append(request)
            request.add_done_callback(self._answered)
        else:
            self.needed = 4
        if pos < end:
            self.partial += view[pos:]

    def _must_wait(self) -> bool:
        return len(self.pending) >= MAX_IN_FLIGHT or self.writing_paused or self.throttles > 0

    def throttle(self, delay_ms: int) -> None:
        """Read no request from this client for delay_ms, as Kafka mutes a throttled client's channel."""
        if self.lost:
            return
        self.throttles += 1
        self._pause_reading()
        asyncio.get_running_loop().call_later(delay_ms / 1000, self._throttle_ended)

    def _throttle_ended(self) -> None:
        self.throttles -= 1
        self._maybe_resume_reading()

    def close_after(self, delay_ms: int) -> None:
        """Refuse the connection: read nothing from it, and close it after delay_ms."""
        self.ending = True
        self._pause_reading()
        asyncio.get_running_loop().call_later(delay_ms / 1000, self.transport.close)

    def _pause_reading(self) -> None:
        if not self.reading_paused and not self.lost:
            self.reading_paused = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if not self.reading_paused or self._must_wait() or self.ending:
            return
        if len(self.partial) >= self.needed:  # whole frames that came while the connection had to wait
            self._cut_frames(memoryview(self._take_partial()))
            if self._must_wait() or self.ending:
                return
        self.reading_paused = False
        self.transport.resume_reading()

    def _end(self) -> None:
        """Read no more; the connection closes when every answer owed is written."""
        self.ending = True
        self.partial.clear()
        if not self.pending and self.region_writer is None:
            self.transport.close()
        elif not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    # Answers out.

    def _answered(self, _request: asyncio.Task) -> None:
        if self.region_writer is None:
            self._write_finished()

    def _write_finished(self) -> None:
        buffers: list = []
        pending = self.pending
        while pending and pending[0].done():
            answer = self._answer_of(pending.popleft())
            if answer is None or self.lost:
                continue
            if any(type(piece) is FileRegion for piece in answer):
                self.region_writer = asyncio.create_task(self._write_regions(buffers + answer))
                return
            buffers += answer
        if buffers and not self.lost:
            if timeline.ENABLED:
                timeline.mark("answer writing")
            self.transport.writelines(tls_buffers(buffers) if self.listener.uses_tls else buffers)
            if timeline.ENABLED:
                timeline.mark("answer written")
        if self.session.failed and not self.ending:
            log.info("closing connection from %s: authentication failed", self.session.client_host)
            self._end()
            return
        if self.ending and not pending:
            self.transport.close()
        else:
            self._maybe_resume_reading()

    def _answer_of(self, request: asyncio.Task) -> list | None:
        if request.cancelled():
            return None
        failure = request.exception()
        if failure is None:
            return request.result()
        if not self.lost:
            # As Kafka does on an unexpected error: the connection is closed.
            log.error("request handler failed; closing the connection", exc_info=failure)
            self.cancel()
            self.transport.close()
        return None

    async def _write_regions(self, pieces: list) -> None:
        try:
            if timeline.ENABLED:
                timeline.mark("answer writing")
            await write_pieces(self, pieces)
        except ConnectionError:
            self.cancel()
        except Exception:
            log.exception("writing an answer failed; closing the connection")
            self.cancel()
            self.transport.close()
        finally:
            self.region_writer = None
        self._write_finished()

    def cancel(self) -> list[asyncio.Task]:
        """Stop every request still running (the node is stopping); returns their tasks to wait for."""
        self.lost = self.ending = True
        tasks = list(self.pending)
        if self.region_writer is not None:
            tasks.append(self.region_writer)
        for task in tasks:
            task.cancel()
        return tasks

    # What node.socket_writes.write_pieces asks of a writer (as of an asyncio.StreamWriter).

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def writelines(self, buffers: list) -> None:
        self.transport.writelines(buffers)

    def get_extra_info(self, name: str):
        return self.transport.get_extra_info(name)

    async def drain(self) -> None:
        if self.lost:
            raise ConnectionResetError("the connection was lost")
        if self.writing_paused:
            waiter = asyncio.get_running_loop().create_future()
            self.drain_waiters.append(waiter)
            await waiter

    def _wake_drain_waiters(self, exc: Exception | None) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if waiter.done():
                continue
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)
