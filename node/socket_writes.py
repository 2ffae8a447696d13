"""Writing a response's pieces to its connection: buffers through the transport, FileRegions
from the page cache to the socket with sendfile(2), never through this process's memory.

A large Fetch answer read into memory costs the node a fresh buffer per answer (a page fault
per page of it) and a copy each way; sent from the file it costs one copy, in the kernel.

The transport must hold nothing when a region's turn comes, or its bytes would overtake what
was written before them: the writer waits until the transport has handed everything to the
kernel. When the socket is full, one small chunk of the region goes through the transport
instead, which waits for room as it always does; then sendfile takes over again. The event
loop never waits on the socket itself (uvloop does not let a transport's socket be watched
by anyone else).

On a TLS connection the kernel cannot encrypt, so a region is read and written through the
transport in chunks, as Kafka gives up zero-copy on SSL listeners. There each buffer handed to the
transport becomes TLS records of its own (one SSL_write each, and OpenSSL 3's fixed cost per record
is several times that of encrypting a small one), so an answer's small buffers are joined first
(`tls_buffers`): a Produce answer goes out as one record, not two or three, and a fetch answer
that a follower or consumer that has caught up gets (small batches of several partitions, in
memory) as one or a few, not one per partition and field.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os

from cluster.formats.segment import FileRegion

log = logging.getLogger(__name__)

# What goes through the transport when the socket is full: enough to be told when it has room.
SPILL_BYTES = 64 << 10
# What a TLS connection reads of a region at a time: the transport encrypts it from memory.
TLS_CHUNK_BYTES = 1 << 20
# A TLS record's most plaintext: buffers smaller than this are joined with their neighbours.
TLS_RECORD_BYTES = 16 << 10


def tls_buffers(buffers: list) -> list:
    """The buffers, each run of ones smaller than a TLS record joined into one (big ones are not
    copied)."""
    joined: list = []
    for small, run in itertools.groupby(buffers, key=lambda buffer: len(buffer) < TLS_RECORD_BYTES):
        if not small:
            joined.extend(run)
            continue
        run = list(run)
        joined.append(b"".join(run) if len(run) > 1 else run[0])
    return joined


async def write_pieces(writer: asyncio.StreamWriter, pieces: list) -> None:
    """Write pieces in order and wait until the transport takes more; closes every region."""
    buffered: list = []
    tls = writer.get_extra_info("ssl_object") is not None
    try:
        for piece in pieces:
            if not isinstance(piece, FileRegion):
                buffered.append(piece)
                continue
            if buffered:
                writer.writelines(tls_buffers(buffered) if tls else buffered)
                buffered = []
            try:
                if tls:
                    await _copy_region(writer, piece)
                else:
                    await _send_region(writer, piece)
            except ConnectionError:
                writer.transport.abort()  # (the transport has not seen it: the send was ours)
                raise
            except OSError as exc:
                _abandon(writer, f"sending a segment's bytes failed: {exc}")
    finally:
        for piece in pieces:
            if isinstance(piece, FileRegion):
                piece.close()
    if buffered:
        writer.writelines(tls_buffers(buffered) if tls else buffered)
    await writer.drain()


async def _send_region(writer: asyncio.StreamWriter, region: FileRegion) -> None:
    offset, remaining = region.offset, region.count
    while remaining:
        await _emptied(writer)
        socket_fd = _socket_fd(writer)
        try:
            sent = os.sendfile(socket_fd, region.fd, offset, remaining)
        except BlockingIOError:
            sent = _spill(writer, region, offset, remaining)
        if sent == 0:
            _truncated(writer, region, offset)
        offset += sent
        remaining -= sent


async def _copy_region(writer: asyncio.StreamWriter, region: FileRegion) -> None:
    offset, remaining = region.offset, region.count
    while remaining:
        if writer.transport.is_closing():
            raise ConnectionResetError("the connection closed while a fetch answer was being sent")
        chunk = os.pread(region.fd, min(TLS_CHUNK_BYTES, remaining), offset)
        if not chunk:
            _truncated(writer, region, offset)
        writer.write(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
        await writer.drain()


def _spill(writer: asyncio.StreamWriter, region: FileRegion, offset: int, remaining: int) -> int:
    chunk = os.pread(region.fd, min(SPILL_BYTES, remaining), offset)
    if chunk:
        writer.write(chunk)
    return len(chunk)


async def _emptied(writer: asyncio.StreamWriter) -> None:
    """Wait until the transport has handed every byte written to the kernel."""
    transport = writer.transport
    if transport.get_write_buffer_size() == 0:
        return
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=0, low=0)  # drain now waits for an empty buffer
    try:
        await writer.drain()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high=high, low=low)


def _socket_fd(writer: asyncio.StreamWriter) -> int:
    # Checked before each send: a closed transport's descriptor number may belong to another file.
    if writer.transport.is_closing():
        raise ConnectionResetError("the connection closed while a fetch answer was being sent")
    return writer.get_extra_info("socket").fileno()


def _truncated(writer: asyncio.StreamWriter, region: FileRegion, offset: int) -> None:
    """The segment was cut short after the read, as Kafka closes the connection when FileRecords
    shrank under a send."""
    _abandon(writer, f"the segment was truncated at position {offset} while {region.count} bytes "
                     f"from position {region.offset} were being sent")


def _abandon(writer: asyncio.StreamWriter, why: str) -> None:
    """The answer's sizes are on the wire already and its bytes cannot follow: the connection goes."""
    log.warning("%s; closing the connection", why)
    writer.transport.abort()
    raise ConnectionAbortedError(why)
