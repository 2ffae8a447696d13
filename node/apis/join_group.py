"""JoinGroup v0-9: membership, protocol selection and the leader of each generation.

The join waits for the rebalance to complete; a new member must first learn its member id (v4+,
MEMBER_ID_REQUIRED); static members (group.instance.id, v5+) keep their place across restarts.

A classic-protocol member of a KIP-848 consumer group joins it as Kafka 4.x does
(node.groups.consumer_classic_members): its generation is its member epoch, no member leads, and
its JoinGroup is a heartbeat that may move the group epoch. A JoinGroup to an empty consumer group
replaces it by a classic group, its offsets kept. A share group's id is answered
GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs READ on the group; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: skip_assignment is never set.
"""
from __future__ import annotations

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

from cluster.formats.acls import GROUP, READ
from node.groups.persistence import GroupError
from node.security import authorizer

REQUEST = JoinGroupRequest
RESPONSE = JoinGroupResponse
VERSIONS = (0, 9)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    version = header.api_version
    owner = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    if owner:
        return _response(version, error=owner, member_id=request.member_id)
    joining = (request.member_id, request.group_instance_id if version >= 5 else None, header.client_id or "",
               header.client_host, request.session_timeout_ms,
               request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms, request.protocol_type,
               [(p.name, bytes(p.metadata)) for p in request.protocols])
    group = broker.groups.consumer_group(request.group_id)
    if group is not None:
        if group.members:
            return _answer(version, await broker.groups.classic_members.join(
                group, *joining, require_known_member=version >= 4))
        try:
            broker.groups.make_classic(group)
        except GroupError as exc:
            return _response(version, error=exc.code, member_id=request.member_id)
    return _answer(version, await broker.groups.classic.join(
        request.group_id, *joining, require_known_member=version >= 4))


def _answer(version, result):
    return _response(version, error=result.error, generation=result.generation, protocol_type=result.protocol_type,
                     protocol=result.protocol, leader=result.leader, member_id=result.member_id,
                     members=[RESPONSE.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=data)
                              for m, i, data in result.members])


def _response(version, error, member_id, generation=-1, protocol_type=None, protocol=None, leader="", members=()):
    return RESPONSE[version](throttle_time_ms=0, error_code=error, generation_id=generation,
                             protocol_type=protocol_type, protocol_name=protocol if version >= 7 else (protocol or ""),
                             leader=leader, skip_assignment=False, member_id=member_id, members=list(members))
