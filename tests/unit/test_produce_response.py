"""Produce answers are written with struct (node.produce_answers) or, when they carry a tagged field
or come in versions 0-2, built with tuples for their topics and partitions (node.wire_tuples): on
the wire they must be, byte for byte, what kafka.protocol's data classes encode, for every version."""
from __future__ import annotations

import uuid

import pytest
from kafka.protocol.producer import ProduceResponse

from cluster.formats.errors import ErrorCode
from node.apis import produce
from node.spliced_response import EncodedResponse

TOPIC_ID = uuid.UUID(int=5)
Topic = ProduceResponse.TopicProduceResponse
Partition = Topic.PartitionProduceResponse


def answers(with_leader: bool) -> list[dict]:
    written = {"index": 0, "error_code": ErrorCode.NONE, "base_offset": 1_234, "log_append_time_ms": 1_700_000_000_000,
               "log_start_offset": 17, "record_errors": [], "error_message": None}
    refused = produce._error(2, ErrorCode.MESSAGE_TOO_LARGE, "record batch exceeds max.message.bytes 1048588")
    moved = produce._error(5, ErrorCode.NOT_LEADER_OR_FOLLOWER, leader=(3, 8) if with_leader else None)
    return [written, refused, moved]


def encoded_with_data_classes(topics, version: int, endpoints) -> bytes:
    responses = [Topic(name=name, topic_id=topic_id, partition_responses=[Partition(**a) for a in partitions])
                 for name, topic_id, partitions in topics]
    extra = {"node_endpoints": [ProduceResponse.NodeEndpoint(node_id=n, host=h, port=p, rack=r)
                                for n, h, p, r in endpoints]} if endpoints else {}
    return bytes(ProduceResponse[version](responses=responses, throttle_time_ms=0, **extra).encode(version=version))


@pytest.mark.parametrize("with_leader", [False, True], ids=["as tuples", "naming a leader"])
@pytest.mark.parametrize("version", range(produce.VERSIONS[0], produce.VERSIONS[1] + 1))
def test_a_produce_answer_encodes_as_with_data_classes(version, with_leader):
    name = "orders" if version < 13 else None
    topics = [(name, TOPIC_ID, answers(with_leader)), ("audit" if version < 13 else None, uuid.UUID(int=6), [])]
    endpoints = [(3, "10.0.0.3", 9092, None)] if with_leader else []
    answer = produce.response_of(topics, version, endpoints)
    written_by_hand = version >= 3 and not with_leader
    assert isinstance(answer, EncodedResponse) == written_by_hand
    wire = b"".join(answer.encode_pieces(version)) if written_by_hand else bytes(answer.encode(version=version))
    assert wire == encoded_with_data_classes(topics, version, endpoints)

    decoded = ProduceResponse.decode(wire, version=version)
    partitions = decoded.responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in partitions] == [
        (0, ErrorCode.NONE, 1_234), (2, ErrorCode.MESSAGE_TOO_LARGE, -1), (5, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]
    if with_leader and version >= 10:
        assert (partitions[2].current_leader.leader_id, partitions[2].current_leader.leader_epoch) == (3, 8)


@pytest.mark.parametrize("version", range(3, produce.VERSIONS[1] + 1))
def test_a_written_answer_carries_names_messages_and_many_partitions_as_kafka_protocol_does(version):
    """Multi-byte counts and lengths, a non-ASCII name, and an error message on some partitions."""
    name = "zähler-" + "x" * 200 if version < 13 else None
    written = [{"index": i, "error_code": ErrorCode.NONE, "base_offset": 10 * i, "log_append_time_ms": -1,
                "log_start_offset": i, "record_errors": [], "error_message": None} for i in range(150)]
    refused = [produce._error(150 + i, ErrorCode.CORRUPT_MESSAGE, f"batch {i}: bad CRC") for i in range(3)]
    topics = [(name, TOPIC_ID, written + refused)]
    answer = produce.response_of(topics, version, [])
    assert isinstance(answer, EncodedResponse)
    assert b"".join(answer.encode_pieces(version)) == encoded_with_data_classes(topics, version, [])
