"""A node's client side of SASL: it logs in to another node's listener before replicating from it
or talking to it, as Kafka's SaslClientAuthenticator does (SaslHandshake v1, then SaslAuthenticate
v1 requests carrying the tokens). PLAIN and SCRAM-SHA-256/512 (RFC 5802: the server's nonce must
extend ours, its signature must verify; `e=` is its refusal).
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import secrets
import struct
from typing import Awaitable, Callable

from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
)

from cluster.formats.scram import MECHANISM_CODES, digest, hmac_digest, salted_password
from node.security.sasl_scram import extensions

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1
CLIENT_ID = "kraftwerk-node"
MAX_RESPONSE_BYTES = 1 << 20


class SaslClientError(Exception):
    """The login failed: refused by the server (its error code and message), or a server that did
    not prove it holds the credential."""

    def __init__(self, message: str, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code


# Sends a framed request and returns its answer without the size.
Exchange = Callable[[bytes], Awaitable[bytes]]


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mechanism: str,
                       username: str, password: str) -> None:
    """Log in on a fresh connection; SaslClientError when refused, ConnectionError when cut."""
    async def exchange(request: bytes) -> bytes:
        writer.write(request)
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise SaslClientError(f"a SASL response of {size} bytes")
        return await reader.readexactly(size)

    await log_in(exchange, mechanism, username, password)


async def log_in(exchange: Exchange, mechanism: str, username: str, password: str) -> None:
    """Log in over a connection that `exchange` sends requests on."""
    connection = _Connection(exchange)
    handshake = await connection.call(SaslHandshakeRequest[HANDSHAKE_VERSION](mechanism=mechanism),
                                      SaslHandshakeResponse, HANDSHAKE_VERSION)
    if handshake.error_code:
        raise SaslClientError(f"SASL mechanism {mechanism} refused; the listener offers "
                              f"{', '.join(handshake.mechanisms)}", handshake.error_code)
    if mechanism == "PLAIN":
        await connection.token(f"\0{username}\0{password}".encode())
    elif mechanism in MECHANISM_CODES:
        await _scram(connection, mechanism, username, password)
    else:
        raise SaslClientError(f"a node cannot log in with SASL mechanism {mechanism}")


async def _scram(connection: "_Connection", mechanism: str, username: str, password: str) -> None:
    code = MECHANISM_CODES[mechanism]
    client_nonce = secrets.token_urlsafe(24)
    saslname = username.replace("=", "=3D").replace(",", "=2C")
    client_first_bare = f"n={saslname},r={client_nonce}"
    server_first = (await connection.token(f"n,,{client_first_bare}".encode())).decode()
    fields = extensions(server_first)
    if "e" in fields:
        raise SaslClientError(f"SCRAM refused: {fields['e']}")
    nonce, salt, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i", "")
    if not nonce.startswith(client_nonce) or len(nonce) == len(client_nonce) or not iterations.isdigit():
        raise SaslClientError(f"Invalid SCRAM server first message: {server_first!r}")
    salted = salted_password(password, code, base64.b64decode(salt), int(iterations))
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = hmac_digest(code, salted, b"Client Key")
    signature = hmac_digest(code, digest(code, client_key), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = extensions((await connection.token(f"{without_proof},p={proof}".encode())).decode())
    if "e" in server_final:
        raise SaslClientError(f"SCRAM refused: {server_final['e']}")
    expected = hmac_digest(code, hmac_digest(code, salted, b"Server Key"), auth_message)
    if not hmac.compare_digest(base64.b64decode(server_final.get("v", "")), expected):
        raise SaslClientError("the server's SCRAM signature does not verify")


class _Connection:
    def __init__(self, exchange: Exchange):
        self.exchange = exchange
        self.correlation_id = 0

    async def token(self, data: bytes) -> bytes:
        response = await self.call(SaslAuthenticateRequest[AUTHENTICATE_VERSION](auth_bytes=data),
                                   SaslAuthenticateResponse, AUTHENTICATE_VERSION)
        if response.error_code:
            raise SaslClientError(response.error_message or f"SASL error {response.error_code}",
                                  response.error_code)
        return bytes(response.auth_bytes)

    async def call(self, request, response_class, version: int):
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=CLIENT_ID)
        body = await self.exchange(bytes(request.encode(version=version, header=True, framed=True)))
        # Neither version used has a flexible header: the body follows the 4-byte correlation id.
        return response_class.decode(body[4:], version=version)
