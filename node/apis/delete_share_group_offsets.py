"""DeleteShareGroupOffsets v0: forget the share-partition state of an empty share group's topics.

Answered by the group's coordinator: each share-partition's state is deleted (DeleteShareGroupState
through the persister); a share group that consumes the partition again starts it afresh. A group
with members is NON_EMPTY_GROUP, a group this node does not coordinate NOT_COORDINATOR, one that is
not a share group GROUP_ID_NOT_FOUND, at the top level; an unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION on its partitions.

With an authorizer (node.security.authorizer), the request needs DELETE on the group; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import DELETE, GROUP
from node.apis import schemas
from node.security import authorizer
from node.share_coordinator.group_offsets import empty_share_group, forget, message, partition_error


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = DeleteShareGroupOffsetsRequest
RESPONSE = DeleteShareGroupOffsetsResponse
VERSIONS = (0, 0)
TOPIC = RESPONSE.DeleteShareGroupOffsetsResponseTopic
PARTITION = TOPIC.DeleteShareGroupOffsetsResponsePartition


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, DELETE, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    error, _ = empty_share_group(broker, request.group_id)
    if error:
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=int(error), error_message=message(error),
                                            responses=[])
    topics = await asyncio.gather(*(_delete_topic(broker, request.group_id, topic) for topic in request.topics))
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=0, error_message=None, responses=list(topics))


async def _delete_topic(broker, group_id: str, topic):
    """Every partition's state deleted at once: each deletion may retry up to request.timeout.ms."""
    answers = await asyncio.gather(*(_delete_partition(broker, group_id, topic.topic_name, partition)
                                     for partition in topic.partitions))
    topic_id = partition_error(broker, topic.topic_name, 0)[0]
    return TOPIC(topic_name=topic.topic_name, topic_id=topic_id, partitions=list(answers))


async def _delete_partition(broker, group_id: str, topic_name: str, partition: int):
    topic_id, error = partition_error(broker, topic_name, partition)
    if not error:
        error = await forget(broker, group_id, topic_id, partition)
    return PARTITION(partition_index=partition, error_code=int(error), error_message=message(error))
