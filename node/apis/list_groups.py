"""ListGroups v0-5: the groups this node coordinates, filtered by state (v4+) and type (v5+).

Every group type is listed: classic groups with their own protocol type, consumer groups
(KIP-848) with protocol type "consumer" and share groups (KIP-932) with "share", as Kafka lists
them. Both filters are case-insensitive; v5 gives each group's type (classic, consumer, share).

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from cluster.formats.errors import ErrorCode

REQUEST = ListGroupsRequest
RESPONSE = ListGroupsResponse
VERSIONS = (0, 5)

# The protocol type a group of each of the new types lists with (a classic group has its own).
PROTOCOL_TYPE_OF = {"consumer": "consumer", "share": "share"}


def group_type(group) -> str:
    return getattr(group, "group_type", "classic")


def protocol_type(group) -> str:
    kind = group_type(group)
    return PROTOCOL_TYPE_OF[kind] if kind in PROTOCOL_TYPE_OF else group.protocol_type or ""


async def handle(broker, header, request):
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    listed = []
    for group in sorted(broker.groups.groups.values(), key=lambda g: g.group_id):
        if states is not None and group.state.lower() not in states:
            continue
        if types is not None and group_type(group) not in types:
            continue
        listed.append(RESPONSE.ListedGroup(group_id=group.group_id, protocol_type=protocol_type(group),
                                           group_state=group.state, group_type=group_type(group)))
    return RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, groups=listed)
