"""DescribeQuorum v0-2: the metadata log's quorum, as kafka-metadata-quorum.sh describes it.

A node forwards the request to the controller, as a Kafka broker does
(forwardToControllerOrFail), and answers with the controller's view: the leader, its epoch, the
high watermark, and for the voters and the observers (the nodes) their log end offsets, last fetch
and last caught-up times (v1+), directory ids and the voters' listeners (v2+). A request for any
partition but `__cluster_metadata`-0 gets UNKNOWN_TOPIC_OR_PARTITION on each partition it names; a
controller that does not answer gives REQUEST_TIMED_OUT.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the cluster, as
Kafka's ControllerApis asks; a refusal is CLUSTER_AUTHORIZATION_FAILED.

Differs from Kafka: the quorum is the single controller (controller/quorum_status.py says how its
observers' times are taken); the voter's listener is the controller's control-channel address.
"""
from __future__ import annotations

import uuid

from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse

from cluster.formats.acls import DESCRIBE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeQuorumRequest
RESPONSE = DescribeQuorumResponse
VERSIONS = (0, 2)

METADATA_TOPIC = "__cluster_metadata"


async def handle(broker, header, request):
    response = RESPONSE[header.api_version]
    if not authorizer.allowed(broker, header, DESCRIBE):
        return _refused(response, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if [(t.topic_name, [p.partition_index for p in t.partitions]) for t in request.topics] != [(METADATA_TOPIC, [0])]:
        return _partition_errors(response, request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        quorum = await broker.metadata.call_controller("describe_quorum")
    except Exception as exc:
        return _refused(response, ErrorCode.REQUEST_TIMED_OUT, str(exc))
    Partition = response.TopicData.PartitionData
    partition = Partition(
        partition_index=0, error_code=ErrorCode.NONE, error_message=None, leader_id=quorum["leader_id"],
        leader_epoch=quorum["leader_epoch"], high_watermark=quorum["high_watermark"],
        current_voters=[_replica(Partition.ReplicaState, r) for r in quorum["voters"]],
        observers=[_replica(Partition.ReplicaState, r) for r in quorum["observers"]])
    Node = response.Node
    nodes = [Node(node_id=n["node_id"], listeners=[Node.Listener(name=e["name"], host=e["host"], port=e["port"])
                                                   for e in n["listeners"]]) for n in quorum["nodes"]]
    return response(error_code=ErrorCode.NONE, error_message=None, nodes=nodes,
                    topics=[response.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def _replica(ReplicaState, replica: dict):
    return ReplicaState(replica_id=replica["replica_id"], replica_directory_id=uuid.UUID(bytes=replica["directory_id"]),
                        log_end_offset=replica["log_end_offset"], last_fetch_timestamp=replica["last_fetch_timestamp"],
                        last_caught_up_timestamp=replica["last_caught_up_timestamp"])


def _refused(response, code: ErrorCode, message: str | None = None):
    return response(error_code=code, error_message=message, topics=[], nodes=[])


def _partition_errors(response, request, code: ErrorCode):
    """Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse: the error on every partition named."""
    Partition = response.TopicData.PartitionData
    topics = [response.TopicData(topic_name=t.topic_name, partitions=[
        Partition(partition_index=p.partition_index, error_code=code, error_message=None, leader_id=-1,
                  leader_epoch=-1, high_watermark=-1, current_voters=[], observers=[]) for p in t.partitions])
        for t in request.topics]
    return response(error_code=ErrorCode.NONE, error_message=None, topics=topics, nodes=[])
