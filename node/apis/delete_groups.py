"""DeleteGroups v0-2: empty groups and their committed offsets, removed with tombstones.

Each group is answered on its own: NOT_COORDINATOR where another node coordinates it,
NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND where it does not exist. Classic,
consumer (KIP-848) and share (KIP-932) groups alike: every record the coordinator keeps of the
group gets a tombstone, so a coordinator that takes over does not bring it back.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from node.groups.persistence import GroupError

REQUEST = DeleteGroupsRequest
RESPONSE = DeleteGroupsResponse
VERSIONS = (0, 2)


async def handle(broker, header, request):
    results = []
    for group_id in request.groups_names:
        error = broker.groups.owns(group_id)
        if not error:
            try:
                error = broker.groups.delete_group(group_id)
            except GroupError as exc:
                error = exc.code
        results.append(RESPONSE.DeletableGroupResult(group_id=group_id, error_code=error))
    return RESPONSE[header.api_version](throttle_time_ms=0, results=results)
