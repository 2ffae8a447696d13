"""SyncGroup v0-5: the leader's assignment reaches every member of the generation.

Members wait for the leader's assignment; each gets its own, with the group's protocol type and
name (v5+).

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

REQUEST = SyncGroupRequest
RESPONSE = SyncGroupResponse
VERSIONS = (0, 5)


async def handle(broker, header, request):
    owner = broker.groups.owns(request.group_id)
    if owner:
        error, assignment = owner, b""
    else:
        error, assignment = await broker.groups.classic.sync(
            request.group_id, request.generation_id, request.member_id,
            {a.member_id: bytes(a.assignment) for a in request.assignments})
    group = broker.groups.group(request.group_id)
    return RESPONSE[header.api_version](
        throttle_time_ms=0, error_code=error, assignment=assignment,
        protocol_type=group.protocol_type if group else None, protocol_name=group.protocol if group else None)
