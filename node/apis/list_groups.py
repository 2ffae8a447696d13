"""ListGroups v0-5: the groups this node coordinates, filtered by state (v4+) and type (v5+).

Each group is listed with its type: "classic", "consumer" for a KIP-848 consumer group
(protocol type "consumer"), or "share" for a KIP-932 share group (protocol type "share").

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from cluster.formats.errors import ErrorCode

REQUEST = ListGroupsRequest
RESPONSE = ListGroupsResponse
VERSIONS = (0, 5)


async def handle(broker, header, request):
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    listed = []
    for group in sorted(broker.groups.groups.values(), key=lambda g: g.group_id):
        if states is not None and group.state.lower() not in states:
            continue
        if types is not None and group.group_type not in types:
            continue
        listed.append(RESPONSE.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type or "",
                                           group_state=group.state, group_type=group.group_type))
    return RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, groups=listed)
