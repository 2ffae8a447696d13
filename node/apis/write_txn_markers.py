"""WriteTxnMarkers v1-2: COMMIT and ABORT markers that end transactions in the partitions led here.

Sent by a transaction coordinator to each partition leader of a transaction once its outcome is
written (and by Kafka's admin client to abort a hanging transaction); node.transaction_markers
appends them: each partition is answered once every in-sync replica has its marker,
NOT_ENOUGH_REPLICAS while fewer than min.insync.replicas are in sync (the coordinator retries),
INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED for a stale producer or coordinator epoch.

With an authorizer (node.security.authorizer), the request needs ALTER or CLUSTER_ACTION on the
cluster (nodes ask it of each other); what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: version 0, which Kafka 4 dropped, is not served (kafka.protocol has no schema
for it); v2's transaction version is accepted and not needed.
"""
from __future__ import annotations

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from cluster.formats.acls import ALTER, CLUSTER_ACTION
from node.security import authorizer
from node.transaction_markers import write_markers

REQUEST = WriteTxnMarkersRequest
RESPONSE = WriteTxnMarkersResponse
VERSIONS = (1, 2)


async def handle(broker, header, request):
    # (Kafka: ALTER on the cluster will do, else CLUSTER_ACTION)
    refusal = None if authorizer.allowed(broker, header, ALTER) else authorizer.refusal(
        broker, header, request, RESPONSE, CLUSTER_ACTION)
    if refusal is not None:
        return refusal
    markers = [(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                [(t.name, index) for t in m.topics for index in t.partition_indexes]) for m in request.markers]
    outcomes = await write_markers(broker, markers)
    results = []
    for (producer_id, _, _, _, partitions), errors in zip(markers, outcomes):
        by_topic: dict[str, list] = {}
        for (topic, index), error in zip(partitions, errors):
            by_topic.setdefault(topic, []).append(
                RESPONSE.WritableTxnMarkerResult.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=error))
        results.append(RESPONSE.WritableTxnMarkerResult(producer_id=producer_id, topics=[
            RESPONSE.WritableTxnMarkerResult.WritableTxnMarkerTopicResult(name=topic, partitions=answers)
            for topic, answers in by_topic.items()]))
    return RESPONSE[header.api_version](markers=results)
