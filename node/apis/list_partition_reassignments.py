"""ListPartitionReassignments v0: the partitions being moved, with their adding and removing replicas.

Asked of the controller, which holds the latest metadata. A null topic list lists every ongoing
reassignment; named partitions that do not exist or are not moving are left out, as Kafka leaves
them out.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse

from cluster.formats.acls import DESCRIBE
from cluster.formats.errors import ErrorCode
from node.metadata_sync import ControllerUnavailable
from node.security import authorizer

REQUEST = ListPartitionReassignmentsRequest
RESPONSE = ListPartitionReassignmentsResponse
VERSIONS = (0, 0)

TopicReassignment = RESPONSE.OngoingTopicReassignment
PartitionReassignment = TopicReassignment.OngoingPartitionReassignment


async def handle(broker, header, request):
    if not authorizer.allowed(broker, header, DESCRIBE):
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=None, topics=[])
    requested = None if request.topics is None else [[t.name, list(t.partition_indexes)] for t in request.topics]
    try:
        reply = await broker.metadata.call_controller("list_reassignments", topics=requested)
    except ControllerUnavailable as exc:
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                            error_message=str(exc), topics=[])
    if reply.get("error_code"):
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=reply["error_code"],
                                            error_message=reply["error_message"], topics=[])
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=0, error_message=None, topics=[
        TopicReassignment(name=t["name"], partitions=[
            PartitionReassignment(partition_index=p["partition"], replicas=p["replicas"],
                                  adding_replicas=p["adding_replicas"], removing_replicas=p["removing_replicas"])
            for p in t["partitions"]]) for t in reply["topics"]])
