"""DescribeShareGroupOffsets v0: the share-partition start offset of each partition a share group consumes.

Answered by the group's coordinator: each share-partition's start offset is read from the share
coordinator (ReadShareGroupStateSummary through the persister); -1 for a partition the group never
began consuming. Topics null means every topic the group's members subscribe to. A group this node
does not coordinate is NOT_COORDINATOR, one that is not a share group GROUP_ID_NOT_FOUND, both at the
group level; an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION on its partitions.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on each group; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: the leader epoch of each answer is -1 (Kafka's is the share-partition's), and
topics null covers the topics subscribed to now, where Kafka covers those the group's state was
ever initialized for.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import DESCRIBE, GROUP as GROUP_RESOURCE
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.security import authorizer
from node.share_coordinator.group_offsets import message, partition_error, share_group, start_offset, subscribed_topics


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = DescribeShareGroupOffsetsRequest
RESPONSE = DescribeShareGroupOffsetsResponse
VERSIONS = (0, 0)
GROUP = RESPONSE.DescribeShareGroupOffsetsResponseGroup
TOPIC = GROUP.DescribeShareGroupOffsetsResponseTopic
PARTITION = TOPIC.DescribeShareGroupOffsetsResponsePartition
NO_LEADER_EPOCH = -1


async def handle(broker, header, request):
    groups = await asyncio.gather(*(_describe(broker, group)
                                    if authorizer.allowed(broker, header, DESCRIBE, GROUP_RESOURCE, group.group_id)
                                    else _refused(group) for group in request.groups))
    return RESPONSE[header.api_version](throttle_time_ms=0, groups=list(groups))


async def _refused(wanted):
    return GROUP(group_id=wanted.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None,
                 topics=[])


async def _describe(broker, wanted):
    error, group = share_group(broker, wanted.group_id)
    if error:
        return GROUP(group_id=wanted.group_id, topics=[], error_code=int(error), error_message=message(error))
    if wanted.topics is None:
        topics = [(name, sorted(broker.topic(name).partitions)) for name in subscribed_topics(group)
                  if broker.topic(name) is not None]
    else:
        topics = [(topic.topic_name, topic.partitions) for topic in wanted.topics]
    answered = await asyncio.gather(*(_describe_topic(broker, wanted.group_id, name, partitions)
                                      for name, partitions in topics))
    return GROUP(group_id=wanted.group_id, topics=list(answered), error_code=0, error_message=None)


async def _describe_topic(broker, group_id: str, name: str, partitions: list[int]):
    """Every partition's start offset read at once: each read may retry up to request.timeout.ms."""
    answers = await asyncio.gather(*(_describe_partition(broker, group_id, name, partition)
                                     for partition in partitions))
    topic_id, _ = partition_error(broker, name, 0)
    return TOPIC(topic_name=name, topic_id=topic_id, partitions=list(answers))


async def _describe_partition(broker, group_id: str, name: str, partition: int):
    topic_id, error = partition_error(broker, name, partition)
    offset = -1
    if not error:
        error, offset = await start_offset(broker, group_id, topic_id, partition)
    return PARTITION(partition_index=partition, start_offset=offset, leader_epoch=NO_LEADER_EPOCH,
                     error_code=int(error), error_message=message(error))
