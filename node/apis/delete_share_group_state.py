"""DeleteShareGroupState v0: forget share-partitions' state.

An inter-broker RPC of KIP-932, sent to the share coordinator when a share group's offsets are
deleted (DeleteShareGroupOffsets) or the group is deleted: tombstones for the share-partition's
snapshot and update keys are written with acks=all, and a later read finds it uninitialized. A node
that does not lead the state partition answers NOT_COORDINATOR.

With an authorizer (node.security.authorizer), the request needs CLUSTER_ACTION on the cluster
(nodes ask it of each other); what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import CLUSTER_ACTION
from node.apis import schemas
from node.security import authorizer
from node.share_coordinator.service import answer_each, build_response, error_fields


class DeleteShareGroupStateRequest(ApiMessage, load_json=schemas):
    pass


class DeleteShareGroupStateResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = DeleteShareGroupStateRequest
RESPONSE = DeleteShareGroupStateResponse
TOPIC = REQUEST.DeleteStateData
PARTITION = TOPIC.PartitionData
VERSIONS = (0, 0)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    async def answer(key, entry):
        return error_fields(await broker.share_coordinator.delete(key))

    return build_response(RESPONSE[header.api_version], RESPONSE.DeleteStateResult, await answer_each(request, answer))
