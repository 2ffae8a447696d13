"""LeaveGroup v0-5: one member (v0-2) or a batch of members with per-member results (v3+).

A member leaving starts a rebalance for the others; static members are named by their instance id.
Classic-protocol members of a KIP-848 consumer group leave it as Kafka 4.x has them leave: their
records are tombstoned and the group epoch moves (node.groups.consumer_classic_members).
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse

from cluster.formats.acls import GROUP, READ
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = LeaveGroupRequest
RESPONSE = LeaveGroupResponse
VERSIONS = (0, 5)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    version = header.api_version
    leaving = [(m.member_id, m.group_instance_id) for m in request.members] if version >= 3 \
        else [(request.member_id, None)]
    owner = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    group = broker.groups.consumer_group(request.group_id) if not owner else None
    if owner:
        errors = [owner] * len(leaving)
    elif group is not None:
        errors = await broker.groups.classic_members.leave(group, leaving)
    else:
        errors = broker.groups.classic.leave(request.group_id, leaving)
    if version < 3:
        return RESPONSE[version](throttle_time_ms=0, error_code=errors[0], members=[])
    return RESPONSE[version](throttle_time_ms=0, error_code=owner or ErrorCode.NONE, members=[
        RESPONSE.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for (m, i), e in zip(leaving, errors)])
