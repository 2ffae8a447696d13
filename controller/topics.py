"""Validation and records for topic creation, deletion, partition growth and topic configs.

Each function checks a request against the current image and returns per-item results
plus the records to write; nothing is written when a request is validate-only.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cluster.config import TOPIC_CONFIG_DEFAULTS_FROM_BROKER, TOPIC_CONFIG_FIXED_DEFAULTS
from cluster.errors import ErrorCode
from cluster.image import CONFIG_RESOURCE_TOPIC, MetadataImage
from cluster.log import topic_id_from_kafka_string, topic_id_to_kafka_string
from cluster.topic_names import topic_name_error
from controller.placement import assign_replicas

TOPIC_CONFIG_NAMES = frozenset(TOPIC_CONFIG_DEFAULTS_FROM_BROKER) | frozenset(TOPIC_CONFIG_FIXED_DEFAULTS)
NUMERIC_CONFIGS = frozenset(n for n, v in TOPIC_CONFIG_FIXED_DEFAULTS.items() if v.lstrip("-").isdigit()) | {
    "max.message.bytes", "min.insync.replicas", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
    "index.interval.bytes"}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass
class Outcome:
    results: list[dict] = field(default_factory=list)
    records: list[tuple[str, dict]] = field(default_factory=list)


class RequestError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


def _result(name, code=ErrorCode.NONE, message=None, **extra) -> dict:
    return {"name": name, "error_code": int(code), "error_message": message, **extra}


def create_topics(image: MetadataImage, brokers: list[int], topics: list[dict], defaults: dict) -> Outcome:
    outcome = Outcome()
    seen: set[str] = set()
    start = sum(len(t.partitions) for t in image.topics.values())
    for request in topics:
        name = request.get("name")
        try:
            if name in seen:
                raise RequestError(ErrorCode.INVALID_REQUEST, f"topic {name} appears twice in the request")
            seen.add(name)
            records, result = _create_topic(image, brokers, request, defaults, start)
            start += result["num_partitions"]
            outcome.records += records
            outcome.results.append(result)
        except RequestError as exc:
            outcome.results.append(_result(name, exc.code, str(exc)))
    return outcome


def _create_topic(image, brokers, request, defaults, start_index):
    name = request["name"]
    if topic_name_error(name):
        raise RequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is illegal")
    if name in image.topics:
        raise RequestError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    configs = validate_configs(request.get("configs") or {})
    assignments = request.get("assignments")
    partitions, factor = request.get("num_partitions", -1), request.get("replication_factor", -1)
    if assignments:
        if partitions != -1 or factor != -1:
            raise RequestError(ErrorCode.INVALID_REQUEST,
                               "both replica assignments and partitions/replication factor were given")
        replicas = _manual_assignment(assignments, brokers)
    else:
        partitions = defaults["num.partitions"] if partitions == -1 else partitions
        factor = defaults["default.replication.factor"] if factor == -1 else factor
        if partitions < 1:
            raise RequestError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be at least 1")
        if factor < 1 or factor > len(brokers):
            raise RequestError(ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"replication factor {factor} but {len(brokers)} brokers are available")
        replicas = assign_replicas(brokers, partitions, factor, start_index=start_index % max(len(brokers), 1))
    topic_id = uuid.uuid4()
    records = [("TopicRecord", {"name": name, "topic_id": topic_id})]
    records += [_partition_record(topic_id, index, members) for index, members in enumerate(replicas)]
    records += [_config_record(name, key, value) for key, value in sorted(configs.items())]
    result = _result(name, topic_id=topic_id_to_kafka_string(topic_id), num_partitions=len(replicas),
                     replication_factor=len(replicas[0]), configs=configs)
    return records, result


def _manual_assignment(assignments: dict, brokers: list[int]) -> list[list[int]]:
    indexes = sorted(int(k) for k in assignments)
    if indexes != list(range(len(indexes))):
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1")
    replicas = [list(assignments.get(i, assignments.get(str(i)))) for i in indexes]
    _check_replicas(replicas, brokers)
    return replicas


def _check_replicas(replicas: list[list[int]], brokers: list[int]) -> None:
    sizes = {len(r) for r in replicas}
    for members in replicas:
        if not members or len(set(members)) != len(members) or any(b not in brokers for b in members):
            raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"replicas {members} must be distinct registered brokers")
    if len(sizes) > 1:
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "all partitions need the same replica count")


def _partition_record(topic_id: uuid.UUID, index: int, replicas: list[int]) -> tuple[str, dict]:
    # Every replica of a new, empty partition is in sync, as in Kafka.
    return ("PartitionRecord", {
        "partition_id": index, "topic_id": topic_id, "replicas": replicas, "isr": list(replicas),
        "removing_replicas": [], "adding_replicas": [], "leader": replicas[0], "leader_recovery_state": 0,
        "leader_epoch": 0, "partition_epoch": 0, "directories": [uuid.UUID(int=0)] * len(replicas),
    })


def _config_record(topic: str, name: str, value: str | None) -> tuple[str, dict]:
    return ("ConfigRecord", {"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic, "name": name,
                             "value": value})


def validate_configs(configs: dict) -> dict:
    for name, value in configs.items():
        if name not in TOPIC_CONFIG_NAMES:
            raise RequestError(ErrorCode.INVALID_CONFIG, f"unknown topic config {name}")
        if value is None:
            raise RequestError(ErrorCode.INVALID_CONFIG, f"null value for topic config {name}")
        if name in NUMERIC_CONFIGS and not value.strip().lstrip("-").isdigit():
            raise RequestError(ErrorCode.INVALID_CONFIG, f"{name} must be an integer, got {value!r}")
    return dict(configs)


def delete_topics(image: MetadataImage, topics: list[dict]) -> Outcome:
    outcome = Outcome()
    for request in topics:
        if request.get("topic_id"):
            topic = image.topics_by_id.get(topic_id_from_kafka_string(request["topic_id"]))
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = image.topics.get(request.get("name"))
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if topic is None:
            outcome.results.append(_result(request.get("name"), missing, "topic does not exist",
                                           topic_id=request.get("topic_id")))
            continue
        outcome.records.append(("RemoveTopicRecord", {"topic_id": topic.topic_id}))
        outcome.results.append(_result(topic.name, topic_id=topic_id_to_kafka_string(topic.topic_id)))
    return outcome


def create_partitions(image: MetadataImage, brokers: list[int], topics: list[dict]) -> Outcome:
    outcome = Outcome()
    for request in topics:
        name = request["name"]
        topic = image.topics.get(name)
        try:
            if topic is None:
                raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
            current = len(topic.partitions)
            wanted = request["count"]
            if wanted <= current:
                raise RequestError(ErrorCode.INVALID_PARTITIONS,
                                   f"topic {name} has {current} partitions; the new count must be larger")
            factor = len(topic.partitions[0].replicas)
            if request.get("assignments"):
                replicas = [list(r) for r in request["assignments"]]
                if len(replicas) != wanted - current:
                    raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"{len(replicas)} assignments for {wanted - current} new partitions")
                _check_replicas(replicas, brokers)
            else:
                if factor > len(brokers):
                    raise RequestError(ErrorCode.INVALID_REPLICATION_FACTOR, "not enough live brokers")
                replicas = assign_replicas(brokers, wanted - current, factor, first_partition=current)
            outcome.records += [_partition_record(topic.topic_id, current + i, r) for i, r in enumerate(replicas)]
            outcome.results.append(_result(name))
        except RequestError as exc:
            outcome.results.append(_result(name, exc.code, str(exc)))
    return outcome


def alter_configs(image: MetadataImage, resources: list[dict]) -> Outcome:
    def changed(name: str, resource: dict) -> list:
        if name not in image.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        current = image.topic_configs(name)
        return [_config_record(name, c["name"], _new_value(current, c)) for c in resource["configs"]]
    return _topic_config_outcome(resources, changed)


def replace_configs(image: MetadataImage, resources: list[dict]) -> Outcome:
    """Legacy AlterConfigs: each topic's dynamic configs become exactly the given set; those not
    named go back to their defaults (Kafka's ConfigurationControlManager.legacyAlterConfigs)."""
    def replaced(name: str, resource: dict) -> list:
        if not name:
            raise RequestError(ErrorCode.INVALID_REQUEST, "default topic resources are not allowed")
        wanted = validate_configs(resource["configs"])  # before the topic's existence, as Kafka checks
        if name not in image.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        current = image.topic_configs(name)
        return [_config_record(name, key, value) for key, value in wanted.items() if current.get(key) != value] + \
            [_config_record(name, key, None) for key in current if key not in wanted]
    return _topic_config_outcome(resources, replaced)


def _topic_config_outcome(resources: list[dict], records_for) -> Outcome:
    """A result per resource; one whose records_for(name, resource) raises writes nothing."""
    outcome = Outcome()
    for resource in resources:
        kind, name = resource["resource_type"], resource["resource_name"]
        reply = {"resource_type": kind, "resource_name": name, "error_code": 0, "error_message": None}
        try:
            if kind != CONFIG_RESOURCE_TOPIC:
                raise RequestError(ErrorCode.INVALID_REQUEST, "only topic configs can be altered")
            outcome.records += records_for(name, resource)
        except RequestError as exc:
            reply.update(error_code=int(exc.code), error_message=str(exc))
        outcome.results.append(reply)
    return outcome


def _new_value(current: dict, change: dict) -> str | None:
    name, op, value = change["name"], change["op"], change.get("value")
    if op == DELETE:
        if name not in TOPIC_CONFIG_NAMES:
            raise RequestError(ErrorCode.INVALID_CONFIG, f"unknown topic config {name}")
        return None
    if op in (APPEND, SUBTRACT):
        items = [i for i in current.get(name, "").split(",") if i]
        change_items = [i for i in (value or "").split(",") if i]
        items = items + [i for i in change_items if i not in items] if op == APPEND else \
            [i for i in items if i not in change_items]
        value = ",".join(items)
    elif op != SET:
        raise RequestError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}")
    validate_configs({name: value})
    return value
