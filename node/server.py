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
from cluster.formats.listeners import ListenerSpec
from node.security.quotas import ClientQuotas
from node.security.session import ListenerInfo, Session

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
# ApiVersions, SaslHandshake, SaslAuthenticate: what a SASL connection may send before it is authenticated.
SASL_PHASE_APIS = frozenset({18, 17, 36})


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
    """Every listener of a node: one socket each, TLS where its security protocol says so."""

    def __init__(self, broker, max_request_bytes: int):
        self.broker = broker
        self.max_request_bytes = max_request_bytes
        self.servers: list[asyncio.AbstractServer] = []
        self.connections: set[ClientConnection] = set()
        self.quotas = ClientQuotas(broker)

    async def start(self, listeners: list[ListenerSpec]) -> dict[str, int]:
        """Serve each listener; the port each got, by listener name."""
        loop = asyncio.get_running_loop()
        ports = {}
        for spec in listeners:
            listener = ListenerInfo(spec.name, spec.security_protocol)
            context = _tls_context(self.broker.config, spec.name) if listener.uses_tls else None
            server = await loop.create_server(lambda listener=listener: self._new_connection(listener),
                                              spec.host, spec.port, ssl=context)
            self.servers.append(server)
            ports[spec.name] = server.sockets[0].getsockname()[1]
        return ports

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        tasks = []
        for connection in list(self.connections):
            tasks += connection.cancel()
            connection.transport.close()
        await cancel_and_wait(tasks)

    def _new_connection(self, listener: ListenerInfo) -> ClientConnection:
        connection = ClientConnection(self._start_request, self.max_request_bytes, self.connections, listener,
                                      self._open_session)
        connection.admit = self.quotas.admit
        return connection

    def _open_session(self, listener: ListenerInfo, transport: asyncio.Transport) -> Session:
        peer = transport.get_extra_info("peername")
        session = Session.opened(listener, peer[0] if peer else "")
        if listener.security_protocol == "SSL":  # (on SASL_SSL, SASL says who the client is)
            from cluster.runtime.tls import setting
            from node.security import tls

            rules = setting(self.broker.config, listener.name, "ssl.principal.mapping.rules")
            try:
                session.principal = tls.principal_of(transport.get_extra_info("ssl_object"), rules)
            except tls.NoMatchingRule as exc:  # Kafka fails the authentication and closes the connection
                log.info("closing connection from %s: %s", session.client_host, exc)
                session.authenticated = False
                transport.abort()
        return session

    def _start_request(self, frame: memoryview, session: Session) -> asyncio.Task:
        if not session.authenticated or session.expires_ms is not None:
            gated = self._gate(frame, session)
            if gated is not None:
                return gated
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
            if throttle_ms and header.session.mute is not None:
                # KIP-219: the answer (carrying throttle_time_ms) goes out at once; the client's
                # connection is muted for the throttle time.
                header.session.mute(throttle_ms)
        if faults.holds_response(party):
            await faults.before_response(party)
        if response is None:
            return None
        if isinstance(response, (SplicedResponse, EncodedResponse)):
            body = response.encode_pieces(header.api_version)
        else:
            body = [response.encode(version=header.api_version)]
        return self._frame_response(header.correlation_id, body, handler.response_header_is_flexible(header.api_version))

    def _gate(self, frame: memoryview, session: Session) -> asyncio.Task | None:
        """What a SASL connection may send before it is authenticated, or once its authentication
        has expired (KIP-368): ApiVersions and the SASL APIs; anything else closes the connection,
        as Kafka does. After a SaslHandshake v0 the client sends raw SASL tokens, answered raw.
        None: the request goes on as usual."""
        if session.raw_tokens:
            return asyncio.create_task(self._raw_sasl_token(bytes(frame), session))
        api_key = peek_api(frame)[0]
        if api_key in SASL_PHASE_APIS:
            return None
        if not session.authenticated:
            raise MalformedRequest(f"api key {api_key} before SASL authentication")
        if session.expires_ms <= self.broker.now_ms():
            raise MalformedRequest(f"api key {api_key} after the SASL session of {session.principal} expired")
        return None

    async def _raw_sasl_token(self, token: bytes, session: Session) -> list:
        from node.security import sasl

        try:
            challenge = await sasl.authenticate(self.broker, session, token)
        except sasl.SaslAuthenticationError:
            session.failed = True
            return []
        return [_SIZE.pack(len(challenge)), challenge]

    async def _unsupported_api_versions(self, correlation_id: int) -> list:
        body = api_versions.unsupported_version_response().encode(version=0)
        return self._frame_response(correlation_id, [body], flexible=False)

    @staticmethod
    def _frame_response(correlation_id: int, body: list, flexible: bool) -> list:
        """The response's buffers, size and header first; the body's buffers are not joined."""
        header = _CORRELATION.pack(correlation_id) + (b"\x00" if flexible else b"")
        size = len(header) + sum(len(piece) for piece in body)
        return [_SIZE.pack(size) + header, *body]


def _tls_context(config, listener_name: str):
    from node.security import tls  # (only nodes with a TLS listener load the ssl machinery)

    return tls.listener_context(config, listener_name)
