"""OffsetDelete v0: drop committed offsets of partitions the group no longer consumes.

A topic the group is subscribed to (a classic group's members' subscriptions, a consumer group's
subscribed topic names) gets GROUP_SUBSCRIBED_TO_TOPIC; a group that does not exist, or a share
group (whose offsets are not committed offsets), gets GROUP_ID_NOT_FOUND; the rest are removed
with tombstones.

With an authorizer (node.security.authorizer), the request needs DELETE on the group, and READ on
each topic (TOPIC_AUTHORIZATION_FAILED per partition); what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

from cluster.formats.acls import DELETE, GROUP, READ, TOPIC
from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError
from node.security import authorizer

REQUEST = OffsetDeleteRequest
RESPONSE = OffsetDeleteResponse
VERSIONS = (0, 0)

Topic = RESPONSE.OffsetDeleteResponseTopic


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, DELETE, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    denied = authorizer.denied(broker, header, READ, TOPIC, [t.name for t in request.topics])
    coordinator = broker.groups
    error = coordinator.owns(request.group_id)
    group = None if error else coordinator.group(request.group_id)
    if not error and (group is None or group.group_type == "share"):
        error = ErrorCode.GROUP_ID_NOT_FOUND
    if error:
        return RESPONSE[0](error_code=error, throttle_time_ms=0, topics=[])
    subscribed = _subscribed_topics(coordinator, group)
    topics, deletable = [], []
    for topic in request.topics:
        codes = []
        for part in topic.partitions:
            if denied and topic.name in denied:
                codes.append((part.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif subscribed is None or topic.name in subscribed:
                codes.append((part.partition_index, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
            elif broker.partition(topic.name, part.partition_index) is None:
                codes.append((part.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                codes.append((part.partition_index, ErrorCode.NONE))
                deletable.append((topic.name, part.partition_index))
        topics.append((topic.name, codes))
    try:
        coordinator.delete_offsets(request.group_id, deletable)
    except GroupError as exc:
        return RESPONSE[0](error_code=exc.code, throttle_time_ms=0, topics=[])
    return RESPONSE[0](error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[
        Topic(name=name, partitions=[Topic.OffsetDeleteResponsePartition(partition_index=p, error_code=c)
                                     for p, c in codes]) for name, codes in topics])


def _subscribed_topics(coordinator, group) -> set[str] | None:
    """The topics the group's members consume; None: every topic (a classic member whose
    subscription cannot be read)."""
    if group.group_type == "consumer":
        return group.subscribed_topic_names()
    return coordinator.classic.subscribed_topics(group)
