"""SyncGroup v0-5: the leader's assignment reaches every member of the generation.

Members wait for the leader's assignment; each gets its own, with the group's protocol type and
name (v5+). A classic-protocol member of a KIP-848 consumer group is answered at once with the
partitions the coordinator assigned it (node.groups.consumer_classic_members). A share group's id
is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

from cluster.formats.acls import GROUP, READ
from node.security import authorizer

REQUEST = SyncGroupRequest
RESPONSE = SyncGroupResponse
VERSIONS = (0, 5)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    version = header.api_version
    owner = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    group = broker.groups.consumer_group(request.group_id) if not owner else None
    if group is not None:
        protocol_type = request.protocol_type if version >= 5 else None
        protocol_name = request.protocol_name if version >= 5 else None
        error, assignment = broker.groups.classic_members.sync(
            group, request.generation_id, request.member_id, request.group_instance_id if version >= 3 else None,
            protocol_type, protocol_name)
        return RESPONSE[version](throttle_time_ms=0, error_code=error, assignment=assignment,
                                 protocol_type=protocol_type, protocol_name=protocol_name)
    if owner:
        return RESPONSE[version](throttle_time_ms=0, error_code=owner, assignment=b"", protocol_type=None,
                                 protocol_name=None)
    error, assignment = await broker.groups.classic.sync(
        request.group_id, request.generation_id, request.member_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments})
    group = broker.groups.group(request.group_id)
    return RESPONSE[version](
        throttle_time_ms=0, error_code=error, assignment=assignment,
        protocol_type=group.protocol_type if group else None, protocol_name=group.protocol if group else None)
