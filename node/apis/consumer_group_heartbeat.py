"""ConsumerGroupHeartbeat v0-1: join, stay in, reconcile with and leave a KIP-848 consumer group.

Checked first as Kafka's GroupCoordinatorService checks it (INVALID_REQUEST with Kafka's message,
UNSUPPORTED_ASSIGNOR for a server assignor not in group.consumer.assignors,
INVALID_REGULAR_EXPRESSION for a SubscribedTopicRegex that does not compile as RE2), then run by the
group's coordinator (node.groups.consumer_membership). In v0 the coordinator makes up the member id
of a member joining with an empty one; from v1 the client must bring its own. The answer carries
the member's epoch, the heartbeat interval (consumer.heartbeat.interval.ms of the group) and, when
it changed or the member (re)joined, the partitions it owns now. (kafka-python carries no schema
for this API: node/apis/schemas holds it.)

A member joining a classic group with members upgrades it to a consumer group when
group.consumer.migration.policy allows (node.groups.migration); otherwise it is answered
GROUP_ID_NOT_FOUND with Kafka's message. An empty classic group is replaced whatever the policy.

With an authorizer (node.security.authorizer), the request needs READ on the group, and DESCRIBE on
each topic it subscribes to (else TOPIC_AUTHORIZATION_FAILED, as Kafka 4 answers); what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: the target assignment is computed as soon as the group epoch moves, not on a
later heartbeat, and a SubscribedTopicRegex is resolved against the metadata at once rather than in
the background (node.groups.consumer_membership).
"""
from __future__ import annotations

import uuid

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import DESCRIBE, GROUP, READ, TOPIC
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.groups.consumer_membership import JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, Heartbeat
from node.groups.consumer_subscriptions import InvalidRegex, compile_regex
from node.security import authorizer


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ConsumerGroupHeartbeatRequest
RESPONSE = ConsumerGroupHeartbeatResponse
VERSIONS = (0, 1)
CLIENT_MEMBER_ID_VERSION = 1  # Kafka's CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    version = header.api_version
    regex = request.subscribed_topic_regex if version >= 1 else None
    refusal = _invalid(request, version, regex, broker.groups.consumer.assignors())
    if refusal is not None:
        return _answer(version, *refusal)
    if request.subscribed_topic_names and authorizer.denied(broker, header, DESCRIBE, TOPIC,
                                                            request.subscribed_topic_names):
        return _answer(version, ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # (Kafka 4: nor does it say which)
    error = broker.groups.owns(request.group_id)
    if error:
        return _answer(version, error)
    member_id = request.member_id
    if not member_id and version < CLIENT_MEMBER_ID_VERSION and request.member_epoch == JOIN_EPOCH:
        member_id = str(uuid.uuid4())
    result = await broker.groups.consumer.heartbeat(Heartbeat(
        request.group_id, member_id, request.member_epoch, request.instance_id, request.rack_id,
        request.rebalance_timeout_ms, request.subscribed_topic_names, regex, request.server_assignor,
        None if request.topic_partitions is None else {t.topic_id: set(t.partitions) for t in request.topic_partitions},
        header.client_id or "", header.client_host or ""))
    if result.error:
        return _answer(version, result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = RESPONSE.Assignment(topic_partitions=[
            RESPONSE.Assignment.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(result.assignment.items(), key=lambda item: str(item[0]))])
    return RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                             member_id=result.member_id, member_epoch=result.member_epoch,
                             heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


def _answer(version: int, error: ErrorCode, message: str | None = None):
    return RESPONSE[version](throttle_time_ms=0, error_code=error, error_message=message, member_id=None,
                             member_epoch=0, heartbeat_interval_ms=0, assignment=None)


def _invalid(request, version: int, regex: str | None, assignors: list[str]) -> tuple[ErrorCode, str] | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, in its order; then the regex."""
    def blank(value: str | None) -> bool:
        return value is not None and not value.strip()

    epoch = request.member_epoch
    if (version >= CLIENT_MEMBER_ID_VERSION or epoch > 0 or epoch == LEAVE_EPOCH) and blank(request.member_id):
        return ErrorCode.INVALID_REQUEST, "MemberId can't be empty."
    for value, name in ((request.group_id, "GroupId"), (request.instance_id, "InstanceId"),
                        (request.rack_id, "RackId")):
        if blank(value):
            return ErrorCode.INVALID_REQUEST, f"{name} can't be empty."
    if epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == -1:
            return ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and regex is None:
            return ErrorCode.INVALID_REQUEST, ("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                               "when (re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if request.instance_id is None:
            return ErrorCode.INVALID_REQUEST, "InstanceId can't be null."
    elif epoch < STATIC_LEAVE_EPOCH:
        return ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."
    if request.server_assignor is not None and request.server_assignor not in assignors:
        return ErrorCode.UNSUPPORTED_ASSIGNOR, (f"ServerAssignor {request.server_assignor} is not supported. "
                                                f"Supported assignors: {', '.join(assignors)}.")
    if regex:
        try:
            compile_regex(regex)
        except InvalidRegex as exc:
            return (ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.")
    return None
