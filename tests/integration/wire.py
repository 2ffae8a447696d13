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


def fetch_values(address: tuple[str, int], topic: str, partition: int = 0, offset: int = 0,
                 wait_ms: int = 0) -> list[bytes]:
    """The values one node serves to consumers from offset (up to its high watermark), in one
    Fetch: unlike a client, this never wanders off to another node of the cluster. With wait_ms
    the node holds the Fetch until something is there to read (or the time is up)."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.record import MemoryRecords

    request = FetchRequest[12](
        cluster_id=None, replica_id=-1, max_wait_ms=wait_ms, min_bytes=1 if wait_ms else 0, max_bytes=8 << 20,
        isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=8 << 20)])])
    data = exchange_once(address, request, FetchResponse, 12).responses[0].partitions[0]
    assert data.error_code == 0, f"fetch from {address} failed with error {data.error_code}"
    records = MemoryRecords(bytes(data.records or b""))
    values = []
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    return values
