"""SyncGroup v0-5: the leader's assignment reaches every member of the generation.

Members wait for the leader's assignment; each gets its own, with the group's protocol type and
name (v5+). A KIP-848 consumer group has no classic members: UNKNOWN_MEMBER_ID.
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

from cluster.formats.errors import ErrorCode

REQUEST = SyncGroupRequest
RESPONSE = SyncGroupResponse
VERSIONS = (0, 5)


async def handle(broker, header, request):
    owner = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    if not owner and broker.groups.consumer_group(request.group_id) is not None:
        owner = ErrorCode.UNKNOWN_MEMBER_ID  # a KIP-848 consumer group has no classic members
    if owner:
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=owner, assignment=b"",
                                            protocol_type=None, protocol_name=None)
    error, assignment = await broker.groups.classic.sync(
        request.group_id, request.generation_id, request.member_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments})
    group = broker.groups.group(request.group_id)
    return RESPONSE[header.api_version](
        throttle_time_ms=0, error_code=error, assignment=assignment,
        protocol_type=group.protocol_type if group else None, protocol_name=group.protocol if group else None)
