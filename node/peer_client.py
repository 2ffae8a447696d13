"""Requests this node sends to its peers on their Kafka listeners (transaction markers, a
transaction's verification), with kafka.protocol's codecs.

One connection per peer, opened on first use and again after it fails; requests on it are
correlated by id, so several may be in flight. The client id names this node as a replica, so a
peer isolated from it (node.faults) holds these requests as it holds its replica fetches, and
this side waits while it is isolated from that peer.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import struct

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class PeerUnavailable(Exception):
    """The peer has no address, cannot be reached, or did not answer in time."""


class _PeerConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.waiting: dict[int, asyncio.Future] = {}
        self.reading = asyncio.get_running_loop().create_task(self._read_answers())

    async def _read_answers(self) -> None:
        error: Exception = ConnectionResetError("the peer closed the connection")
        try:
            while True:
                (size,) = _SIZE.unpack(await self.reader.readexactly(4))
                frame = await self.reader.readexactly(size)
                waiter = self.waiting.pop(_SIZE.unpack_from(frame)[0], None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)
        except (OSError, asyncio.IncompleteReadError) as exc:
            error = ConnectionResetError(str(exc) or "the peer closed the connection")
        finally:
            self.writer.close()
            for waiter in self.waiting.values():
                if not waiter.done():
                    waiter.set_exception(error)
            self.waiting.clear()

    @property
    def open(self) -> bool:
        return not self.reading.done()

    def close(self) -> None:
        self.reading.cancel()
        self.writer.close()


class PeerClient:
    def __init__(self, broker):
        self.broker = broker
        self.client_id = f"replica-{broker.node_id}"
        self._connections: dict[int, _PeerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._correlation = itertools.count(1)

    async def send(self, node_id: int, request, version: int, response_class, timeout_s: float):
        """The peer's decoded answer to request; PeerUnavailable if there is none within timeout_s."""
        await self.broker.faults.wait_reachable(node_id)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        frame = bytes(request.encode(version=version, header=True, framed=True))
        connection = None
        try:
            connection = await asyncio.wait_for(self._connection(node_id), timeout_s)
            waiter = connection.waiting[correlation_id] = asyncio.get_running_loop().create_future()
            connection.writer.write(frame)
            answer = await asyncio.wait_for(waiter, timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            self._drop(node_id)
            raise PeerUnavailable(f"node {node_id}: {exc or 'no answer in time'}") from exc
        finally:  # (a caller that gave up on the answer leaves nothing waiting for it)
            if connection is not None:
                connection.waiting.pop(correlation_id, None)
        flexible_header = response_class.flexible_version_q(version)
        return response_class.decode(memoryview(answer)[5 if flexible_header else 4:], version=version)

    async def _connection(self, node_id: int) -> _PeerConnection:
        connection = self._connections.get(node_id)
        if connection is not None and connection.open:
            return connection
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(node_id)
            if connection is not None and connection.open:
                return connection
            endpoint = self.broker.peer_endpoint(node_id)
            if endpoint is None:
                raise ConnectionRefusedError(f"node {node_id} has no address now")
            reader, writer = await self.broker.peer_links.open_streams(endpoint[0], endpoint[1])
            connection = self._connections[node_id] = _PeerConnection(reader, writer)
            return connection

    def _drop(self, node_id: int) -> None:
        connection = self._connections.pop(node_id, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        for node_id in list(self._connections):
            self._drop(node_id)
