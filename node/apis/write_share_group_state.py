"""WriteShareGroupState v0: store a change to share-partitions' state, from their partition leader.

An inter-broker RPC of KIP-932, answered by the share coordinator once the change is in
`__share_group_state` with acks=all: the written batches replace what was stored for their
offsets, and what lies before a new start offset (-1: unchanged) is dropped. A leader epoch older
than the stored one is FENCED_LEADER_EPOCH, a state epoch older than the stored one
FENCED_STATE_EPOCH; a topic or partition the metadata does not have is UNKNOWN_TOPIC_OR_PARTITION;
a node that does not lead the state partition answers NOT_COORDINATOR.

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
from node.share_coordinator.state import ShareState, StateBatch


class WriteShareGroupStateRequest(ApiMessage, load_json=schemas):
    pass


class WriteShareGroupStateResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = WriteShareGroupStateRequest
RESPONSE = WriteShareGroupStateResponse
TOPIC = REQUEST.WriteStateData
PARTITION = TOPIC.PartitionData
VERSIONS = (0, 0)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    async def answer(key, entry):
        state = ShareState(entry.state_epoch, entry.leader_epoch, entry.start_offset, [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in entry.state_batches])
        return error_fields(await broker.share_coordinator.write(key, state))

    return build_response(RESPONSE[header.api_version], RESPONSE.WriteStateResult, await answer_each(request, answer))
