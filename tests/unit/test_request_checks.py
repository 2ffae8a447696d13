"""node.request_checks: what Kafka's request parser refuses never reaches a handler."""
from __future__ import annotations

import re

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DescribeTopicPartitionsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import MetadataRequest

from node import request_checks
from node.client_connection import MalformedRequest


def body(request, version: int) -> memoryview:
    # (ApiMessage's own encoder: MetadataRequest's would write a null v0 topic list as empty)
    return memoryview(bytes(ApiMessage.encode(request, version=version)))


def test_a_well_formed_request_decodes_as_kafka_protocol_decodes_it():
    request = MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                 allow_auto_topic_creation=False)
    decoded = request_checks.decode(MetadataRequest, body(request, 9), 9)
    assert decoded == MetadataRequest.decode(body(request, 9), version=9)
    assert decoded.topics[0].name == "t"


def test_a_null_where_the_schema_allows_one_is_kept():
    request = MetadataRequest[1](topics=None)  # null topics: every topic, from v1 on
    assert request_checks.decode(MetadataRequest, body(request, 1), 1).topics is None
    cursorless = DescribeTopicPartitionsRequest[0](topics=[], response_partition_limit=10, cursor=None)
    assert request_checks.decode(DescribeTopicPartitionsRequest, body(cursorless, 0), 0).cursor is None


@pytest.mark.parametrize("request_class, version, message, field", [
    (MetadataRequest, 0, MetadataRequest[0](topics=None), "topics"),
    (DeleteGroupsRequest, 2, DeleteGroupsRequest[2](groups_names=None), "groups_names"),
    (DeleteGroupsRequest, 0, DeleteGroupsRequest[0](groups_names=["g", None]), "groups_names[]"),
    (DescribeTopicPartitionsRequest, 0, DescribeTopicPartitionsRequest[0](
        topics=[], response_partition_limit=10,
        cursor=DescribeTopicPartitionsRequest.Cursor(topic_name=None, partition_index=0)), "cursor.topic_name"),
])
def test_a_null_the_schema_forbids_is_malformed(request_class, version, message, field):
    with pytest.raises(MalformedRequest, match=re.escape(f"non-nullable field {field} is null")):
        request_checks.decode(request_class, body(message, version), version)


def test_a_string_running_past_the_frame_is_malformed():
    request = DeleteGroupsRequest[0](groups_names=["a-group"])
    cut = body(request, 0)[:-3]  # kafka.protocol would read the name as "a-gr"
    with pytest.raises(MalformedRequest, match="past its frame"):
        request_checks.decode(DeleteGroupsRequest, cut, 0)


def test_bytes_that_are_no_request_are_malformed():
    with pytest.raises(MalformedRequest, match="cannot decode"):
        request_checks.decode(MetadataRequest, memoryview(b"\x00\x00"), 9)


@pytest.mark.parametrize("huge", ["x" * 32768, "\u00e9" * 16384, "\U0001f600" * 8192],
                         ids=["ascii", "two-byte", "four-byte"])
def test_a_string_longer_than_kafka_reads_is_malformed(huge):
    """Kafka's readers refuse a string of more than 32767 bytes of UTF-8, whatever its characters."""
    from kafka.protocol.metadata import FindCoordinatorRequest
    from kafka.protocol.producer import InitProducerIdRequest

    assert len(huge.encode()) == 32768
    init = InitProducerIdRequest[4](transactional_id=huge, transaction_timeout_ms=1000, producer_id=-1,
                                    producer_epoch=-1)
    with pytest.raises(MalformedRequest, match="string field transactional_id is longer than 32767 bytes"):
        request_checks.decode(InitProducerIdRequest, body(init, 4), 4)
    find = FindCoordinatorRequest[4](key_type=1, coordinator_keys=["short", huge])
    with pytest.raises(MalformedRequest, match=re.escape("string field coordinator_keys[] is longer than")):
        request_checks.decode(FindCoordinatorRequest, body(find, 4), 4)

    longest = huge.encode()[:-4].decode() + "abc"  # 32767 bytes
    init = InitProducerIdRequest[4](transactional_id=longest, transaction_timeout_ms=1000, producer_id=-1,
                                    producer_epoch=-1)
    assert request_checks.decode(InitProducerIdRequest, body(init, 4), 4).transactional_id == longest


def test_a_request_with_nothing_that_can_be_null_has_no_check():
    from kafka.protocol.metadata import ApiVersionsRequest

    assert request_checks.struct_check(ApiVersionsRequest._struct, 0) is None
    assert request_checks.struct_check(ApiVersionsRequest._struct, 3) is not None  # the software name


def test_every_served_request_decodes_as_api_message_decodes():
    """request_checks calls the compiled decoder that ApiMessage.decode calls; a request class
    with a decode of its own would be bypassed."""
    from node.apis import HANDLERS

    for handler in HANDLERS.values():
        assert handler.request.decode.__func__ is ApiMessage.decode.__func__, handler.request.name
