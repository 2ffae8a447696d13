"""ListGroups v0-5: the groups this node coordinates, filtered by state (v4+) and type (v5+).

Every group type is listed: classic groups with their own protocol type, consumer groups
(KIP-848) with protocol type "consumer" and share groups (KIP-932) with "share", as Kafka lists
them. Both filters are case-insensitive; v5 gives each group's type (classic, consumer, share).

With an authorizer (node.security.authorizer): DESCRIBE on the cluster lists every group, else only
those it may DESCRIBE.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from cluster.formats.acls import DESCRIBE, GROUP
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = ListGroupsRequest
RESPONSE = ListGroupsResponse
VERSIONS = (0, 5)


def protocol_type(group) -> str:
    """A consumer group lists with protocol type "consumer", a share group with "share"; a classic
    group with the one its members joined with."""
    if group.group_type == "classic":
        return group.protocol_type or ""
    return group.group_type


async def handle(broker, header, request):
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    listed = []
    every = authorizer.allowed(broker, header, DESCRIBE)  # else only the groups it may describe
    for group in sorted(broker.groups.groups.values(), key=lambda g: g.group_id):
        if states is not None and group.state.lower() not in states:
            continue
        if types is not None and group.group_type not in types:
            continue
        if not every and not authorizer.allowed(broker, header, DESCRIBE, GROUP, group.group_id):
            continue
        listed.append(RESPONSE.ListedGroup(group_id=group.group_id, protocol_type=protocol_type(group),
                                           group_state=group.state, group_type=group.group_type))
    return RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, groups=listed)
