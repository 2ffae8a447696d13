"""Raw Kafka protocol exchanges for tests, encoded and decoded with kafka-python's codecs."""
from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import ApiVersionsResponse


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return data


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def send_request(sock: socket.socket, request, version: int, correlation_id: int = 7) -> None:
    request.with_header(correlation_id=correlation_id, client_id="kraftwerk-tests")
    send_frame(sock, bytes(request.encode(version=version, header=True)))


def read_response(sock: socket.socket, response_class, version: int):
    """(correlation id, decoded response); ApiVersions responses always use header v0."""
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    body = recv_exactly(sock, size)
    correlation_id = struct.unpack(">i", body[:4])[0]
    flexible = response_class.flexible_version_q(version) and response_class is not ApiVersionsResponse
    return correlation_id, response_class.decode(body[5 if flexible else 4:], version=version)


def exchange(sock: socket.socket, request, response_class, version: int, correlation_id: int = 7):
    send_request(sock, request, version, correlation_id)
    got, response = read_response(sock, response_class, version)
    assert got == correlation_id
    return response


def exchange_once(address: tuple[str, int], request, response_class, version: int):
    with socket.create_connection(address, timeout=10) as sock:
        return exchange(sock, request, response_class, version)
