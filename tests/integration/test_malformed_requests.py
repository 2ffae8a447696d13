"""Malformed requests of every API the node serves never reach a handler: no ERROR, no traceback.

For each API and version a well-formed request is built from kafka.protocol's schema. From it
come two kinds of bad frames: the request with one field that its schema does not let be null
encoded as null (Kafka's parser refuses such a request and closes the connection), and the
request with bytes overwritten or cut off, from a fixed seed. The node must close the connection
on every null, keep answering, and log no ERROR line and no traceback.
"""
from __future__ import annotations

import random
import socket
import struct
import time
import uuid

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from node.apis import HANDLERS
from tests.integration.wire import exchange, send_frame

SEED = 23
CLIENT_ID = "malformed-requests"
MUTATIONS_PER_VERSION = 20
ANSWER_WAIT_S = 0.3
# Values that keep a well-formed sample request quick and harmless: no acks=0 silence, nothing
# created for real, no node unregistered, no long waits.
SAMPLE_VALUES = {"acks": 1, "num_partitions": 1, "count": 1, "replication_factor": 1, "validate_only": True,
                 "broker_id": 9999, "replica_id": -1, "session_epoch": -1, "max_bytes": 1024,
                 "partition_max_bytes": 1024}
_NULLABLE_ON_THE_WIRE = {"string", "bytes", "records"}


@pytest.fixture(scope="module")
def single_node(tmp_path_factory):
    from cluster.launch import Cluster

    with Cluster(nodes=1, data_dir=tmp_path_factory.mktemp("malformed") / "kraftwerk") as cluster:
        yield cluster


# Well-formed requests, from the schema.

def sample_request(request_class, version: int):
    return request_class[version](**_sample_fields(request_class._struct, version))


def _sample_fields(struct, version: int) -> dict:
    return {field.name: _sample_value(field, version) for field in struct._fields
            if field.for_version_q(version) and not field.tagged_field_q(version)}


def _sample_value(field, version: int):
    if field.is_struct_array():
        return [field.data_class(version=version, **_sample_fields(field.array_of, version))]
    if field.is_struct():
        return field.data_class(version=version, **_sample_fields(field, version))
    if field.is_array():
        return [_scalar(field.array_of.type_str, field.name)]
    return _scalar(field.type_str, field.name)


def _scalar(type_str: str, name: str):
    if name in SAMPLE_VALUES:
        return SAMPLE_VALUES[name]
    if type_str == "string":
        return "malformed-requests"
    if type_str in ("bytes", "records"):
        return b""
    if type_str == "bool":
        return False
    if type_str == "uuid":
        return uuid.UUID(int=23)
    if type_str == "float64":
        return 0.0
    return 0


# Bad frames.

def non_nullable_paths(struct, version: int, prefix: tuple = ()) -> list[tuple]:
    """Paths (field names, through the first element of each array) of every array, string and
    bytes field that the schema does not let be null at `version`."""
    paths = []
    for field in struct._fields:
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        path = prefix + (field.name,)
        nullable = field.nullable_for_version_q(version)
        if (field.is_array() or field.type_str in _NULLABLE_ON_THE_WIRE) and not nullable:
            paths.append(path)
        if field.is_struct_array():
            paths += non_nullable_paths(field.array_of, version, path)
        elif field.is_struct() and not nullable:
            paths += non_nullable_paths(field, version, path)
    return paths


def with_null_at(request, path: tuple):
    item = request
    for name in path[:-1]:
        item = getattr(item, name)
        if isinstance(item, list):
            item = item[0]
    setattr(item, path[-1], None)
    return request


def frame_of(request, version: int, correlation_id: int = 1) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
    # (ApiMessage's own encoder: MetadataRequest's would write a null v0 topic list as empty)
    return bytes(ApiMessage.encode(request, version=version, header=True))


def mutations(frame: bytes, body_start: int, rng: random.Random, count: int) -> list[bytes]:
    """Copies of `frame` with a few bytes of its body overwritten, or with its body cut short."""
    mutated = []
    if body_start == len(frame):  # (nothing to mutate in a request without fields)
        return mutated
    for _ in range(count):
        if rng.random() < 0.3:
            mutated.append(frame[:rng.randrange(body_start, len(frame))])
            continue
        data = bytearray(frame)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(body_start, len(data))] = rng.randrange(256)
        mutated.append(bytes(data))
    return mutated


def body_start(handler, version: int) -> int:
    """Where the body begins in frame_of's frames: request header v1, or v2 with its tag byte."""
    return 10 + len(CLIENT_ID) + (1 if handler.request_is_flexible(version) else 0)


def versions_of(handler) -> list[int]:
    return list(range(handler.min_version, handler.max_version + 1))


# Talking to the node.

def connect(cluster) -> socket.socket:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def answer_or_close(cluster, frame: bytes, wait_s: float = ANSWER_WAIT_S) -> bytes | None:
    """What the node does with one frame alone on a connection: its answer, or None when it closes
    the connection without one (or is still busy with it when the wait is over)."""
    with connect(cluster) as sock:
        send_frame(sock, frame)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(wait_s)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return received or None


def assert_node_answers(cluster) -> None:
    with connect(cluster) as sock:
        versions = exchange(sock, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                            ApiVersionsResponse, 3)
        assert versions.error_code == 0
        metadata = exchange(sock, MetadataRequest[9](topics=None, allow_auto_topic_creation=False),
                            MetadataResponse, 9)
        assert [b.node_id for b in metadata.brokers]


def assert_logs_clean(cluster) -> None:
    for log_path in sorted((cluster.data_dir / "logs").glob("*.log")):
        text = log_path.read_text(errors="replace")
        errors = [line for line in text.splitlines() if " ERROR " in line or " CRITICAL " in line]
        assert not errors, f"{log_path.name}: {errors[:5]}"
        assert "Traceback" not in text, f"{log_path.name} holds a traceback"


# The tests.

def test_sample_requests_are_well_formed(single_node):
    """The starting point of every bad frame is a request the node answers."""
    for api_key, handler in sorted(HANDLERS.items()):
        version = handler.max_version
        # (the first group request waits for the offsets topic to be created)
        answer = answer_or_close(single_node, frame_of(sample_request(handler.request, version), version), 15)
        assert answer is not None, f"{handler.request.name} v{version}: the sample request went unanswered"
    assert_logs_clean(single_node)


def test_a_null_the_schema_forbids_closes_the_connection(single_node):
    checked = 0
    for api_key, handler in sorted(HANDLERS.items()):
        for version in versions_of(handler):
            for path in non_nullable_paths(handler.request._struct, version):
                request = with_null_at(sample_request(handler.request, version), path)
                answer = answer_or_close(single_node, frame_of(request, version), 5)
                assert answer is None, f"{handler.request.name} v{version} with {'.'.join(path)} null was answered"
                checked += 1
    assert checked > 300
    assert_node_answers(single_node)
    assert_logs_clean(single_node)


def test_mutated_requests_log_no_error(single_node):
    rng = random.Random(SEED)
    for api_key, handler in sorted(HANDLERS.items()):
        for version in versions_of(handler):
            frame = frame_of(sample_request(handler.request, version), version)
            for bad in mutations(frame, body_start(handler, version), rng, MUTATIONS_PER_VERSION):
                answer_or_close(single_node, bad)
    assert_node_answers(single_node)
    time.sleep(0.5)  # (a request still running when its connection closed finishes and logs by now)
    assert_logs_clean(single_node)


def test_many_bad_frames_on_one_connection_close_it_once(single_node):
    """Frames pipelined behind a malformed one are never started."""
    handler = HANDLERS[MetadataRequest.API_KEY]
    good = frame_of(sample_request(handler.request, 9), 9)
    bad = frame_of(with_null_at(sample_request(handler.request, 0), ("topics", "name")), 0)
    with connect(single_node) as sock:
        sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in [good, bad, good, good]))
        sock.settimeout(10)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    (size,) = struct.unpack_from(">i", received)
    assert len(received) == 4 + size, "only the answer to the frame before the malformed one comes back"
    assert_node_answers(single_node)
    assert_logs_clean(single_node)
