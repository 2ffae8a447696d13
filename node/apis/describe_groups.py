"""DescribeGroups v0-6: state, protocol and members (with metadata and assignment) of each group.

Members' metadata and assignments are given while the group is Stable. A group that does not
exist is described as Dead with no error, as Kafka describes it; a share group too, with
GROUP_ID_NOT_FOUND from v6 ("not a classic group").

Differs from Kafka: no ACLs, so authorized operations are never filled in. A KIP-848 consumer
group lists its members without the classic subscription and assignment bytes Kafka makes up
for them.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from cluster.formats.errors import ErrorCode
from node.groups.classic import DEAD

REQUEST = DescribeGroupsRequest
RESPONSE = DescribeGroupsResponse
VERSIONS = (0, 6)

Described = RESPONSE.DescribedGroup


async def handle(broker, header, request):
    version = header.api_version
    return RESPONSE[version](throttle_time_ms=0, groups=[_describe(broker, g, version) for g in request.groups])


def _describe(broker, group_id: str, version: int):
    error = broker.groups.owns(group_id)
    group = None if error else broker.groups.group(group_id)
    if group is None:
        # Kafka describes an unknown group as Dead with no error.
        return Described(error_code=error, error_message=None, group_id=group_id, group_state=DEAD,
                         protocol_type="", protocol_data="", members=[], authorized_operations=None)
    if group.group_type == "share":
        # Kafka's answer for any group that is not a classic one: Dead, with an error from v6.
        message = f"Group {group_id} is not a classic group."
        return Described(error_code=ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else ErrorCode.NONE,
                         error_message=message if version >= 6 else None, group_id=group_id, group_state=DEAD,
                         protocol_type="", protocol_data="", members=[], authorized_operations=None)
    if group.group_type == "consumer":
        # A KIP-848 group: who is in it, with neither classic metadata nor assignment bytes.
        return Described(
            error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
            protocol_type="consumer", protocol_data=group.preferred_assignor or "", members=[
                Described.DescribedGroupMember(member_id=m.member_id, group_instance_id=m.instance_id,
                                               client_id=m.client_id, client_host=m.client_host, member_metadata=b"",
                                               member_assignment=b"") for m in group.members.values()],
            authorized_operations=None)
    stable = group.state == "Stable"
    return Described(
        error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
        protocol_type=group.protocol_type or "", protocol_data=group.protocol or "",
        members=[Described.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, member_metadata=m.metadata_for(group.protocol or "") if stable else b"",
            member_assignment=m.assignment if stable else b"") for m in group.members.values()],
        authorized_operations=None)
