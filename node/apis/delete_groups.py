"""DeleteGroups v0-2: empty groups and their committed offsets, removed with tombstones.

Each group is answered on its own: NOT_COORDINATOR where another node coordinates it,
NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND where it does not exist. Classic,
consumer (KIP-848) and share (KIP-932) groups alike: every record the coordinator keeps of the
group gets a tombstone, so a coordinator that takes over does not bring it back. A share group's
share-partition state is deleted first, through the persister (as Kafka 4.1 does), for every
partition of the topics its members subscribed to; if that fails the group stays, and is answered
the error (COORDINATOR_NOT_AVAILABLE while a share coordinator is away). A group created again
with that id starts afresh, at share.auto.offset.reset.

With an authorizer (node.security.authorizer), the request needs DELETE on each group; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: the topics whose share state is deleted are those the group's records in
`__consumer_offsets` name as subscribed, where Kafka keeps a record of the share-partitions
initialized; a subscription compacted away before a coordinator took over is missed.
"""
from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from cluster.formats.acls import DELETE, GROUP
from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError
from node.security import authorizer
from node.share.partition import write_error
from node.share_coordinator.group_offsets import EMPTY, SHARE_GROUP_TYPE, forget_group

REQUEST = DeleteGroupsRequest
RESPONSE = DeleteGroupsResponse
VERSIONS = (0, 2)


async def handle(broker, header, request):
    results = []
    for group_id in request.groups_names:
        allowed = authorizer.allowed(broker, header, DELETE, GROUP, group_id)
        error = await _delete(broker, group_id) if allowed else ErrorCode.GROUP_AUTHORIZATION_FAILED
        results.append(RESPONSE.DeletableGroupResult(group_id=group_id, error_code=error))
    return RESPONSE[header.api_version](throttle_time_ms=0, results=results)


async def _delete(broker, group_id: str) -> ErrorCode:
    error = broker.groups.owns(group_id)
    if error:
        return error
    group = broker.groups.group(group_id)
    if getattr(group, "group_type", None) == SHARE_GROUP_TYPE and group.state == EMPTY:
        error = await forget_group(broker, group)
        if error:
            return write_error(error)
        error = broker.groups.owns(group_id)  # (it may have moved meanwhile)
        if error:
            return error
    try:
        return broker.groups.delete_group(group_id)
    except GroupError as exc:
        return exc.code
