"""ElectLeaders v0-2: preferred or unclean leader election, decided by the controller.

v0 has no election type and always asks for the preferred replica. A null partition list elects
for every partition. Each partition is answered on its own (ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION).

With an authorizer (node.security.authorizer), the request needs ALTER on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: more than 10,000 elections in one request are refused whole, every
partition asked for getting the error, as Kafka refuses a controller operation of more than
10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from cluster.formats.acls import ALTER
from cluster.formats.errors import ErrorCode
from node.metadata_sync import ControllerUnavailable
from node.security import authorizer

REQUEST = ElectLeadersRequest
RESPONSE = ElectLeadersResponse
VERSIONS = (0, 2)

TopicResult = RESPONSE.ReplicaElectionResult
PartitionResult = TopicResult.PartitionResult
_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "Failed to elect leader for topic partition.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Failed to elect leader for topic partition.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}


async def handle(broker, header, request):
    # v0 has no election type: it always asked for the preferred replica.
    election_type = request.election_type if header.api_version >= 1 else 0
    requested = None if request.topic_partitions is None else [
        [t.topic, p] for t in request.topic_partitions for p in t.partitions]
    if not authorizer.allowed(broker, header, ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _answer(header.api_version, code, [[t, p, code] for t, p in requested or ()])
    if election_type not in (0, 1):
        return _answer(header.api_version, ErrorCode.INVALID_REQUEST, [])
    try:
        reply = await broker.call_controller("elect_leaders", election_type=election_type, partitions=requested)
    except ControllerUnavailable:
        return _answer(header.api_version, ErrorCode.NOT_CONTROLLER, [])
    if reply.get("error_code"):
        # Refused whole (more than 10,000 elections): every partition asked for gets the error, as in Kafka.
        code = reply["error_code"]
        return _answer(header.api_version, code, [[t, p, code] for t, p in requested or ()], reply["error_message"])
    return _answer(header.api_version, ErrorCode.NONE, reply["results"])


def _answer(version: int, error: ErrorCode, results: list, message: str | None = None):
    by_topic: dict[str, list] = {}
    for topic, partition, code in results:
        by_topic.setdefault(topic, []).append(PartitionResult(
            partition_id=partition, error_code=code, error_message=message or _MESSAGES.get(ErrorCode(code))))
    return RESPONSE[version](throttle_time_ms=0, error_code=error, replica_election_results=[
        TopicResult(topic=topic, partition_result=partitions) for topic, partitions in by_topic.items()])
