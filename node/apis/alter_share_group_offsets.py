"""AlterShareGroupOffsets v0: set the share-partition start offsets of an empty share group.

Answered by the group's coordinator: each share-partition is initialized again (InitializeShareGroupState
through the persister) at the given offset with the next state epoch, so that its state batches are
gone and a partition leader still holding the old state is fenced. A group with members is
NON_EMPTY_GROUP, a group this node does not coordinate NOT_COORDINATOR, one that is not a share
group GROUP_ID_NOT_FOUND, each on every partition of the request (the response has no group-level
error); an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION.

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import GROUP, READ
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.security import authorizer
from node.share_coordinator.group_offsets import empty_share_group, message, partition_error, reset


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = AlterShareGroupOffsetsRequest
RESPONSE = AlterShareGroupOffsetsResponse
VERSIONS = (0, 0)
TOPIC = RESPONSE.AlterShareGroupOffsetsResponseTopic
PARTITION = TOPIC.AlterShareGroupOffsetsResponsePartition


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    error, _ = empty_share_group(broker, request.group_id)
    topics = await asyncio.gather(*(_alter_topic(broker, request.group_id, topic, error) for topic in request.topics))
    return RESPONSE[header.api_version](throttle_time_ms=0, responses=list(topics))


async def _alter_topic(broker, group_id: str, topic, group_error: ErrorCode):
    """Every partition reset at once: each reset may retry up to request.timeout.ms."""
    answers = await asyncio.gather(*(_alter_partition(broker, group_id, topic.topic_name, entry, group_error)
                                     for entry in topic.partitions))
    topic_id = partition_error(broker, topic.topic_name, 0)[0]
    return TOPIC(topic_name=topic.topic_name, topic_id=topic_id, partitions=list(answers))


async def _alter_partition(broker, group_id: str, topic_name: str, entry, group_error: ErrorCode):
    topic_id, error = partition_error(broker, topic_name, entry.partition_index)
    error = group_error or error
    if not error:
        error = ErrorCode.INVALID_REQUEST if entry.start_offset < 0 else \
            await reset(broker, group_id, topic_id, entry.partition_index, entry.start_offset)
    return PARTITION(partition_index=entry.partition_index, error_code=int(error), error_message=message(error))
