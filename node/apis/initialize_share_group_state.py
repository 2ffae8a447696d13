"""InitializeShareGroupState v0: start (or start again) share-partitions at a start offset and state epoch.

An inter-broker RPC of KIP-932, sent to the share coordinator (the leader of the share-partition's
`__share_group_state` partition) by the group coordinator when a share group begins consuming a
partition or its offsets are altered. The share-partition's state becomes the start offset with no
batches, written as a ShareSnapshot with acks=all. A state epoch older than the stored one is
FENCED_STATE_EPOCH; a node that does not lead the state partition answers NOT_COORDINATOR.

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


class InitializeShareGroupStateRequest(ApiMessage, load_json=schemas):
    pass


class InitializeShareGroupStateResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = InitializeShareGroupStateRequest
RESPONSE = InitializeShareGroupStateResponse
TOPIC = REQUEST.InitializeStateData
PARTITION = TOPIC.PartitionData
VERSIONS = (0, 0)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    async def answer(key, entry):
        return error_fields(await broker.share_coordinator.initialize(key, entry.state_epoch, entry.start_offset))

    return build_response(RESPONSE[header.api_version], RESPONSE.InitializeStateResult,
                          await answer_each(request, answer))
