"""AlterPartitionReassignments v0: move partitions to new replicas, or cancel a move (a null replica list).

The controller checks every partition as Kafka's does (UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT for an empty list, a repeated, unknown or fenced node id,
NO_REASSIGNMENT_IN_PROGRESS for cancelling none) and writes the move as a PartitionChangeRecord
with adding and removing replicas; the answer comes once this node's image shows it. The new
replicas then catch up by replication and the controller completes the move when they are all in
the ISR (controller/reassignment.py).

With an authorizer (node.security.authorizer), the request needs ALTER on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: more than 10,000 partitions in one request are refused whole with
POLICY_VIOLATION, as Kafka refuses a controller operation of more than 10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse

from cluster.formats.acls import ALTER
from cluster.formats.errors import ErrorCode
from node.metadata_sync import ControllerUnavailable
from node.security import authorizer

REQUEST = AlterPartitionReassignmentsRequest
RESPONSE = AlterPartitionReassignmentsResponse
VERSIONS = (0, 0)

TopicResponse = RESPONSE.ReassignableTopicResponse
PartitionResponse = TopicResponse.ReassignablePartitionResponse


async def handle(broker, header, request):
    topics = [{"name": t.name, "partitions": [
        {"partition": p.partition_index, "replicas": None if p.replicas is None else list(p.replicas)}
        for p in t.partitions]} for t in request.topics]
    if not authorizer.allowed(broker, header, ALTER):
        return _refused(header, topics, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        reply = await broker.call_controller("alter_reassignments", topics=topics)
    except ControllerUnavailable as exc:
        return _refused(header, topics, ErrorCode.NOT_CONTROLLER, str(exc))
    if reply.get("error_code"):
        return _refused(header, topics, reply["error_code"], reply["error_message"])
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=0, error_message=None, responses=[
        TopicResponse(name=t["name"], partitions=[
            PartitionResponse(partition_index=p["partition"], error_code=p["error_code"],
                              error_message=p["error_message"]) for p in t["partitions"]])
        for t in reply["results"]])


def _refused(header, topics: list, code: int, message: str | None):
    """The whole request refused: the error at the top and on every partition, as Kafka's getErrorResponse."""
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=code, error_message=message, responses=[
        TopicResponse(name=t["name"], partitions=[
            PartitionResponse(partition_index=p["partition"], error_code=code, error_message=message)
            for p in t["partitions"]]) for t in topics])
