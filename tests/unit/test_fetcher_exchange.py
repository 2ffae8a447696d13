"""A follower's request and answer on its connection to the leader (node.replica_fetcher.exchange): the
answer's body comes back whole; with none within the timeout the connection is dropped, so that the
fetcher reconnects instead of waiting out TCP's retransmission backoff after a network cut heals."""
from __future__ import annotations

import asyncio
import struct

import pytest
import uvloop

from node.replica_fetcher import exchange


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
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = await exchange(reader, writer, struct.pack(">i", 5) + b"hello", timeout_s=5)
            writer.close()
            return bytes(body)

    assert uvloop.run(main()) == b"helloack"


def test_a_leader_that_never_answers_loses_the_connection_when_time_is_up():
    async def main():
        server, port = await serve(answer=False)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = asyncio.get_running_loop().time()
            with pytest.raises(asyncio.IncompleteReadError):
                async with asyncio.timeout(10):  # (a TimeoutError here: it never gave up)
                    await exchange(reader, writer, struct.pack(">i", 5) + b"hello", timeout_s=0.3)
            waited = asyncio.get_running_loop().time() - started
            assert writer.transport.is_closing()
            return waited

    assert uvloop.run(main()) >= 0.25  # (libuv timers count whole milliseconds from the loop's cached clock)
