"""ShareGroupHeartbeat v1: a share consumer joins (epoch 0), stays in (its epoch) or leaves (-1) a share group.

Answered by the group coordinator (node.groups.share) with the member's epoch, the heartbeat
interval (`share.heartbeat.interval.ms` of the group) and, when the member joined, sent its
subscription or was given other partitions, its assignment: topic ids and partitions, which
other members may share. Errors as Kafka answers them: INVALID_REQUEST for a request without a
member id or group id, with an empty rack id, a first heartbeat without topics or an epoch below
-1; GROUP_ID_NOT_FOUND for a group that does not exist (or is not a share group) unless the
member joins; UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED
(`group.share.max.size`); NOT_COORDINATOR on another node. A member whose heartbeats stop for
`share.session.timeout.ms` is removed. (kafka-python carries no schema for this API:
node/apis/schemas holds it.)

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: no ACLs; partitions are assigned at once, without Kafka's wait for the share
coordinator to initialize each share-partition's state (a partition leader starts a
share-partition it finds no state for at `share.auto.offset.reset`).
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import GROUP, READ
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.groups.share import JOIN_EPOCH, LEAVE_EPOCH
from node.security import authorizer


class ShareGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ShareGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ShareGroupHeartbeatRequest
RESPONSE = ShareGroupHeartbeatResponse
VERSIONS = (1, 1)

Assignment = RESPONSE.Assignment


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    invalid = _invalid(request)
    if invalid:
        return _error(header, ErrorCode.INVALID_REQUEST, invalid)
    error = broker.groups.owns(request.group_id)
    if error:
        return _error(header, error)
    answer = await broker.groups.share.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id, request.subscribed_topic_names,
        header.client_id or "", header.client_host)
    if answer.error:
        return _error(header, answer.error, answer.message)
    assignment = None if answer.assignment is None else Assignment(topic_partitions=[
        Assignment.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
        for topic_id, partitions in sorted(answer.assignment.items(), key=lambda item: str(item[0]))])
    return RESPONSE[header.api_version](
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=answer.member_id,
        member_epoch=answer.member_epoch, heartbeat_interval_ms=answer.heartbeat_interval_ms, assignment=assignment)


def _invalid(request) -> str | None:
    """Kafka's request validation (GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid)."""
    if not request.member_id:
        return "MemberId can't be empty."
    if not request.group_id:
        return "GroupId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return "RackId can't be empty."
    if request.member_epoch == JOIN_EPOCH and not request.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if request.member_epoch < LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _error(header, code: ErrorCode, message: str | None = None):
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
                                        member_epoch=0, heartbeat_interval_ms=0, assignment=None)
