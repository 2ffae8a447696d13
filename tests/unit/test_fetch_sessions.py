"""The leader's fetch session cache: epochs, what an incremental fetch reads, eviction when full."""
from __future__ import annotations

import asyncio

from kafka.protocol.consumer import FetchRequest

from cluster.formats.errors import ErrorCode
from node.apis.fetch import PartitionFetch
from node.fetch_sessions import FetchSessionCache

Partition = FetchRequest.FetchTopic.FetchPartition


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(session_id: int, epoch: int, partitions: dict[int, int], forgotten=()):
    """A v12 Fetch for topic "t": partition -> fetch offset."""
    topics = [FetchRequest.FetchTopic(topic="t", partitions=[
        Partition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                  partition_max_bytes=1 << 20) for p, o in partitions.items()])] if partitions else []
    return FetchRequest[12](cluster_id=None, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                            isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="t", partitions=list(forgotten))]
                            if forgotten else [], rack_id="")


def read(context, high_watermark: int = 5) -> list[PartitionFetch]:
    """What the handler would read: nothing new, at an unchanged high watermark."""
    return [PartitionFetch("t", None, part, high_watermark=high_watermark, log_start_offset=0)
            for _, part in context.partitions]


def open_session(cache: FetchSessionCache, partitions: dict[int, int], replica_id: int = -1) -> int:
    context = cache.context(request(0, 0, partitions), 12, replica_id)
    session_id, carried = cache.answer(context, read(context))
    assert len(carried) == len(partitions)
    return session_id


def test_an_incremental_fetch_reads_only_what_it_names_or_was_told_of():
    cache = FetchSessionCache()
    session_id = open_session(cache, {0: 5, 1: 5, 2: 5})
    quiet = cache.context(request(session_id, 1, {}), 12, -1)
    assert quiet.partitions == []
    assert cache.answer(quiet, read(quiet)) == (session_id, [])
    cache.touched("t", None, 2)
    named = cache.context(request(session_id, 2, {0: 5}), 12, -1)
    assert sorted(part.partition for _, part in named.partitions) == [0, 2]
    # Named, but nothing changed for the fetcher: the answer leaves both out.
    assert cache.answer(named, read(named)) == (session_id, [])
    moved = cache.context(request(session_id, 3, {1: 5}), 12, -1)
    assert [fetch.request.partition for fetch in cache.answer(moved, read(moved, high_watermark=6))[1]] == [1]


def test_epochs_and_ids_are_checked_and_a_full_fetch_closes_the_session():
    cache = FetchSessionCache()
    session_id = open_session(cache, {0: 0})
    assert cache.context(request(session_id, 2, {}), 12, -1).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.context(request(session_id + 1, 1, {}), 12, -1).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(request(session_id, 1, {}), 13, -1).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.context(request(session_id, 1, {}), 12, -1).error == ErrorCode.NONE
    cache.context(request(session_id, -1, {0: 0}), 12, -1)
    assert cache.context(request(session_id, 2, {}), 12, -1).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache()
    session_id = open_session(cache, {0: 0, 1: 0})
    context = cache.context(request(session_id, 1, {}, forgotten=[0, 1]), 12, -1)
    assert cache.answer(context, read(context)) == (0, [])
    assert session_id not in cache.sessions


def test_a_full_cache_makes_room_for_followers_and_larger_sessions_then_for_stale_ones():
    clock = Clock()
    cache = FetchSessionCache(max_sessions=2, eviction_ms=120_000, clock=clock)
    small = open_session(cache, {0: 0})
    large = open_session(cache, {0: 0, 1: 0, 2: 0})
    assert open_session(cache, {0: 0}) == 0  # outranks neither: not cached
    follower = open_session(cache, {0: 0}, replica_id=2)
    assert set(cache.sessions) == {large, follower} and small not in cache.sessions
    clock.now += 121  # the consumer's session has gone unused for longer than the eviction time
    assert open_session(cache, {0: 0}) != 0
    assert large not in cache.sessions


def test_a_followers_parked_fetch_waits_out_high_watermark_moves_and_a_consumers_does_not():
    asyncio.run(_parked_fetches_and_high_watermark_moves())


async def _parked_fetches_and_high_watermark_moves():
    cache = FetchSessionCache()
    replica_ids = {"follower": 2, "consumer": -1}
    sessions = {who: open_session(cache, {0: 5}, replica_id) for who, replica_id in replica_ids.items()}
    woken = {}
    for who, session_id in sessions.items():
        context = cache.context(request(session_id, 1, {}), 12, replica_ids[who])
        cache.touched("t", None, 0, high_watermark_only=True)
        woken[who] = await context.wait(0.05)
        later = cache.context(request(session_id, 2, {}), 12, replica_ids[who])
        # Either way the move is news to the session's next read.
        assert [part.partition for _, part in later.partitions] == [0]
    assert woken == {"follower": False, "consumer": True}
    follower = cache.context(request(sessions["follower"], 3, {}), 12, replica_ids["follower"])
    cache.touched("t", None, 0)  # an append wakes it at once
    assert await follower.wait(5) is True


def test_a_follower_outside_the_isr_has_the_partition_read_next_without_being_woken():
    asyncio.run(_read_next_for_a_follower_outside_the_isr())


async def _read_next_for_a_follower_outside_the_isr():
    cache = FetchSessionCache()
    outside, inside = open_session(cache, {0: 5}, replica_id=2), open_session(cache, {0: 5}, replica_id=3)
    parked = cache.context(request(outside, 1, {}), 12, 2)
    cache.read_next_for([2], "t", None, 0)
    assert await parked.wait(0.05) is False
    assert [part.partition for _, part in parked.take_woken()] == [0]
    assert cache.context(request(inside, 1, {}), 12, 3).partitions == []
