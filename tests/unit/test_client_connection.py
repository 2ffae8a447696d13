"""A client connection's flow control (node.client_connection), over a real loopback socket: no more
requests are started than may be in flight, whatever one chunk of the socket holds, and the frames
held back are started as answers go out, in order. The node's dispatch is stood in for by futures
the test settles: each answer echoes its request's 4-byte body."""
from __future__ import annotations

import asyncio
import struct

import uvloop

from node.client_connection import MAX_IN_FLIGHT, ClientConnection


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_no_more_requests_start_than_may_be_in_flight_and_the_rest_start_as_answers_go_out():
    count = MAX_IN_FLIGHT + 500

    async def main():
        loop = asyncio.get_running_loop()
        started: list[tuple[bytes, asyncio.Future]] = []
        waiting_for: dict[int, asyncio.Event] = {}  # a number of started requests -> who waits for it

        def start_request(request: memoryview, _session) -> asyncio.Future:
            started.append((bytes(request), loop.create_future()))
            if len(started) in waiting_for:
                waiting_for[len(started)].set()
            return started[-1][1]

        async def until_started(number: int) -> None:
            if len(started) < number:
                await asyncio.wait_for(waiting_for.setdefault(number, asyncio.Event()).wait(), 10)

        def answer(indexes: range) -> None:
            for index in indexes:
                body, future = started[index]
                future.set_result([frame(body)])

        server = await loop.create_server(lambda: ClientConnection(start_request, 1 << 20, set()), "127.0.0.1", 0)
        async with server:
            reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
            # 12 KB in one write, every frame whole.
            writer.write(b"".join(frame(struct.pack(">i", index)) for index in range(count)))
            await until_started(MAX_IN_FLIGHT)
            await asyncio.sleep(0.2)  # (time for anything more it would start: the bytes are all there)
            held_back = len(started)
            answer(range(10))
            answers = [await asyncio.wait_for(reader.readexactly(8), 10) for _ in range(10)]
            started_after_ten = len(started)
            answer(range(10, MAX_IN_FLIGHT + 10))
            await until_started(count)
            answer(range(MAX_IN_FLIGHT + 10, count))
            answers += [await asyncio.wait_for(reader.readexactly(8), 10) for _ in range(count - 10)]
            writer.close()
        return held_back, started_after_ten, [struct.unpack(">ii", answer)[1] for answer in answers]

    held_back, started_after_ten, answered = uvloop.run(main())
    assert held_back == MAX_IN_FLIGHT
    assert started_after_ten == MAX_IN_FLIGHT + 10
    assert answered == list(range(count))
