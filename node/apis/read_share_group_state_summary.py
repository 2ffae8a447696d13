"""ReadShareGroupStateSummary v0: share-partitions' state epoch and start offset, without their batches.

An inter-broker RPC of KIP-932, sent to the share coordinator by the group coordinator to answer
DescribeShareGroupOffsets. Nothing is written; a start offset of -1 means the share-partition was
never initialized. A leader epoch other than -1 older than the stored one is FENCED_LEADER_EPOCH; a
node that does not lead the state partition answers NOT_COORDINATOR.

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


class ReadShareGroupStateSummaryRequest(ApiMessage, load_json=schemas):
    pass


class ReadShareGroupStateSummaryResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ReadShareGroupStateSummaryRequest
RESPONSE = ReadShareGroupStateSummaryResponse
TOPIC = REQUEST.ReadStateSummaryData
PARTITION = TOPIC.PartitionData
VERSIONS = (0, 0)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    async def answer(key, entry):
        error, state_epoch, start_offset = broker.share_coordinator.read_summary(key, entry.leader_epoch)
        return {**error_fields(error), "state_epoch": state_epoch, "start_offset": start_offset}

    return build_response(RESPONSE[header.api_version], RESPONSE.ReadStateSummaryResult,
                          await answer_each(request, answer))
