"""ShareGroupDescribe v1: each share group's state, epochs, assignor and members with their assignments.

Answered by the coordinator of each group (node.groups.share): GROUP_ID_NOT_FOUND for a group
that does not exist or is not a share group, INVALID_GROUP_ID for an empty id, NOT_COORDINATOR
for a group coordinated elsewhere. A member's assignment names each topic by id and name; a topic
deleted since it was assigned is left out. (kafka-python carries no schema for this API:
node/apis/schemas holds it.)

With an authorizer (node.security.authorizer), the request needs DESCRIBE on each group; authorized
operations filled in when asked for; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: no ACLs, so authorized operations are never filled in.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import DESCRIBE, GROUP
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.security import authorizer
from node.groups.share_assignor import ASSIGNOR_NAME


class ShareGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ShareGroupDescribeRequest
RESPONSE = ShareGroupDescribeResponse
VERSIONS = (1, 1)

Described = RESPONSE.DescribedGroup
Member = Described.Member
UNKNOWN_OPERATIONS = -2147483648  # Kafka's default: authorized operations not asked for


async def handle(broker, header, request):
    return RESPONSE[header.api_version](throttle_time_ms=0, groups=[
        _authorized_describe(broker, header, group_id, request.include_authorized_operations)
        for group_id in request.group_ids])


def _authorized_describe(broker, header, group_id: str, with_operations: bool):
    """As Kafka: a group the principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED."""
    if not authorizer.allowed(broker, header, DESCRIBE, GROUP, group_id):
        return _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    described = _describe(broker, group_id)
    if with_operations and described.error_code == ErrorCode.NONE:
        described.authorized_operations = authorizer.bit_field(
            authorizer.authorized_operations(broker, header, GROUP, group_id))
    return described


def _describe(broker, group_id: str):
    if not group_id:
        return _failed(group_id, ErrorCode.INVALID_GROUP_ID, None)
    error = broker.groups.owns(group_id)
    if error:
        return _failed(group_id, error, None)
    error, message, group = broker.groups.share.describe(group_id)
    if error:
        return _failed(group_id, error, message)
    return Described(error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
                     group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                     assignor_name=ASSIGNOR_NAME,
                     members=[_member(broker, m) for m in group.members.values()],
                     authorized_operations=UNKNOWN_OPERATIONS)


def _member(broker, member):
    return Member(member_id=member.member_id, rack_id=member.rack_id, member_epoch=member.member_epoch,
                  client_id=member.client_id, client_host=member.client_host,
                  subscribed_topic_names=list(member.subscribed_topic_names),
                  assignment=Member.Assignment(topic_partitions=_named(broker, member.assigned)))


def _named(broker, assigned):
    named = []
    for topic_id, partitions in sorted(assigned.items(), key=lambda item: str(item[0])):
        topic = broker.topic_by_id(topic_id)
        if topic is not None:
            named.append(Member.Assignment.TopicPartitions(topic_id=topic_id, topic_name=topic.name,
                                                           partitions=sorted(partitions)))
    return named


def _failed(group_id: str, error: ErrorCode, message: str | None):
    return Described(error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=0,
                     assignment_epoch=0, assignor_name="", members=[], authorized_operations=UNKNOWN_OPERATIONS)
