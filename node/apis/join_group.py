"""JoinGroup v0-9: membership, protocol selection and the leader of each generation.

The join waits for the rebalance to complete; a new member must first learn its member id (v4+,
MEMBER_ID_REQUIRED); static members (group.instance.id, v5+) keep their place across restarts.

A KIP-848 consumer group with members answers INCONSISTENT_GROUP_PROTOCOL; an empty one becomes
a classic group, its offsets kept, as Kafka converts it.
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

Differs from Kafka: a classic member does not join a consumer group with members (Kafka 4.1 takes
it in, KIP-848's mixed groups); skip_assignment is never set.
"""
from __future__ import annotations

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError

REQUEST = JoinGroupRequest
RESPONSE = JoinGroupResponse
VERSIONS = (0, 9)


async def handle(broker, header, request):
    version = header.api_version
    owner = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id) \
        or _consumer_group_refusal(broker, request.group_id)
    if owner:
        return _response(version, error=owner, member_id=request.member_id)
    result = await broker.groups.classic.join(
        request.group_id, request.member_id, request.group_instance_id if version >= 5 else None,
        header.client_id or "", header.client_host, request.session_timeout_ms,
        request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms, request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols], require_known_member=version >= 4)
    return _response(version, error=result.error, generation=result.generation, protocol_type=result.protocol_type,
                     protocol=result.protocol, leader=result.leader, member_id=result.member_id,
                     members=[RESPONSE.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=data)
                              for m, i, data in result.members])


def _consumer_group_refusal(broker, group_id: str) -> ErrorCode:
    """A KIP-848 consumer group with members takes no classic member (INCONSISTENT_GROUP_PROTOCOL);
    an empty one becomes a classic group, its offsets kept."""
    group = broker.groups.consumer_group(group_id)
    if group is None:
        return ErrorCode.NONE
    if group.members:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    try:
        broker.groups.make_classic(group)
    except GroupError as exc:
        return exc.code
    return ErrorCode.NONE


def _response(version, error, member_id, generation=-1, protocol_type=None, protocol=None, leader="", members=()):
    return RESPONSE[version](throttle_time_ms=0, error_code=error, generation_id=generation,
                             protocol_type=protocol_type, protocol_name=protocol if version >= 7 else (protocol or ""),
                             leader=leader, skip_assignment=False, member_id=member_id, members=list(members))
