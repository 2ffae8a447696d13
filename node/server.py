"""The Kafka listener: framing, request headers, dispatch and in-order responses.

A client may pipeline many requests on one connection; each is handled in its own task
and the responses are written strictly in request order, as Kafka does. Each request is decoded
and checked against its schema (node.request_checks) before its handler sees it. Anything we
cannot parse closes that connection only, with one INFO line: a bad client never takes the node
down. (Kafka logs its closing at ERROR; here a bad client is not the node's error.)
"""
from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass

from cluster.formats.records import read_uvarint
from cluster.runtime.shutdown import cancel_and_wait
from cluster.runtime import timeline
from node.apis import HANDLERS, ApiHandler
from node.apis import api_versions
from node.faults import error_response, party_of
from node import request_checks
from node.client_connection import ClientConnection, MalformedRequest
from node.spliced_response import EncodedResponse, SplicedResponse
from node.security.quotas import ClientQuotas
from node.security.session import Session

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""
    # The connection's security session: its listener and the client's principal.
    session: Session | None = None


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
        self.connections: set[ClientConnection] = set()
        self.quotas = ClientQuotas(broker)

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self._new_connection, host, port)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server:
            self.server.close()
        tasks = []
        for connection in list(self.connections):
            tasks += connection.cancel()
            connection.transport.close()
        await cancel_and_wait(tasks)

    def _new_connection(self) -> ClientConnection:
        connection = ClientConnection(self._start_request, self.max_request_bytes, self.connections)
        connection.admit = self.quotas.admit
        return connection

    def _start_request(self, frame: memoryview, session: Session) -> asyncio.Task:
        api_key, api_version, correlation_id = peek_api(frame)
        handler = HANDLERS.get(api_key)
        if handler is None:
            raise MalformedRequest(f"unknown api key {api_key}")
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == api_versions.API_KEY:
                return asyncio.create_task(self._unsupported_api_versions(correlation_id))
            raise MalformedRequest(f"unsupported version {api_version} of api {api_key}")
        header, body_start = parse_header(frame, handler.request_is_flexible(api_version))
        header.client_host = f"/{session.client_host}" if session.client_host else ""
        header.session = session
        request = request_checks.decode(handler.request, frame[body_start:], api_version)
        if timeline.ENABLED:
            timeline.mark("request decoded")
        return asyncio.create_task(self._handle(handler, header, request))

    async def _handle(self, handler: ApiHandler, header: RequestHeader, request) -> list | None:
        faults = self.broker.faults
        party = party_of(header.client_id)
        # (asked before awaiting: nearly every request meets no fault, and each await costs)
        if not faults.reachable(party):
            await faults.wait_reachable(party)
        injected = faults.take_injected_error(handler.api_key)
        limits = self.quotas.limits_of(header)  # None unless a client quota applies to this client
        if injected is not None:
            response = error_response(handler.response, request, header.api_version, injected)
        elif limits is None:
            response = await handler.handle(self.broker, header, request)
        else:
            throttle_ms, response = await self.quotas.handle(limits, handler, self.broker, header, request)
            if throttle_ms:
                self._mute(header.session, throttle_ms)
        if faults.holds_response(party):
            await faults.before_response(party)
        if response is None:
            return None
        if isinstance(response, (SplicedResponse, EncodedResponse)):
            body = response.encode_pieces(header.api_version)
        else:
            body = [response.encode(version=header.api_version)]
        return self._frame_response(header.correlation_id, body, handler.response_header_is_flexible(header.api_version))

    def _mute(self, session: Session, throttle_ms: int) -> None:
        """KIP-219: the answer (carrying throttle_time_ms) goes out at once; the client's connection is
        muted for the throttle time. (Searched for only when a client is throttled.)"""
        for connection in self.connections:
            if connection.session is session:
                connection.throttle(throttle_ms)

    async def _unsupported_api_versions(self, correlation_id: int) -> list:
        body = api_versions.unsupported_version_response().encode(version=0)
        return self._frame_response(correlation_id, [body], flexible=False)

    @staticmethod
    def _frame_response(correlation_id: int, body: list, flexible: bool) -> list:
        """The response's buffers, size and header first; the body's buffers are not joined."""
        header = _CORRELATION.pack(correlation_id) + (b"\x00" if flexible else b"")
        size = len(header) + sum(len(piece) for piece in body)
        return [_SIZE.pack(size) + header, *body]
