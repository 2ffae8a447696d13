"""DescribeGroups v0-6: state, protocol and members (with metadata and assignment) of each classic group.

Members' metadata and assignments are given while the group is Stable. A group that does not
exist, or is not a classic group (a consumer group of KIP-848, a share group), is described as
Dead with no error up to v5; from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and Kafka's message
("Group g not found.", "Group g is not a classic group."), as Kafka 4.1 answers. Consumer groups
are described by ConsumerGroupDescribe.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on each group; authorized
operations filled in when asked for; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: no ACLs, so authorized operations are never filled in.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from cluster.formats.acls import DESCRIBE, GROUP
from cluster.formats.errors import ErrorCode
from node.groups.classic import DEAD
from node.security import authorizer

REQUEST = DescribeGroupsRequest
RESPONSE = DescribeGroupsResponse
VERSIONS = (0, 6)

Described = RESPONSE.DescribedGroup
# The first version that tells a missing group from a Dead one (KIP-1043).
NOT_FOUND_VERSION = 6


async def handle(broker, header, request):
    version = header.api_version
    with_operations = version >= 3 and request.include_authorized_operations
    groups = []
    for group_id in request.groups:
        if not authorizer.allowed(broker, header, DESCRIBE, GROUP, group_id):
            groups.append(_dead(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None, version, state=""))
            continue
        described = _describe(broker, group_id, version)
        if with_operations and described.error_code == ErrorCode.NONE:
            described.authorized_operations = authorizer.authorized_operations(broker, header, GROUP, group_id)
        groups.append(described)
    return RESPONSE[version](throttle_time_ms=0, groups=groups)


def _dead(group_id: str, error: ErrorCode, message: str | None, version: int, state: str = DEAD):
    if error == ErrorCode.GROUP_ID_NOT_FOUND and version < NOT_FOUND_VERSION:
        error, message = ErrorCode.NONE, None
    return Described(error_code=error, error_message=message, group_id=group_id, group_state=state,
                     protocol_type="", protocol_data="", members=[], authorized_operations=None)


def _describe(broker, group_id: str, version: int):
    error = broker.groups.owns(group_id)
    if error:
        return _dead(group_id, error, None, version)
    group = broker.groups.group(group_id)
    if group is None or group.state == DEAD:
        return _dead(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", version)
    if group.group_type != "classic":
        return _dead(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a classic group.", version)
    stable = group.state == "Stable"
    return Described(
        error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
        protocol_type=group.protocol_type or "", protocol_data=group.protocol or "",
        members=[Described.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, member_metadata=m.metadata_for(group.protocol or "") if stable else b"",
            member_assignment=m.assignment if stable else b"") for m in group.members.values()],
        authorized_operations=None)
