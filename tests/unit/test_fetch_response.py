"""Fetch answers write their record sets beside the encoded fields (node.spliced_response, and
node.fetch_answers for flexible versions without tagged fields): what goes on the wire must be,
byte for byte, what kafka.protocol encodes with the records inside, for every Fetch version, and
must decode with kafka.protocol to the same records."""
from __future__ import annotations

import os
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import encode_batch
from node.apis import fetch
from node.spliced_response import EncodedResponse, SplicedResponse

SESSION_ID = 7_340_033  # any session id: the spliced and the inline answer must carry it alike
TOPIC_IDS = {"orders": uuid.UUID(int=1), "payments": uuid.UUID(int=2)}
# Sizes around the one-byte and two-byte compact length prefixes (127, 128) and a large one.
RECORD_SETS = {("orders", 0): os.urandom(126), ("orders", 1): b"", ("orders", 2): os.urandom(127),
               ("payments", 0): os.urandom(20_000), ("payments", 1): os.urandom(128)}


def partition_fetches(records_of, tagged: bool = False, interleaved: bool = False) -> list[fetch.PartitionFetch]:
    """One fetch per record set; with `tagged`, one names its leader and one a diverging epoch
    (fields a Fetch answer carries as tagged fields from v12); `interleaved` alternates the topics,
    as a follower's fetch of several topics may. Two are read_committed reads: one with aborted
    transactions and a last stable offset below the high watermark, one with none."""
    fetches = []
    for (topic, partition), records in RECORD_SETS.items():
        request = FetchRequest.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                                         last_fetched_epoch=-1, log_start_offset=-1,
                                                         partition_max_bytes=1 << 20)
        fetches.append(fetch.PartitionFetch(topic, TOPIC_IDS[topic], request, records=records_of(records),
                                            high_watermark=5, log_start_offset=0))
    fetches[1].error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetches[0].last_stable_offset, fetches[0].aborted = 3, [(7, 1), (9, 2)]
    fetches[3].last_stable_offset, fetches[3].aborted = 5, []
    if tagged:
        fetches[1].leader = (3, 9)
        fetches[2].diverging = (4, 120)
    return [fetches[i] for i in (0, 3, 1, 4, 2)] if interleaved else fetches


class KnownLeaders:
    """What fetch._response asks of the broker: where a leader it names can be reached."""

    @staticmethod
    def endpoint_of(node_id: int, listener: str):
        return ("10.0.0.3", 9092, "rack-c") if node_id == 3 and listener == "PLAINTEXT" else None


def encoded_with_data_classes(fetches: list[fetch.PartitionFetch], version: int) -> bytes:
    """The same answer built field by field with kafka.protocol's data classes, records inside."""
    Topic = FetchResponse.FetchableTopicResponse
    Partition = Topic.PartitionData
    topics: dict = {}
    for f in fetches:
        tags = {}
        if f.diverging is not None:
            tags["diverging_epoch"] = Partition.EpochEndOffset(epoch=f.diverging[0], end_offset=f.diverging[1])
        if f.leader is not None:
            tags["current_leader"] = Partition.LeaderIdAndEpoch(leader_id=f.leader[0], leader_epoch=f.leader[1])
        aborted = None if f.aborted is None else [
            Partition.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
            for producer_id, first_offset in f.aborted]
        partition = Partition(partition_index=f.request.partition, error_code=f.error, high_watermark=f.high_watermark,
                              last_stable_offset=f.last_stable_offset if f.last_stable_offset >= 0 else f.high_watermark,
                              log_start_offset=f.log_start_offset, aborted_transactions=aborted,
                              preferred_read_replica=-1, records=bytes(f.records), **tags)
        key = (f.topic, f.topic_id)
        if key not in topics:
            topics[key] = Topic(topic=f.topic if version < 13 else None, topic_id=f.topic_id, partitions=[])
        topics[key].partitions.append(partition)
    endpoints = {}
    if any(f.leader for f in fetches):
        endpoints["node_endpoints"] = [FetchResponse.NodeEndpoint(node_id=3, host="10.0.0.3", port=9092, rack="rack-c")]
    response = FetchResponse[version](throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=SESSION_ID,
                                      responses=list(topics.values()), **endpoints)
    return bytes(response.encode(version=version))


@pytest.mark.parametrize("interleaved", [False, True], ids=["topic by topic", "topics interleaved"])
@pytest.mark.parametrize("tagged", [False, True], ids=["as tuples", "with tagged fields"])
@pytest.mark.parametrize("version", range(fetch.VERSIONS[0], fetch.VERSIONS[1] + 1))
def test_spliced_fetch_response_is_what_the_encoder_writes_with_records_inside(version, tagged, interleaved):
    spliced = fetch._response(KnownLeaders, partition_fetches(memoryview, tagged, interleaved), version, SESSION_ID,
                              "PLAINTEXT")
    # Flexible versions without tagged fields are written by hand; the rest spliced into kafka.protocol's.
    assert isinstance(spliced, EncodedResponse if version >= 12 and not tagged else SplicedResponse)
    wire = b"".join(bytes(piece) for piece in spliced.encode_pieces(version))

    assert wire == encoded_with_data_classes(partition_fetches(bytes, tagged, interleaved), version)

    decoded = FetchResponse.decode(wire, version=version)
    records = [bytes(p.records or b"") for t in decoded.responses for p in t.partitions]
    assert records == list(RECORD_SETS.values())
    if version >= 4:
        first = decoded.responses[0].partitions[0]
        assert first.last_stable_offset == 3
        assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [(7, 1), (9, 2)]
    if tagged and version >= 12:
        partitions = [p for t in decoded.responses for p in t.partitions]
        assert (partitions[1].current_leader.leader_id, partitions[1].current_leader.leader_epoch) == (3, 9)
        assert (partitions[2].diverging_epoch.epoch, partitions[2].diverging_epoch.end_offset) == (4, 120)
    if tagged and version >= 16:
        endpoints = [(e.node_id, e.host, e.port, e.rack) for e in decoded.node_endpoints]
        assert endpoints == [(3, "10.0.0.3", 9092, "rack-c")]


def test_a_read_keeps_its_bytes_when_the_segment_rolls_and_is_deleted_before_the_send(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=1024, retention_bytes=1024))
    first = encode_batch([(None, b"a" * 600)], timestamp=1_000)
    log.append(first, leader_epoch=0)
    read = log.read(0, 1 << 20).records
    for i in range(4):
        log.append(encode_batch([(None, b"b" * 600)], timestamp=2_000 + i), leader_epoch=0)
    log.enforce_retention()
    assert log.log_start_offset > 0 and not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert bytes(read)[16:] == first[16:]  # all but the offset and leader epoch the append set
