"""CreateTopics v0-7: forwarded to the controller; answered once this node's image shows the topics.

The controller checks each topic as Kafka's does (name, partitions, replication factor, explicit
assignments, configs) and places the replicas; each created topic is answered with its id and
its configs (v5+), unless validate_only.

With an authorizer (node.security.authorizer), the request needs CREATE on the cluster, else CREATE
on each topic (and a created topic's configs are shown only with DESCRIBE_CONFIGS on it, else its
topic_config_error_code is TOPIC_AUTHORIZATION_FAILED); what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Differs from Kafka: a whole request that would create more than 10,000 partitions or write more
than 10,000 records is refused, POLICY_VIOLATION for every topic.
"""
from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from cluster.formats.acls import CREATE, DESCRIBE_CONFIGS, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_from_kafka_string
from node.broker import apply_timeout_s
from node.security import authorizer
from node.topic_configs import topic_config_entries

REQUEST = CreateTopicsRequest
RESPONSE = CreateTopicsResponse
VERSIONS = (0, 7)

Result = RESPONSE.CreatableTopicResult


async def handle(broker, header, request):
    topics = [{
        "name": topic.name,
        "num_partitions": topic.num_partitions,
        "replication_factor": topic.replication_factor,
        "assignments": {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None,
        "configs": {c.name: c.value for c in topic.configs},
    } for topic in request.topics]
    denied = _denied(broker, header, [t["name"] for t in topics])
    if denied:
        refused = [t for t in topics if t["name"] in denied]
        topics = [t for t in topics if t["name"] not in denied]
    if denied and not topics:
        return RESPONSE[header.api_version](throttle_time_ms=0, topics=[_refused(t) for t in refused])
    try:
        reply = await broker.call_controller("create_topics", topics=topics, validate_only=request.validate_only,
                                             apply_timeout_s=apply_timeout_s(request.timeout_ms))
    except Exception as exc:
        results = [Result(name=t["name"], error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc),
                          num_partitions=-1, replication_factor=-1, configs=None) for t in topics]
    else:
        if reply.get("error_code"):
            reply["results"] = [{"name": t["name"], "error_code": reply["error_code"],
                                 "error_message": reply["error_message"]} for t in topics]
        results = [_result(broker, r, request.validate_only) for r in reply["results"]]
        if broker.authorizer is not None:
            _hide_configs(broker, header, results)
    if denied:
        results += [_refused(t) for t in refused]
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=results)


def _denied(broker, header, names: list[str]) -> set[str]:
    """As Kafka: CREATE on the cluster allows every topic, else each needs CREATE of its own."""
    if broker.authorizer is None or authorizer.allowed(broker, header, CREATE):
        return set()
    return authorizer.denied(broker, header, CREATE, TOPIC, names)


def _hide_configs(broker, header, results: list) -> None:
    """As Kafka: a created topic's configs are shown only to a principal that may DESCRIBE_CONFIGS it."""
    hidden = authorizer.denied(broker, header, DESCRIBE_CONFIGS, TOPIC, [r.name for r in results if not r.error_code])
    for result in results:
        if result.name in hidden and not result.error_code:
            result.configs = None
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _refused(topic: dict):
    return Result(name=topic["name"], error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                  num_partitions=-1, replication_factor=-1, configs=None)


def _result(broker, result: dict, validate_only: bool):
    if result["error_code"]:
        return Result(name=result["name"], error_code=result["error_code"], error_message=result.get("error_message"),
                      num_partitions=-1, replication_factor=-1, configs=None)
    topic_id = result.get("topic_id")
    configs = None
    if not validate_only:
        Config = Result.CreatableTopicConfigs
        configs = [Config(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                          is_sensitive=e.sensitive) for e in topic_config_entries(broker, result["name"])]
    return Result(
        name=result["name"],
        topic_id=topic_id_from_kafka_string(topic_id) if topic_id else None,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=result["num_partitions"],
        replication_factor=result["replication_factor"],
        configs=configs,
    )
