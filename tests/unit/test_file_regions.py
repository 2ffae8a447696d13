"""Large reads left on disk (cluster.formats.segment.FileRegion) and sent with sendfile
(node.socket_writes): the bytes that reach the socket are exactly the batches a read into memory
gives, in order with what is written around them, however slowly the peer reads."""
from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest

from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import encode_batch, iter_batch_headers
from cluster.formats.segment import FileRegion
from cluster.runtime.event_loop import run
from node.socket_writes import SPILL_BYTES, TLS_RECORD_BYTES, tls_buffers, write_pieces

VALUE_BYTES = 300_000


def large_log(path, values: int, segment_bytes: int = 1 << 30) -> PartitionLog:
    log = PartitionLog(path, config=LogConfig(segment_bytes=segment_bytes))
    for i in range(values):
        log.append(encode_batch([(None, bytes([i]) * VALUE_BYTES)], timestamp=1_000 + i), leader_epoch=0)
    return log


def offsets_of(data: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_batch_headers(data)]


def test_a_large_read_is_a_region_of_the_same_bytes_and_a_small_one_is_read(tmp_path):
    log = large_log(tmp_path / "t-0", 4)
    in_memory = bytes(log.read(1, 1 << 20).records)
    region = log.read(1, 1 << 20, region_from=256 << 10).records
    assert isinstance(region, FileRegion)
    assert (len(region), region.read()) == (len(in_memory), in_memory)
    assert offsets_of(in_memory) == [1, 2, 3]
    # Under the threshold, and for a budget under it, the bytes are read as before.
    assert not isinstance(log.read(1, 1 << 20, region_from=2 << 20).records, FileRegion)
    assert not isinstance(log.read(1, 100_000, region_from=256 << 10).records, FileRegion)


def test_a_region_ends_with_its_segment_and_outlives_the_segment_file(tmp_path):
    log = large_log(tmp_path / "t-0", 4, segment_bytes=2 * VALUE_BYTES + 500)
    assert [segment.base_offset for segment in log.segments] == [0, 2]
    region = log.read(0, 8 << 20, region_from=256 << 10).records
    expected = region.read()
    assert offsets_of(expected) == [0, 1]
    log.delete()
    assert region.read() == expected


def test_a_region_closes_its_descriptor(tmp_path):
    log = large_log(tmp_path / "t-0", 2)
    region = log.read(0, 8 << 20, region_from=256 << 10).records
    fd = region.fd
    region.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def received_by_a_slow_reader(pieces: list, expected_bytes: int) -> bytes:
    """What the peer of a uvloop stream receives when `pieces` are written with write_pieces,
    reading in small steps from a socket with a small buffer (so the sender finds it full)."""
    ours, theirs = socket.socketpair()
    for sock in (ours, theirs):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    received = bytearray()

    def read_slowly():
        while len(received) < expected_bytes:
            chunk = theirs.recv(8 << 10)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read_slowly)
    reader.start()

    async def send():
        _, writer = await asyncio.open_connection(sock=ours)
        try:
            await write_pieces(writer, pieces)
        finally:
            writer.close()
            await writer.wait_closed()  # what the transport still holds goes out before the loop ends

    try:
        run(send())
    finally:
        reader.join(30)
        theirs.close()
    return bytes(received)


def test_regions_reach_the_socket_in_order_with_the_buffers_around_them(tmp_path, monkeypatch):
    log = large_log(tmp_path / "t-0", 6, segment_bytes=3 * VALUE_BYTES + 500)
    first = log.read(0, 8 << 20, region_from=256 << 10).records
    second = log.read(3, 8 << 20, region_from=256 << 10).records
    expected = b"head" + first.read() + b"middle" + second.read() + b"tail"
    assert len(first) > 4 * SPILL_BYTES  # many times what one spill carries
    sendfile = os.sendfile
    by_sendfile = []
    monkeypatch.setattr(os, "sendfile", lambda *args: by_sendfile.append(sendfile(*args)) or by_sendfile[-1])
    got = received_by_a_slow_reader([b"head", first, memoryview(b"middle"), second, b"tail"], len(expected))
    assert got == expected
    # Most of the bytes went by sendfile; the reader's pace made the node spill some.
    assert len(first) + len(second) > sum(by_sendfile) > (len(first) + len(second)) // 2


def test_a_region_truncated_before_its_send_closes_the_connection(tmp_path):
    log = large_log(tmp_path / "t-0", 4)
    region = log.read(0, 8 << 20, region_from=256 << 10).records
    whole = len(region)
    log.truncate_to(1)  # cuts the file under the region: it now holds one value
    with pytest.raises(ConnectionAbortedError):
        received_by_a_slow_reader([b"head", region], whole + 4)


def test_a_region_that_cannot_be_sent_closes_the_connection_and_its_descriptor():
    readable, writable = os.pipe()  # sendfile cannot read from a pipe: EINVAL
    try:
        region = FileRegion(readable, 0, 1 << 20)
        fd = region.fd
        with pytest.raises(ConnectionAbortedError, match="sending a segment's bytes failed"):
            received_by_a_slow_reader([b"head", region], 4 + (1 << 20))
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        os.close(readable)
        os.close(writable)


def test_on_tls_an_answers_small_buffers_are_joined_and_big_ones_left_alone():
    big = b"b" * TLS_RECORD_BYTES
    other = memoryview(b"c" * (TLS_RECORD_BYTES + 1))
    joined = tls_buffers([b"size", b"header", memoryview(b"body"), big, b"x", other, b"tail1", b"tail2"])
    assert joined == [b"sizeheaderbody", big, b"x", other, b"tail1tail2"]
    assert joined[1] is big and joined[3] is other  # (not copied)
    assert tls_buffers([b"alone"]) == [b"alone"] and tls_buffers([]) == []
