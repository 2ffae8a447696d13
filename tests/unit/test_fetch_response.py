"""Fetch answers write their record sets beside the encoded fields (node.spliced_response):
what goes on the wire must be, byte for byte, what kafka.protocol encodes with the records
inside, for every Fetch version, and must decode with kafka.protocol to the same records."""
from __future__ import annotations

import os
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.log import LogConfig, PartitionLog
from cluster.formats.records import encode_batch
from node.apis import fetch
from node.spliced_response import SplicedResponse

SESSION_ID = 7_340_033  # any session id: the spliced and the inline answer must carry it alike
TOPIC_IDS = {"orders": uuid.UUID(int=1), "payments": uuid.UUID(int=2)}
# Sizes around the one-byte and two-byte compact length prefixes (127, 128) and a large one.
RECORD_SETS = {("orders", 0): os.urandom(126), ("orders", 1): b"", ("orders", 2): os.urandom(127),
               ("payments", 0): os.urandom(20_000), ("payments", 1): os.urandom(128)}


def partition_fetches(records_of) -> list[fetch.PartitionFetch]:
    fetches = []
    for (topic, partition), records in RECORD_SETS.items():
        request = FetchRequest.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                                         last_fetched_epoch=-1, log_start_offset=-1,
                                                         partition_max_bytes=1 << 20)
        fetches.append(fetch.PartitionFetch(topic, TOPIC_IDS[topic], request, records=records_of(records),
                                            high_watermark=5, log_start_offset=0))
    fetches[1].error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return fetches


@pytest.mark.parametrize("version", range(fetch.VERSIONS[0], fetch.VERSIONS[1] + 1))
def test_spliced_fetch_response_is_what_the_encoder_writes_with_records_inside(version):
    spliced = fetch._response(None, partition_fetches(memoryview), version, SESSION_ID)
    assert isinstance(spliced, SplicedResponse)
    wire = b"".join(bytes(piece) for piece in spliced.encode_pieces(version))

    inline = fetch._response(None, partition_fetches(bytes), version, SESSION_ID).response
    for topic in inline.responses:
        for partition in topic.partitions:
            name = topic.topic if version < 13 else next(n for n, i in TOPIC_IDS.items() if i == topic.topic_id)
            partition.records = RECORD_SETS[(name, partition.partition_index)]
    assert wire == bytes(inline.encode(version=version))

    decoded = FetchResponse.decode(wire, version=version)
    records = [bytes(p.records or b"") for t in decoded.responses for p in t.partitions]
    assert records == list(RECORD_SETS.values())


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
