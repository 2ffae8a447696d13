"""ConsumerGroupDescribe v0-1: consumer groups (KIP-848) with their epochs, assignor and members.

Each member is described with its epoch, subscription, current assignment and the target
assignment the coordinator computed for it (topic names as the metadata has them; a topic
deleted since is left out), as Kafka's GroupMetadataManager.consumerGroupDescribe answers. A group
that does not exist, or is not a consumer group (classic, share), gets GROUP_ID_NOT_FOUND; an
empty group id INVALID_GROUP_ID; a group coordinated elsewhere NOT_COORDINATOR. Version 1 adds
each member's type (KIP-1099: 1 for a member of the consumer protocol, 0 for a classic member of
a group being upgraded). (kafka-python carries no schema for this
API: node/apis/schemas holds it.)

With an authorizer (node.security.authorizer), the request needs DESCRIBE on each group; authorized
operations filled in when asked for; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: no ACLs, so authorized operations are never filled in (-2147483648) even when
asked for.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import DESCRIBE, GROUP
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.security import authorizer

# KIP-1099's member types, as version 1 gives them.
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1
NO_AUTHORIZED_OPERATIONS = -2147483648


class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ConsumerGroupDescribeRequest
RESPONSE = ConsumerGroupDescribeResponse
VERSIONS = (0, 1)

Described = RESPONSE.DescribedGroup
Member = Described.Member
Assignment = Member.Assignment
TopicPartitions = Assignment.TopicPartitions


async def handle(broker, header, request):
    return RESPONSE[header.api_version](throttle_time_ms=0, groups=[
        _authorized_describe(broker, header, group_id, request.include_authorized_operations)
        for group_id in request.group_ids])


def _authorized_describe(broker, header, group_id: str, with_operations: bool):
    """As Kafka: a group the principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED."""
    if not authorizer.allowed(broker, header, DESCRIBE, GROUP, group_id):
        return _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    described = _describe(broker, group_id)
    if with_operations and described.error_code == ErrorCode.NONE:
        described.authorized_operations = authorizer.bit_field(
            authorizer.authorized_operations(broker, header, GROUP, group_id))
    return described


def _failed(group_id: str, code: ErrorCode, message: str | None = None):
    return Described(error_code=code, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
                     assignment_epoch=-1, assignor_name="", members=[],
                     authorized_operations=NO_AUTHORIZED_OPERATIONS)


def _describe(broker, group_id: str):
    if not group_id:
        return _failed(group_id, ErrorCode.INVALID_GROUP_ID)
    error = broker.groups.owns(group_id)
    if error:
        return _failed(group_id, error)
    group = broker.groups.group(group_id)
    if group is None or group.state == "Dead":
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    if group.group_type != "consumer":
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    return Described(
        error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
        group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor or _default_assignor(broker),
        members=[_member(broker, group, m) for m in group.members.values()],
        authorized_operations=NO_AUTHORIZED_OPERATIONS)


def _default_assignor(broker) -> str:
    """The first of group.consumer.assignors, as Kafka's default consumer group assignor."""
    return broker.config.get("group.consumer.assignors").split(",")[0].strip()


def _member(broker, group, member):
    return Member(
        member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=sorted(member.subscribed_topic_names or ()),
        subscribed_topic_regex=member.subscribed_topic_regex or None,
        assignment=assignment_of(broker, member.assigned),
        target_assignment=assignment_of(broker, group.target.get(member.member_id, {})),
        member_type=CONSUMER_MEMBER if member.classic is None else CLASSIC_MEMBER)


def assignment_of(broker, partitions_by_topic_id: dict) -> Assignment:
    """An assignment {topic id: partitions} with each topic's name; topics no longer known are left out."""
    topics = []
    for topic_id, partitions in partitions_by_topic_id.items():
        topic = broker.topic_by_id(topic_id)
        if topic is not None:
            topics.append(TopicPartitions(topic_id=topic_id, topic_name=topic.name, partitions=sorted(partitions)))
    return Assignment(topic_partitions=sorted(topics, key=lambda t: t.topic_name))
