"""CreatePartitions v0-3: grow a topic's partition count through the controller.

Counts and assignments are checked before anything is placed; the answer comes once the
controller has written the new partitions (or validate_only has checked them). A controller that
does not answer in time gives every topic REQUEST_TIMED_OUT.

With an authorizer (node.security.authorizer), the request needs ALTER on each topic; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: a request that would add more than 10,000 partitions in all is refused whole
with POLICY_VIOLATION, as Kafka refuses a controller operation of more than 10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from cluster.formats.acls import ALTER, TOPIC
from cluster.formats.errors import ErrorCode
from node.broker import apply_timeout_s
from node.security import authorizer

REQUEST = CreatePartitionsRequest
RESPONSE = CreatePartitionsResponse
VERSIONS = (0, 3)

Result = RESPONSE.CreatePartitionsTopicResult


async def handle(broker, header, request):
    topics = [{
        "name": topic.name,
        "count": topic.count,
        "assignments": [list(a.broker_ids) for a in topic.assignments] if topic.assignments is not None else None,
    } for topic in request.topics]
    denied = authorizer.denied(broker, header, ALTER, TOPIC, [t["name"] for t in topics])
    topics = [t for t in topics if t["name"] not in denied]
    refused = [Result(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      error_message="The topic authorization is failed.") for name in sorted(denied)]
    if refused and not topics:
        return RESPONSE[header.api_version](throttle_time_ms=0, results=refused)
    try:
        reply = await broker.call_controller("create_partitions", topics=topics, validate_only=request.validate_only,
                                             apply_timeout_s=apply_timeout_s(request.timeout_ms))
        if reply.get("error_code"):
            reply["results"] = [{"name": t["name"], "error_code": reply["error_code"],
                                 "error_message": reply["error_message"]} for t in topics]
        results = [Result(name=r["name"], error_code=r["error_code"], error_message=r.get("error_message"))
                   for r in reply["results"]]
    except Exception as exc:
        results = [Result(name=t["name"], error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc)) for t in topics]
    return RESPONSE[header.api_version](throttle_time_ms=0, results=results + refused)
