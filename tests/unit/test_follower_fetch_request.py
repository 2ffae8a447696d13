"""A follower's Fetch request is encoded by hand (struct, varints) and framed with a header packed
by hand: on the wire it must be, byte for byte, the request kafka.protocol's data classes encode
with its header, framed."""
from __future__ import annotations

from kafka.protocol.consumer import FetchRequest

from node.replica_fetcher import (
    FETCH_VERSION, PARTITION_MAX_BYTES, FollowerSession, follower_fetch_request, framed_request,
)


def encoded_with_data_classes(session: FollowerSession, to_send: dict, forgotten: list) -> bytes:
    topics: dict = {}
    for (topic, index), (offset, leader_epoch, last_epoch, log_start) in to_send.items():
        topics.setdefault(topic, []).append(FetchRequest.FetchTopic.FetchPartition(
            partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=last_epoch,
            log_start_offset=log_start, partition_max_bytes=PARTITION_MAX_BYTES))
    gone: dict = {}
    for topic, index in forgotten:
        gone.setdefault(topic, []).append(index)
    request = FetchRequest[FETCH_VERSION](
        cluster_id=None, replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        session_id=session.session_id, session_epoch=session.epoch,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts) for topic, parts in topics.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=topic, partitions=parts)
                               for topic, parts in gone.items()],
        rack_id="")
    request.with_header(correlation_id=41, client_id="replica-2")
    return bytes(request.encode(version=FETCH_VERSION, header=True, framed=True))


def test_a_followers_fetch_request_encodes_as_with_data_classes():
    session = FollowerSession()
    session.session_id, session.epoch = 1_234_567, 9
    to_send = {("orders", 0): (1_000, 3, 3, 0), ("orders", 7): (0, 3, -1, 0), ("payments", 2): (2 ** 40, 12, 11, 5)}
    forgotten = [("orders", 4), ("audit", 0)]
    wire = framed_request(follower_fetch_request(2, 500, session, to_send, forgotten), 41, b"replica-2")
    assert wire == encoded_with_data_classes(session, to_send, forgotten)

    decoded = FetchRequest.decode(wire, version=FETCH_VERSION, header=True, framed=True)
    assert [(t.topic, [(p.partition, p.fetch_offset, p.last_fetched_epoch) for p in t.partitions])
            for t in decoded.topics] == [("orders", [(0, 1_000, 3), (7, 0, -1)]), ("payments", [(2, 2 ** 40, 11)])]
    assert [(t.topic, t.partitions) for t in decoded.forgotten_topics_data] == [("orders", [4]), ("audit", [0])]


def test_an_empty_incremental_request_encodes_as_with_data_classes():
    session = FollowerSession()
    session.session_id, session.epoch = 77, 2
    wire = framed_request(follower_fetch_request(2, 500, session, {}, []), 41, b"replica-2")
    assert wire == encoded_with_data_classes(session, {}, [])


def test_long_names_and_many_partitions_encode_as_with_data_classes():
    # Past 126 entries or bytes, lengths take a second varint byte.
    session = FollowerSession()
    session.session_id, session.epoch = 2 ** 31 - 1, 2 ** 31 - 1
    long_name = "t" * 200
    to_send = {(long_name, index): (index * 1_000, 5, 4 if index % 2 else -1, index) for index in range(300)}
    to_send[("short", 0)] = (-1, -1, -1, -1)
    forgotten = [(long_name + "-gone", index) for index in range(150)]
    wire = framed_request(follower_fetch_request(2, 500, session, to_send, forgotten), 41, b"replica-2")
    assert wire == encoded_with_data_classes(session, to_send, forgotten)
