"""ReadShareGroupState v0: a share-partition's state, for the partition leader that starts serving it.

An inter-broker RPC of KIP-932, answered by the share coordinator: the state epoch, the
share-partition start offset (-1 if it was never initialized) and the state batches past it. The
request names the partition leader's leader epoch: an older one than stored is FENCED_LEADER_EPOCH;
a newer one is stored (a ShareUpdate, acks=all) before the answer, so the leader before it is fenced.
A node that does not lead the state partition answers NOT_COORDINATOR.

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
from node.share_coordinator.state import NO_START_OFFSET


class ReadShareGroupStateRequest(ApiMessage, load_json=schemas):
    pass


class ReadShareGroupStateResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ReadShareGroupStateRequest
RESPONSE = ReadShareGroupStateResponse
TOPIC = REQUEST.ReadStateData
PARTITION = TOPIC.PartitionData
VERSIONS = (0, 0)
BATCH = RESPONSE.ReadStateResult.PartitionResult.StateBatch


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    async def answer(key, entry):
        error, state = await broker.share_coordinator.read(key, entry.leader_epoch)
        if error or state is None:
            return {**error_fields(error), "state_epoch": 0, "start_offset": NO_START_OFFSET}
        return {**error_fields(error), "state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [BATCH(first_offset=b.first_offset, last_offset=b.last_offset,
                                        delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                  for b in state.batches]}

    return build_response(RESPONSE[header.api_version], RESPONSE.ReadStateResult, await answer_each(request, answer))
