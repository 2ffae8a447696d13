"""DeleteTopics v0-6: by name (v0-5) or by name or topic id (v6+), forwarded to the controller.

The answer comes once the controller has written the removal; each topic is answered on its own
(UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID).

With an authorizer (node.security.authorizer), the request needs DELETE on each topic, and DESCRIBE
on one named by id (whose name the refusal does not tell); what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Differs from Kafka: more than 10,000 topics in one request are refused whole with
POLICY_VIOLATION, as Kafka refuses a controller operation of more than 10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from cluster.formats.acls import DELETE, DESCRIBE, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_from_kafka_string, topic_id_to_kafka_string
from node.security import authorizer

REQUEST = DeleteTopicsRequest
RESPONSE = DeleteTopicsResponse
VERSIONS = (0, 6)

Result = RESPONSE.DeletableTopicResult


async def handle(broker, header, request):
    if header.api_version >= 6:
        wanted = [{"topic_id": topic_id_to_kafka_string(t.topic_id)} if t.name is None else {"name": t.name}
                  for t in request.topics]
    else:
        wanted = [{"name": name} for name in request.topic_names]
    refused = _refused(broker, header, wanted)
    wanted = [w for w in wanted if id(w) not in refused]
    if not wanted and refused:
        return RESPONSE[header.api_version](throttle_time_ms=0, responses=list(refused.values()))
    try:
        reply = await broker.call_controller("delete_topics", topics=wanted)
        if reply.get("error_code"):
            reply["results"] = [{**w, "error_code": reply["error_code"]} for w in wanted]
        results = [_result(r) for r in reply["results"]]
    except Exception as exc:
        results = [Result(name=w.get("name"), topic_id=_uuid(w.get("topic_id")), error_code=ErrorCode.REQUEST_TIMED_OUT,
                          error_message=str(exc)) for w in wanted]
    return RESPONSE[header.api_version](throttle_time_ms=0, responses=results + list(refused.values()))


def _refused(broker, header, wanted: list[dict]) -> dict[int, object]:
    """As Kafka: each topic needs DELETE, and one named by id DESCRIBE too; the answers of those
    refused (a topic named by id keeps its name to itself), by id() of their entry in wanted."""
    if broker.authorizer is None:
        return {}
    refused = {}
    for w in wanted:
        info = broker.topic_by_id(topic_id_from_kafka_string(w["topic_id"])) if "name" not in w else None
        name = w.get("name") or (info.name if info else None)
        if name is None:
            continue  # (an unknown id: the controller answers UNKNOWN_TOPIC_ID)
        if not authorizer.allowed(broker, header, DELETE, TOPIC, name) or (
                "name" not in w and not authorizer.allowed(broker, header, DESCRIBE, TOPIC, name)):
            refused[id(w)] = Result(name=w.get("name"), topic_id=_uuid(w.get("topic_id")),
                                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None)
    return refused


def _uuid(kafka_string):
    return topic_id_from_kafka_string(kafka_string) if kafka_string else None


def _result(result: dict):
    return Result(name=result.get("name"), topic_id=_uuid(result.get("topic_id")),
                  error_code=result["error_code"], error_message=result.get("error_message"))
