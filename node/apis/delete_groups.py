"""DeleteGroups: empty groups and their committed offsets, removed with tombstones."""
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
