"""The Kafka listener: framing, request headers, dispatch and in-order responses.

A client may pipeline many requests on one connection; each is handled in its own task
and the responses are written strictly in request order, as Kafka does. Anything we cannot
parse closes that connection only: a bad client never takes the node down.

Connections are asyncio protocols rather than streams: frames are cut from what the socket
delivers as it arrives, and a response goes to the socket from the task that produced it.
An acks=all write with RF=3 brings its leader three requests (the Produce and each follower's
next Fetch) and three answers to write (the Produce's, and each follower's parked Fetch), and
streams cost a reader wake-up per frame and a writer task per connection in between, about a
tenth of the leader's CPU per write (`python -m cluster.bench_replication --only latency`).
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from dataclasses import dataclass

from cluster.formats.records import read_uvarint
from cluster.runtime.shutdown import cancel_and_wait
from node.apis import HANDLERS, ApiHandler
from node.apis import api_versions
from node.faults import error_response, party_of
from node.spliced_response import SplicedResponse

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
# Requests per connection that may be in flight before we stop reading from it.
MAX_IN_FLIGHT = 1024


class MalformedRequest(Exception):
    """The request cannot be parsed; Kafka closes the connection."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""


def parse_header(frame: memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """Request header v1 (or v2 with tagged fields when flexible); returns (header, body start)."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequest("request shorter than its header")
    api_key, api_version, correlation_id, client_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise MalformedRequest("client id runs past the end of the request")
        client_id = bytes(frame[pos:pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def skip_tagged_fields(frame: memoryview, pos: int) -> int:
    try:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    except Exception as exc:
        raise MalformedRequest("bad tagged fields in request header") from exc
    if pos > len(frame):
        raise MalformedRequest("tagged fields run past the end of the request")
    return pos


def peek_api(frame: memoryview) -> tuple[int, int, int]:
    if len(frame) < 8:
        raise MalformedRequest("request shorter than its header")
    return struct.unpack_from(">hhi", frame, 0)


class KafkaServer:
    def __init__(self, broker, max_request_bytes: int):
        self.broker = broker
        self.max_request_bytes = max_request_bytes
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[Connection] = set()

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Connection(self), host, port)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server:
            self.server.close()
        # The node is stopping: answers not yet written go with their connections.
        tasks = [task for connection in list(self.connections) for task in connection.abort()]
        await cancel_and_wait(tasks)

    def read_request(self, frame: memoryview, peer) -> tuple | list:
        """(handler, header, request) to answer, or the answer itself when there is nothing to handle."""
        api_key, api_version, correlation_id = peek_api(frame)
        handler = HANDLERS.get(api_key)
        if handler is None:
            raise MalformedRequest(f"unknown api key {api_key}")
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == api_versions.API_KEY:
                return self._unsupported_api_versions(correlation_id)
            raise MalformedRequest(f"unsupported version {api_version} of api {api_key}")
        header, body_start = parse_header(frame, handler.request_is_flexible(api_version))
        header.client_host = f"/{peer[0]}" if peer else ""
        try:
            request = handler.request.decode(frame[body_start:], version=api_version)
        except Exception as exc:
            raise MalformedRequest(f"cannot decode {handler.request.name} v{api_version}: {exc}") from exc
        return handler, header, request

    async def answer(self, handler: ApiHandler, header: RequestHeader, request) -> list | None:
        faults = self.broker.faults
        party = party_of(header.client_id)
        await faults.wait_reachable(party)
        injected = faults.take_injected_error(handler.api_key)
        if injected is not None:
            response = error_response(handler.response, request, header.api_version, injected)
        else:
            response = await handler.handle(self.broker, header, request)
        await faults.before_response(party)
        if response is None:
            return None
        if isinstance(response, SplicedResponse):
            body = response.encode_pieces(header.api_version)
        else:
            body = [response.encode(version=header.api_version)]
        return self._frame_response(header.correlation_id, body, handler.response_header_is_flexible(header.api_version))

    def _unsupported_api_versions(self, correlation_id: int) -> list:
        body = api_versions.unsupported_version_response().encode(version=0)
        return self._frame_response(correlation_id, [body], flexible=False)

    @staticmethod
    def _frame_response(correlation_id: int, body: list, flexible: bool) -> list:
        """The response's buffers, size and header first; the body's buffers are not joined."""
        header = _CORRELATION.pack(correlation_id) + (b"\x00" if flexible else b"")
        size = len(header) + sum(len(piece) for piece in body)
        return [_SIZE.pack(size) + header, *body]


@dataclass(slots=True)
class InFlight:
    """A request read and not yet answered on the wire, in its connection's request order."""

    answer: list | None = None
    answered: bool = False
    task: asyncio.Task | None = None


class Connection(asyncio.Protocol):
    """One client connection: frames in as they arrive, answers out strictly in request order.

    An answer is written by the request's own task the moment it is ready and every earlier
    request has been answered, together with later ones already answered, in one vectored
    write: no writer task between a handler and the socket. Reading pauses while the socket's
    send buffer is full or MAX_IN_FLIGHT requests are unanswered.
    """

    def __init__(self, server: KafkaServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self.partial = bytearray()  # the start of a frame not yet whole
        self.in_flight: deque[InFlight] = deque()
        self.send_buffer_full = False
        self.reading = True
        self.closing = False  # read no more requests; close once those read are answered

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort()
        self.server.connections.discard(self)

    def abort(self) -> list[asyncio.Task]:
        """Close at once: answers not yet written are dropped. Returns the tasks cancelled."""
        self.closing = True
        tasks = [entry.task for entry in self.in_flight if entry.task is not None and not entry.task.done()]
        for task in tasks:
            task.cancel()
        self.in_flight.clear()
        if self.transport is not None:
            self.transport.abort()
        return tasks

    def eof_received(self) -> bool:
        # The client sends no more: answer what it sent (the transport stays open for that), then close.
        self._stop_reading()
        return bool(self.in_flight)

    def pause_writing(self) -> None:
        self.send_buffer_full = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.send_buffer_full = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self._take_frames(data)
        except MalformedRequest as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self._stop_reading()
        except Exception:
            log.exception("reading a request failed; closing the connection")
            self.abort()
        self._update_reading()

    def _take_frames(self, data: bytes) -> None:
        """Start every whole frame received; a frame that arrived whole in `data` is not copied."""
        if self.partial:
            self.partial += data
            if not self._frame_buffered():
                return
            data, self.partial = bytes(self.partial), bytearray()
        view = memoryview(data)
        pos = 0
        while len(view) - pos >= _SIZE.size and len(self.in_flight) < MAX_IN_FLIGHT:
            end = pos + _SIZE.size + self._frame_size(view, pos)
            if end > len(view):
                break
            self._start(view[pos + _SIZE.size:end])
            pos = end
        if pos < len(view):
            self.partial += view[pos:]

    def _frame_buffered(self) -> bool:
        """Whether the frame begun in `partial` is whole (checked before it is copied out)."""
        return (len(self.partial) >= _SIZE.size
                and len(self.partial) >= _SIZE.size + self._frame_size(self.partial, 0))

    def _frame_size(self, data, pos: int) -> int:
        (size,) = _SIZE.unpack_from(data, pos)
        limit = self.server.max_request_bytes
        if size < 0 or size > limit:
            raise MalformedRequest(f"request size {size} outside 0..{limit}")
        return size

    def _start(self, frame: memoryview) -> None:
        read = self.server.read_request(frame, self.peer)
        entry = InFlight()
        self.in_flight.append(entry)
        if isinstance(read, list):
            entry.answer, entry.answered = read, True
            self._write_answered()
        else:
            entry.task = asyncio.get_running_loop().create_task(self._answer(entry, read))

    async def _answer(self, entry: InFlight, read: tuple) -> None:
        try:
            # (the handler's coroutine is made here: a task cancelled before it runs leaves none unawaited)
            entry.answer = await self.server.answer(*read)
        except Exception:
            # As Kafka does on an unexpected error: the client sees the connection close.
            log.exception("request handler failed; closing the connection")
            self.abort()
            return
        entry.answered = True
        self._write_answered()

    def _write_answered(self) -> None:
        """Write the answers at the head of the line that are ready, in one vectored write."""
        buffers: list = []
        in_flight = self.in_flight
        while in_flight and in_flight[0].answered:
            answer = in_flight.popleft().answer
            if answer:
                buffers.extend(answer)
        if buffers and not self.transport.is_closing():
            self.transport.writelines(buffers)
        if self.partial and not self.closing and len(in_flight) < MAX_IN_FLIGHT:
            self.data_received(b"")  # frames held back while MAX_IN_FLIGHT were unanswered
        elif self.closing and not in_flight:
            self.transport.close()
        else:
            self._update_reading()

    def _stop_reading(self) -> None:
        self.closing = True
        self.partial = bytearray()
        if not self.in_flight:
            self.transport.close()

    def _update_reading(self) -> None:
        wanted = not self.closing and not self.send_buffer_full and len(self.in_flight) < MAX_IN_FLIGHT
        if wanted != self.reading and not self.transport.is_closing():
            self.reading = wanted
            if wanted:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()
