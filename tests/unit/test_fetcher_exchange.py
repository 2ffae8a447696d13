"""A follower's request and answer on its connection to the leader (node.leader_connection): the
answer's body comes back whole; with none within the timeout the connection is dropped, so that the
fetcher reconnects instead of waiting out TCP's retransmission backoff after a network cut heals."""
from __future__ import annotations

import asyncio
import struct

import pytest
import uvloop

from node.leader_connection import LeaderConnection


async def serve(answer: bool):
    async def handle(reader, writer):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        request = await reader.readexactly(size)
        if answer:
            writer.write(struct.pack(">i", len(request) + 3) + request + b"ack")
        await reader.read()  # (the silent one holds the connection open)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_answer_comes_back_whole():
    async def main():
        server, port = await serve(answer=True)
        async with server:
            connection = await LeaderConnection.open("127.0.0.1", port)
            body = await connection.exchange(struct.pack(">i", 5) + b"hello", timeout_s=5)
            connection.close()
            return bytes(body)

    assert uvloop.run(main()) == b"helloack"


def test_a_leader_that_never_answers_loses_the_connection_when_time_is_up():
    async def main():
        server, port = await serve(answer=False)
        async with server:
            connection = await LeaderConnection.open("127.0.0.1", port)
            started = asyncio.get_running_loop().time()
            with pytest.raises(ConnectionResetError):
                async with asyncio.timeout(10):  # (a TimeoutError here: it never gave up)
                    await connection.exchange(struct.pack(">i", 5) + b"hello", timeout_s=0.3)
            waited = asyncio.get_running_loop().time() - started
            assert connection.transport.is_closing()
            return waited

    assert uvloop.run(main()) >= 0.25  # (libuv timers count whole milliseconds from the loop's cached clock)


async def serve_in_pieces(pieces_of):
    """A leader that answers each request with the pieces `pieces_of(request)` gives, a pause between."""
    async def handle(reader, writer):
        while True:
            try:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
            except asyncio.IncompleteReadError:
                break
            for piece in pieces_of(await reader.readexactly(size)):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_answers_cut_anywhere_come_back_whole_and_in_turn():
    big = bytes(range(256)) * 16384  # 4 MiB: many chunks from the socket

    def pieces_of(request: bytes) -> list[bytes]:
        body = big if request == b"big" else request + b"ack"
        framed = struct.pack(">i", len(body)) + body
        return [framed[:2], framed[2:7], framed[7:]]  # the size itself split

    async def main():
        server, port = await serve_in_pieces(pieces_of)
        async with server:
            connection = await LeaderConnection.open("127.0.0.1", port)
            answers = [bytes(await connection.exchange(struct.pack(">i", len(request)) + request, timeout_s=5))
                       for request in (b"hello", b"big", b"again")]
            connection.close()
            return answers

    assert uvloop.run(main()) == [b"helloack", big, b"againack"]


def test_an_answer_with_a_negative_size_fails_the_exchange_and_drops_the_connection():
    async def main():
        server, port = await serve_in_pieces(lambda request: [struct.pack(">i", -5) + b"xx"])
        async with server:
            connection = await LeaderConnection.open("127.0.0.1", port)
            with pytest.raises(ValueError):
                await connection.exchange(struct.pack(">i", 5) + b"hello", timeout_s=5)
            return connection.transport.is_closing()

    assert uvloop.run(main())
