"""A follower reads its leader's Fetch v12 answers by hand (node.follower_fetch_answers): every field it
applies must be what kafka.protocol decodes from the same bytes, and a cut or malformed answer must
raise ValueError (the fetcher reconnects), never anything else."""
from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.records import encode_batch
from node.follower_fetch_answers import DivergingEpoch, read_fetch_answer
from node.replica_fetcher import FETCH_VERSION

Topic = FetchResponse.FetchableTopicResponse
Partition = Topic.PartitionData


def batch(base_offset: int, values: list[bytes]) -> bytes:
    return bytes(encode_batch([(None, v) for v in values], base_offset=base_offset, timestamp=1_700_000_000_000))


def encoded(topics: list, error_code: int = ErrorCode.NONE, session_id: int = 77) -> memoryview:
    response = FetchResponse[FETCH_VERSION](throttle_time_ms=5, error_code=error_code, session_id=session_id,
                                            responses=topics)
    return memoryview(bytes(response.encode(version=FETCH_VERSION)))


def answer_with_everything() -> list:
    records = batch(40, [b"a" * 300, b"b"]) + batch(42, [b"c"])
    return [
        Topic(topic="orders", partitions=[
            Partition(partition_index=0, error_code=ErrorCode.NONE, high_watermark=41, last_stable_offset=41,
                      log_start_offset=3, records=records),
            Partition(partition_index=7, error_code=ErrorCode.NONE, high_watermark=9, last_stable_offset=9,
                      log_start_offset=0, records=None,
                      diverging_epoch=Partition.EpochEndOffset(epoch=4, end_offset=2 ** 40),
                      current_leader=Partition.LeaderIdAndEpoch(leader_id=3, leader_epoch=5),
                      snapshot_id=Partition.SnapshotId(end_offset=8, epoch=2)),
            Partition(partition_index=9, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, high_watermark=-1,
                      last_stable_offset=-1, log_start_offset=-1, records=b"",
                      aborted_transactions=[Partition.AbortedTransaction(producer_id=12, first_offset=30),
                                            Partition.AbortedTransaction(producer_id=13, first_offset=31)],
                      preferred_read_replica=2),
        ]),
        Topic(topic="zähler-" + "x" * 150, partitions=[
            Partition(partition_index=i, error_code=ErrorCode.NONE, high_watermark=i, last_stable_offset=i,
                      log_start_offset=0, records=batch(i, [b"v%d" % i])) for i in range(130)]),
    ]


def fields_by_kafka_protocol(body: memoryview) -> tuple:
    decoded = FetchResponse.decode(body, version=FETCH_VERSION)
    return decoded.error_code, decoded.session_id, [
        (topic.topic, [(p.partition_index, p.error_code, p.high_watermark, p.log_start_offset,
                        None if p.diverging_epoch is None else (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
                        None if p.records is None else bytes(p.records)) for p in topic.partitions])
        for topic in decoded.responses]


def fields_read_by_hand(body: memoryview) -> tuple:
    answer = read_fetch_answer(body)
    return answer.error_code, answer.session_id, [
        (topic, [(index, error, high_watermark, log_start, None if diverging is None else tuple(diverging),
                  None if records is None else bytes(records))
                 for index, error, high_watermark, log_start, diverging, records in partitions])
        for topic, partitions in answer.responses]


def test_an_answer_reads_as_kafka_protocol_decodes_it():
    body = encoded(answer_with_everything())
    assert fields_read_by_hand(body) == fields_by_kafka_protocol(body)
    answer = read_fetch_answer(body)
    orders = answer.responses[0][1]
    assert orders[1][4] == DivergingEpoch(4, 2 ** 40) and orders[1][5] is None
    assert bytes(orders[0][5]) == batch(40, [b"a" * 300, b"b"]) + batch(42, [b"c"])
    assert isinstance(orders[0][5], memoryview)  # a view of the answer, not a copy
    assert len(answer.responses[1][1]) == 130


def test_an_answer_refusing_the_session_reads_its_error_and_nothing_else():
    body = encoded([], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    answer = read_fetch_answer(body)
    assert (answer.error_code, answer.session_id, answer.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])


def test_a_tag_the_follower_does_not_know_is_skipped():
    """A later leader may send partition tags this schema lacks: they are skipped, not misread."""
    records = batch(0, [b"x"])
    body = bytearray(encoded([Topic(topic="t", partitions=[Partition(
        partition_index=0, error_code=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
        records=records)])]))
    partition_tags_at = len(body) - 3  # the partition's, the topic's and the answer's empty tag sections
    assert body[partition_tags_at:] == b"\x00\x00\x00"
    body[partition_tags_at:partition_tags_at + 1] = bytes([1, 9, 3]) + b"\xff\xff\xff"  # one tag: 9, 3 bytes
    answer = read_fetch_answer(memoryview(bytes(body)))
    ((_, _, high_watermark, _, diverging, got),) = answer.responses[0][1]
    assert (high_watermark, diverging, bytes(got)) == (1, None, records)


def test_every_cut_of_an_answer_raises_value_error():
    body = bytes(encoded(answer_with_everything()[:1]))
    for end in range(len(body)):
        with pytest.raises(ValueError):
            read_fetch_answer(memoryview(body[:end]))
