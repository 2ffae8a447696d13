"""Heartbeat v0-4: keeps a member's session alive and tells it when to rejoin.

Answered by the group coordinator: REBALANCE_IN_PROGRESS when the member must rejoin,
UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION when it is out of date, NOT_COORDINATOR on another node.
A classic-protocol member of a KIP-848 consumer group is told to rejoin when the group epoch moved
past its own, or it has partitions to revoke or to receive (node.groups.consumer_classic_members).
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from cluster.formats.acls import GROUP, READ
from node.security import authorizer

REQUEST = HeartbeatRequest
RESPONSE = HeartbeatResponse
VERSIONS = (0, 4)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    error = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    group = broker.groups.consumer_group(request.group_id) if not error else None
    if group is not None:
        error = broker.groups.classic_members.heartbeat(
            group, request.generation_id, request.member_id,
            request.group_instance_id if header.api_version >= 3 else None)
    elif not error:
        error = broker.groups.classic.heartbeat(request.group_id, request.generation_id, request.member_id)
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=error)
