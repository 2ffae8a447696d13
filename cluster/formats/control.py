"""The msgpack control plane between nodes, the controller and the launcher.

Frames are a 4-byte big-endian length followed by a msgpack map. A request is
``{"v": 1, "id": n, "op": name, ...arguments}``; its reply is ``{"v": 1, "id": n,
"ok": true, ...result}`` or ``{"v": 1, "id": n, "ok": false, "error": text}``. Many
requests may be in flight on one connection; replies may come back in any order and are
matched by id. Oversized or undecodable frames close the connection; an unknown op gets
an error reply.

When the cluster's controller listener is secured, the channel runs over mutual TLS
(`cluster.runtime.tls.control_channel_tls`): servers and clients pass their SSL contexts as `tls`.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
import struct
from typing import Any, Awaitable, Callable

import msgpack

from cluster.runtime.shutdown import cancel_and_wait

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 64 * 1024 * 1024
# Frames larger than this are decoded in slices of this size, giving way to the event loop in between.
DECODE_SLICE_BYTES = 64 * 1024
_LENGTH = struct.Struct(">I")

log = logging.getLogger(__name__)

Handler = Callable[[dict, "ControlConnection"], Awaitable[dict | None]]


class ControlError(Exception):
    """The peer answered a control request with an error, or the connection failed."""


class BadControlRequest(ValueError):
    """A request's arguments are missing or of the wrong type: answered with an error, not logged as a fault."""


class NotController(ControlError):
    """A controller that is not the quorum's active one was asked to act (Kafka's NOT_CONTROLLER).

    `leader` is the active controller as (id, host, port) when the one asked knows it, else None (an
    election is under way). A server handler raises it; the reply carries `not_controller` and
    `leader`, and the client raises it again so that the caller can go to the leader.
    """

    def __init__(self, leader: tuple[int, str, int] | None, message: str | None = None):
        self.leader = tuple(leader) if leader else None
        super().__init__(message or (f"not the active controller: controller {leader[0]} at {leader[1]}:{leader[2]} is"
                                     if leader else "not the active controller: no controller is active yet"))


def _raise_error(reply: dict, default: str) -> None:
    if reply.get("not_controller"):
        raise NotController(reply.get("leader"), reply.get("error"))
    raise ControlError(reply.get("error", default))


def encode_frame(message: dict) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    return _LENGTH.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> dict:
    (length,) = _LENGTH.unpack(await reader.readexactly(4))
    if length > MAX_FRAME_BYTES:
        raise ControlError(f"control frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    if length <= DECODE_SLICE_BYTES:
        # Integer map keys are allowed: partition -> replicas maps, for one, travel as they are.
        message = msgpack.unpackb(await reader.readexactly(length), raw=False, strict_map_key=False)
    else:
        message = await _decode_in_slices(reader, length)
    if not isinstance(message, dict):
        raise ControlError("control frame is not a map")
    return message


async def _decode_in_slices(reader: asyncio.StreamReader, length: int) -> Any:
    """Decode a large frame a slice at a time (msgpack's unpacker resumes where it stopped), so that
    decoding megabytes never holds the event loop for more than a moment."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=length)
    remaining = length
    while remaining:
        piece = await reader.readexactly(min(DECODE_SLICE_BYTES, remaining))
        remaining -= len(piece)
        unpacker.feed(piece)
        try:
            message = unpacker.unpack()
        except msgpack.OutOfData:
            await asyncio.sleep(0)
            continue
        if remaining or unpacker.tell() != length:
            raise ControlError("control frame holds more than one message")
        return message
    raise ControlError("control frame ends inside its message")


class ControlConnection:
    """Server side of one peer connection; handlers may keep it to learn when the peer goes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.closed = asyncio.get_running_loop().create_future()
        self.state: dict[str, Any] = {}

    def send(self, message: dict) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode_frame(message))


class ControlServer:
    def __init__(self, handlers: dict[str, Handler], on_disconnect: Callable[[ControlConnection], None] | None = None):
        self.handlers = handlers
        self.on_disconnect = on_disconnect
        self.server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._connections: set[ControlConnection] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        self.server = await asyncio.start_server(self._serve, host, port, ssl=tls)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and end every connection, so that their handlers finish on their own."""
        if self.server:
            self.server.close()
        for conn in list(self._connections):
            conn.writer.close()
        await cancel_and_wait(list(self._tasks))
        await asyncio.gather(*(conn.closed for conn in list(self._connections)), return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ControlConnection(reader, writer)
        self._connections.add(conn)
        try:
            while True:
                message = await read_frame(reader)
                task = asyncio.create_task(self._dispatch(conn, message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, ControlError, ValueError,
                msgpack.UnpackException) as exc:
            log.debug("control connection from %s closed: %s", conn.peer, exc)
        except asyncio.CancelledError:
            pass  # the process is stopping; asyncio 3.11 logs a handler that ends cancelled as an error
        finally:
            self._connections.discard(conn)
            if not conn.closed.done():
                conn.closed.set_result(None)
            if self.on_disconnect:
                self.on_disconnect(conn)
            writer.close()

    async def _dispatch(self, conn: ControlConnection, message: dict) -> None:
        request_id = message.get("id")
        op = message.get("op")
        handler = self.handlers.get(op) if isinstance(op, str) else None
        reply: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": request_id}
        if handler is None:
            reply.update(ok=False, error=f"unknown op {op!r}")
        elif message.get("v") != PROTOCOL_VERSION:
            reply.update(ok=False, error=f"unsupported control protocol version {message.get('v')!r}")
        else:
            try:
                result = await handler(message, conn)
                reply.update(ok=True, **(result or {}))
            except asyncio.CancelledError:
                raise
            except BadControlRequest as exc:
                log.warning("control op %s from %s refused: %s", op, conn.peer, exc)
                reply.update(ok=False, error=f"bad request: {exc}")
            except NotController as exc:
                reply.update(ok=False, error=str(exc), not_controller=True,
                             leader=list(exc.leader) if exc.leader else None)
            except Exception as exc:  # a bad request must never take the process down
                log.exception("control op %s failed", message.get("op"))
                reply.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        conn.send(reply)


class ControlClient:
    """Asyncio client with many requests in flight on one connection."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None):
        self.host = host
        self.port = port
        self.tls = tls
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._reader_task: asyncio.Task | None = None
        self.closed: asyncio.Event = asyncio.Event()

    async def connect(self) -> None:
        secured = {"ssl": self.tls, "server_hostname": self.host} if self.tls else {}
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, **secured)
        self.closed.clear()
        self._reader_task = asyncio.create_task(self._read_replies())

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def call(self, op: str, /, timeout: float | None = None, **args: Any) -> dict:
        if not self.connected:
            raise ControlError("control connection is not open")
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._writer.write(encode_frame({"v": PROTOCOL_VERSION, "id": request_id, "op": op, **args}))
        try:
            reply = await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)
        if not reply.get("ok"):
            _raise_error(reply, "control request failed")
        return reply

    async def close(self) -> None:
        if self._writer:
            self._writer.close()
        if self._reader_task:
            await cancel_and_wait([self._reader_task])

    async def _read_replies(self) -> None:
        try:
            while True:
                reply = await read_frame(self._reader)
                future = self._pending.get(reply.get("id"))
                if future and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, ControlError, OSError) as exc:
            log.debug("control connection to %s:%s lost: %s", self.host, self.port, exc)
        finally:
            self._writer.close()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ControlError("control connection lost"))
            self.closed.set()


def call_sync(host: str, port: int, op: str, /, timeout: float = 30.0, tls: ssl.SSLContext | None = None,
              **args: Any) -> dict:
    """One blocking request, for the CLI and the launcher."""
    with socket.create_connection((host, port), timeout=timeout) as plain, \
            (tls.wrap_socket(plain, server_hostname=host) if tls else plain) as sock:
        sock.sendall(encode_frame({"v": PROTOCOL_VERSION, "id": 1, "op": op, **args}))
        stream = sock.makefile("rb")
        header = stream.read(4)
        if len(header) < 4:
            raise ControlError(f"{op}: connection closed before a reply")
        (length,) = _LENGTH.unpack(header)
        reply = msgpack.unpackb(stream.read(length), raw=False)
    if not reply.get("ok"):
        _raise_error(reply, f"{op} failed")
    return reply
