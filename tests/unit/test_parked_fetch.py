"""A follower's Fetch parked in its session on a leader: news that comes just as its wait runs out
is still answered, now or in the next Fetch.

A real Broker's replica manager and fetch handler (tests/unit/test_isr_expiry.py's leader of
orders-0 and orders-1); the follower's requests are handed to the handler.
"""
import asyncio

from kafka.protocol.consumer import FetchRequest

from cluster.formats.records import encode_batch, iter_records
from node.apis import fetch
from tests.unit.test_isr_expiry import VERSION, follower_fetch, leading
from tests.unit.headers import request_header


def incremental_fetch(session_id: int, epoch: int, offsets: dict[int, int], max_wait_ms: int):
    partitions = [FetchRequest.FetchTopic.FetchPartition(partition=index, current_leader_epoch=0, fetch_offset=offset,
                                                         last_fetched_epoch=0, log_start_offset=0,
                                                         partition_max_bytes=1 << 20)
                  for index, offset in offsets.items()]
    return FetchRequest[VERSION](
        cluster_id=None, replica_id=2, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic="orders", partitions=partitions)] if partitions else [],
        forgotten_topics_data=[], rack_id="")


def values_answered(spliced) -> dict[int, list[bytes]]:
    pieces = b"".join(bytes(piece) for piece in spliced.encode_pieces(VERSION))
    decoded = fetch.RESPONSE.decode(pieces, version=VERSION)
    return {p.partition_index: [r.value for r in iter_records(p.records)] if p.records else []
            for t in decoded.responses for p in t.partitions}


def append(broker, partition: int, value: bytes) -> None:
    broker.replicas.get_log("orders", partition).append(encode_batch([(None, value)], timestamp=1000), leader_epoch=0)
    broker.replicas.partitions["orders", partition].appended_as_leader()


def test_an_append_just_after_the_wait_ran_out_is_not_lost_to_the_session(tmp_path):
    async def scenario():
        broker, _ = await leading(tmp_path)
        append(broker, 0, b"first")
        session = await follower_fetch(broker, 2, 0, 0, {0: 0, 1: 0})
        # The follower has "first" and asks from offset 1: nothing yet, so its Fetch parks.
        parked = asyncio.create_task(fetch.handle(broker, request_header(VERSION),
                                                  incremental_fetch(session, 1, {0: 1}, max_wait_ms=30_000)))
        for _ in range(3):
            await asyncio.sleep(0)
        waiter = broker.fetch_sessions.sessions[session].waiter
        assert waiter is not None and not waiter.done()
        # Its wait runs out (the timer settles the waiter, as result_within does), and before the
        # parked request runs again, the next record is appended.
        waiter.set_result(False)
        append(broker, 0, b"second")
        answered = values_answered(await parked)
        if answered.get(0) != [b"second"]:
            following = await fetch.handle(broker, request_header(VERSION),
                                           incremental_fetch(session, 2, {}, max_wait_ms=0))
            answered = values_answered(following)
        assert answered.get(0) == [b"second"]
        broker.replicas.close()

    asyncio.run(scenario())
