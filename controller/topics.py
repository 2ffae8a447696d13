"""Validation and records for topic creation, deletion, partition growth and topic configs.

Each operation checks a whole request against the current image before it builds anything,
and is bounded as Kafka's controller bounds it: no user operation writes more than
MAX_RECORDS_PER_USER_OP records (POLICY_VIOLATION for the whole request otherwise). The
checks come in Kafka's order with Kafka's codes and messages. Loops over a request's items
give way to the event loop every few milliseconds. Nothing is written for a validate-only
request.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cluster.formats.config import TOPIC_CONFIG_DEFAULTS_FROM_BROKER, TOPIC_CONFIG_FIXED_DEFAULTS, valid_throttled_replicas
from cluster.formats.errors import ErrorCode
from cluster.formats.image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC, MetadataImage
from cluster.formats.topic_ids import topic_id_from_kafka_string, topic_id_to_kafka_string
from cluster.runtime.time_slices import gently
from cluster.formats.topic_names import illegal_name_message, topic_name_error
from controller.arguments import expect, expect_list, optional
from controller.group_configs import GroupConfigRefused, altered_group_records, replaced_group_records
from controller.placement import iter_replica_assignments

TOPIC_CONFIG_NAMES = frozenset(TOPIC_CONFIG_DEFAULTS_FROM_BROKER) | frozenset(TOPIC_CONFIG_FIXED_DEFAULTS)
NUMERIC_CONFIGS = frozenset(n for n, v in TOPIC_CONFIG_FIXED_DEFAULTS.items() if v.lstrip("-").isdigit()) | {
    "max.message.bytes", "min.insync.replicas", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
    "index.interval.bytes"}
THROTTLED_REPLICAS_CONFIGS = frozenset({"leader.replication.throttled.replicas",
                                        "follower.replication.throttled.replicas"})
# The broker configs IncrementalAlterConfigs may change while the cluster runs.
DYNAMIC_BROKER_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP, and the partitions one CreateTopics may ask for.
MAX_RECORDS_PER_USER_OP = 10_000
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


@dataclass
class Outcome:
    results: list[dict] = field(default_factory=list)
    records: list[tuple[str, dict]] = field(default_factory=list)
    # Set when the whole request is refused: every item gets this (code, message), as Kafka's
    # getErrorResponse answers, and nothing is written.
    refused: tuple[ErrorCode, str] | None = None


class RequestError(Exception):
    def __init__(self, code: ErrorCode, message: str | None):
        super().__init__(message)
        self.code = code
        self.message = message


def refuse_too_large() -> Outcome:
    return Outcome(refused=(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS))


def _result(name, code=ErrorCode.NONE, message=None, **extra) -> dict:
    return {"name": name, "error_code": int(code), "error_message": message, **extra}


def _error_result(name, exc: RequestError, **extra) -> dict:
    return _result(name, exc.code, exc.message, **extra)


def _duplicates(names: list) -> dict:
    """Names given more than once, each mapped to False until its one INVALID_REQUEST result is out."""
    seen, twice = set(), {}
    for name in names:
        if name in seen:
            twice[name] = False
        seen.add(name)
    return twice


def _report_duplicate(outcome: Outcome, duplicates: dict, name: str) -> None:
    # Kafka creates none of them and answers the name once.
    if not duplicates[name]:
        duplicates[name] = True
        outcome.results.append(_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))


# --- CreateTopics ---

@dataclass
class TopicPlan:
    """A topic that passed every check: what its records will say."""
    name: str
    partitions: int
    factor: int
    configs: dict
    manual: list[list[int]] | None = None  # replicas per partition, when the request placed them
    first_broker: int = 0

    @property
    def record_count(self) -> int:
        return 1 + self.partitions + len(self.configs)


async def create_topics(image: MetadataImage, brokers: list[int], requests: list, defaults: dict) -> Outcome:
    """brokers: the unfenced brokers new replicas may go to."""
    if len(expect_list(requests, "topics")) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    requests = [_creatable_topic(r) async for r in gently(requests)]
    if sum(_partitions_asked(r, defaults) for r in requests) > MAX_RECORDS_PER_USER_OP:
        return Outcome(refused=(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS))
    if sum(len(r["configs"]) for r in requests) > MAX_RECORDS_PER_USER_OP:  # a ConfigRecord each
        return refuse_too_large()
    duplicates = _duplicates([r["name"] for r in requests])
    outcome, plans = Outcome(), []
    start = sum(len(t.partitions) for t in image.topics.values())
    async for request in gently(requests):
        name = request["name"]
        if name in duplicates:
            _report_duplicate(outcome, duplicates, name)
            continue
        try:
            plan = _plan_topic(image, brokers, request, defaults, start)
        except RequestError as exc:
            outcome.results.append(_error_result(name, exc))
            continue
        start += plan.partitions
        plans.append(plan)
        outcome.results.append(_result(name, num_partitions=plan.partitions, replication_factor=plan.factor,
                                       configs=plan.configs))
    if sum(plan.record_count for plan in plans) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    ids = {}
    for plan in plans:
        ids[plan.name] = uuid.uuid4()
        outcome.records += [record async for record in gently(
            _topic_records(plan, ids[plan.name], brokers, racks_of(image, brokers)))]
    for result in outcome.results:
        if result["name"] in ids and not result["error_code"]:
            result["topic_id"] = topic_id_to_kafka_string(ids[result["name"]])
    return outcome


def _creatable_topic(request) -> dict:
    expect(request, dict, "topic")
    return {
        "name": expect(request.get("name"), str, "topic name"),
        "num_partitions": expect(request.get("num_partitions", -1), int, "num_partitions"),
        "replication_factor": expect(request.get("replication_factor", -1), int, "replication_factor"),
        "assignments": _assignments(optional(request.get("assignments"), dict, "assignments")),
        "configs": optional(request.get("configs"), dict, "configs") or {},
    }


def _assignments(assignments: dict | None) -> dict[int, list] | None:
    """Partition index -> replica list; the broker ids are checked once the count is known to be in bounds."""
    if not assignments or len(assignments) > MAX_RECORDS_PER_USER_OP:
        return assignments or None  # too many to read: the partition count refuses the request
    return {int(expect(index, (int, str), "partition index")): expect_list(replicas, "replicas")
            for index, replicas in assignments.items()}


def _partitions_asked(request: dict, defaults: dict) -> int:
    """What Kafka counts against the partitions one CreateTopics may create."""
    if request["assignments"]:
        return len(request["assignments"])
    if request["num_partitions"] == -1:
        return defaults["num.partitions"]
    return max(request["num_partitions"], 0)


def _plan_topic(image, brokers, request, defaults, start_index) -> TopicPlan:
    name = request["name"]
    if topic_name_error(name):
        raise RequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal_name_message(name))
    if name in image.topics:
        raise RequestError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    configs = validate_configs(request["configs"])
    partitions, factor = request["num_partitions"], request["replication_factor"]
    if request["assignments"]:
        if factor != -1:
            raise RequestError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                          "replication factor was not set to -1.")
        if partitions != -1:
            raise RequestError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                          "numPartitions was not set to -1.")
        manual = _manual_assignment(image, brokers, request["assignments"])
        return TopicPlan(name, len(manual), len(manual[0]), configs, manual=manual)
    if factor < -1 or factor == 0:
        raise RequestError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
    if partitions < -1 or partitions == 0:
        raise RequestError(ErrorCode.INVALID_PARTITIONS,
                           "Number of partitions was set to an invalid non-positive value.")
    partitions = defaults["num.partitions"] if partitions == -1 else partitions
    factor = defaults["default.replication.factor"] if factor == -1 else factor
    problem = _placement_problem(brokers, factor)
    if problem:
        raise RequestError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {factor} time(s): {problem}")
    return TopicPlan(name, partitions, factor, configs, first_broker=start_index % max(len(brokers), 1))


def _placement_problem(brokers: list[int], factor: int) -> str | None:
    """Why Kafka's replica placer could not place factor replicas, if it could not."""
    if not brokers:
        return "All brokers are currently fenced."
    if factor > len(brokers):
        return (f"The target replication factor of {factor} cannot be reached because only "
                f"{len(brokers)} broker(s) are registered.")
    return None


def racks_of(image: MetadataImage, brokers: list[int]) -> dict[int, str | None]:
    return {b: image.brokers[b].rack if b in image.brokers else None for b in brokers}


def _topic_records(plan: TopicPlan, topic_id: uuid.UUID, brokers: list[int], racks: dict[int, str | None]):
    yield "TopicRecord", {"name": plan.name, "topic_id": topic_id}
    replicas = plan.manual or iter_replica_assignments(brokers, plan.partitions, plan.factor,
                                                       start_index=plan.first_broker, racks=racks)
    active = set(brokers)
    for index, members in enumerate(replicas):
        yield _partition_record(topic_id, index, members, [b for b in members if b in active])
    for key, value in sorted(plan.configs.items()):
        yield _config_record(plan.name, key, value)


def _manual_assignment(image, brokers, assignments: dict[int, list[int]]) -> list[list[int]]:
    """Replicas per partition as a request placed them, checked as Kafka's controller checks them."""
    replicas = []
    for index in range(len(assignments)):
        if index not in assignments:
            raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               "partitions should be a consecutive 0-based integer sequence")
        replicas.append(checked_replicas(image, brokers, index, assignments[index],
                                          len(replicas[0]) if replicas else None))
    return replicas


def checked_replicas(image, brokers, index: int, members: list, factor: int | None) -> list[int]:
    if not members:
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "The manual partition assignment includes an empty replica list.")
    registered = len(set(image.brokers) | set(brokers))
    if len(members) > registered:  # some broker repeats or is unknown; not worth sorting them all to say which
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes {len(members)} replicas, but only "
                           f"{registered} broker(s) are registered.")
    members = [expect(b, int, "broker id") for b in members]
    previous = None
    for broker in sorted(members):
        if broker not in image.brokers and broker not in brokers:
            raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                                                                     f"broker {broker}, but no such broker is "
                                                                     f"registered.")
        if broker == previous:
            raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes "
                                                                     f"the broker {broker} more than once.")
        previous = broker
    if factor is not None and len(members) != factor:
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes a partition with {len(members)} replica(s), "
                           f"but this is not consistent with previous partitions, which have {factor} replica(s).")
    if not set(members) & set(brokers):
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"All brokers specified in the manual partition "
                                                                 f"assignment for partition {index} are fenced or in "
                                                                 f"controlled shutdown.")
    return list(members)


def _partition_record(topic_id: uuid.UUID, index: int, replicas: list[int], isr: list[int]) -> tuple[str, dict]:
    # The ISR of a new, empty partition is every active replica, led by the first, as in Kafka.
    return ("PartitionRecord", {
        "partition_id": index, "topic_id": topic_id, "replicas": list(replicas), "isr": isr,
        "removing_replicas": [], "adding_replicas": [], "leader": isr[0], "leader_recovery_state": 0,
        "leader_epoch": 0, "partition_epoch": 0, "directories": [uuid.UUID(int=0)] * len(replicas),
    })


def _config_record(topic: str, name: str, value: str | None) -> tuple[str, dict]:
    return ("ConfigRecord", {"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic, "name": name,
                             "value": value})


def validate_configs(configs: dict) -> dict:
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        raise RequestError(ErrorCode.INVALID_CONFIG,
                           f"Null value not supported for topic configs: {','.join(map(str, nulls))}")
    for name, value in configs.items():
        if name not in TOPIC_CONFIG_NAMES:
            raise RequestError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if not isinstance(value, str):
            raise RequestError(ErrorCode.INVALID_CONFIG, f"{name} must be a string, got {value!r}")
        if name in NUMERIC_CONFIGS and not value.strip().lstrip("-").isdigit():
            raise RequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                                         f"Not a number of type LONG")
        if name in THROTTLED_REPLICAS_CONFIGS and not valid_throttled_replicas(value):
            raise RequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                                         f"must be the literal '*' or a list of replicas in the "
                                                         f"following format: [partitionId]:[brokerId],...")
    return dict(configs)


# --- DeleteTopics ---

async def delete_topics(image: MetadataImage, requests: list) -> Outcome:
    if len(expect_list(requests, "topics")) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    outcome, deleted = Outcome(), set()
    async for request in gently(requests):
        expect(request, dict, "topic")
        topic, missing = _topic_to_delete(image, request)
        if topic is None:
            outcome.results.append(_result(request.get("name"), missing, topic_id=request.get("topic_id")))
            continue
        if topic.topic_id not in deleted:
            deleted.add(topic.topic_id)
            outcome.records.append(("RemoveTopicRecord", {"topic_id": topic.topic_id}))
        outcome.results.append(_result(topic.name, topic_id=topic_id_to_kafka_string(topic.topic_id)))
    return outcome


def _topic_to_delete(image, request: dict):
    if request.get("topic_id"):
        kafka_string = expect(request["topic_id"], str, "topic_id")
        try:
            topic_id = topic_id_from_kafka_string(kafka_string)
        except ValueError:
            return None, ErrorCode.UNKNOWN_TOPIC_ID
        return image.topics_by_id.get(topic_id), ErrorCode.UNKNOWN_TOPIC_ID
    return image.topics.get(expect(request.get("name"), str, "topic name")), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# --- CreatePartitions ---

async def create_partitions(image: MetadataImage, brokers: list[int], requests: list) -> Outcome:
    if len(expect_list(requests, "topics")) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    requests = [_partition_growth(r) async for r in gently(requests)]
    duplicates = _duplicates([r["name"] for r in requests])
    outcome, growing = Outcome(), []
    async for request in gently(requests):
        name = request["name"]
        if name in duplicates:
            _report_duplicate(outcome, duplicates, name)
            continue
        try:
            growing.append((_check_growth(image, request), request, len(outcome.results)))
            outcome.results.append(_result(name))
        except RequestError as exc:
            outcome.results.append(_error_result(name, exc))
    # Checked before a single replica is placed: the count may be anything a client sends.
    if sum(request["count"] - len(topic.partitions) for topic, request, _ in growing) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    for topic, request, position in growing:
        try:
            outcome.records += [r async for r in gently(_new_partition_records(image, brokers, topic, request))]
        except RequestError as exc:
            outcome.results[position] = _error_result(topic.name, exc)
    return outcome


def _partition_growth(request) -> dict:
    expect(request, dict, "topic")
    assignments = optional(request.get("assignments"), list, "assignments")
    return {
        "name": expect(request.get("name"), str, "topic name"),
        "count": expect(request.get("count"), int, "count"),
        "assignments": assignments,  # replica lists are read once their number is known to be right
    }


def _check_growth(image, request: dict):
    name, count = request["name"], request["count"]
    topic = image.topics.get(name)
    if topic is None or not topic.partitions:
        raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    current = len(topic.partitions)
    if count == current:
        raise RequestError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        raise RequestError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} partition(s); "
                                                         f"{count} would not be an increase.")
    if request["assignments"] is not None and len(request["assignments"]) != count - current:
        raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Attempted to add {count - current} additional partition(s), but only "
                           f"{len(request['assignments'])} assignment(s) were specified.")
    return topic


def _new_partition_records(image, brokers, topic, request):
    """Records of a topic's new partitions; raises RequestError before the first one if they cannot be placed."""
    current = len(topic.partitions)
    factor = len(next(iter(topic.partitions.values())).replicas)
    if request["assignments"] is not None:
        replicas = [checked_replicas(image, brokers, current + i, expect_list(members, "replicas"), factor)
                    for i, members in enumerate(request["assignments"])]
    else:
        problem = _placement_problem(brokers, factor)
        if problem:
            raise RequestError(ErrorCode.INVALID_REPLICATION_FACTOR, problem)
        replicas = iter_replica_assignments(brokers, request["count"] - current, factor, first_partition=current,
                                            racks=racks_of(image, brokers))
    active = set(brokers)
    return (_partition_record(topic.topic_id, current + i, members, [b for b in members if b in active])
            for i, members in enumerate(replicas))


# --- IncrementalAlterConfigs and AlterConfigs ---

async def alter_configs(image: MetadataImage, resources: list, broker_config=None) -> Outcome:
    """IncrementalAlterConfigs: each named config is set, deleted, appended to or subtracted from.
    Of a BROKER resource (a node id, or "" for every node) only the replication throttle rates can
    change, as they are the broker configs kraftwerk reads while it runs. A GROUP resource's configs
    are checked within the bounds of `broker_config` (controller.group_configs)."""
    def changed(name: str, resource: dict) -> list:
        if resource["resource_type"] == CONFIG_RESOURCE_BROKER:
            return _broker_config_records(image, name, resource["configs"])
        if resource["resource_type"] == CONFIG_RESOURCE_GROUP:
            return altered_group_records(image, broker_config, name, resource["configs"])
        if name not in image.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        current = image.topic_configs(name)
        return [_config_record(name, c["name"], _new_value(current, c)) for c in resource["configs"]]
    return await _topic_config_outcome(resources, _config_resource, changed,
                                       kinds=(CONFIG_RESOURCE_TOPIC, CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_GROUP))


def _broker_config_records(image: MetadataImage, name: str, configs: list) -> list:
    if name and not (name.isdigit() and int(name) in image.brokers):
        raise RequestError(ErrorCode.INVALID_REQUEST, f"Broker {name} is not registered.")
    static = sorted({c["name"] for c in configs} - DYNAMIC_BROKER_CONFIGS)
    if static:
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f"Cannot update these configs dynamically: {', '.join(static)}")
    records = []
    for change in configs:
        if change["op"] not in (SET, DELETE):
            raise RequestError(ErrorCode.INVALID_REQUEST, f"{change['name']} is not a list: it can only be "
                                                          f"set or deleted")
        value = change["value"] if change["op"] == SET else None
        if value is not None and not value.strip().isdigit():
            raise RequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration "
                                                         f"{change['name']}: Not a number of type LONG")
        records.append(("ConfigRecord", {"resource_type": CONFIG_RESOURCE_BROKER, "resource_name": name,
                                         "name": change["name"], "value": value}))
    return records


async def replace_configs(image: MetadataImage, resources: list, broker_config=None) -> Outcome:
    """Legacy AlterConfigs: each topic's or group's dynamic configs become exactly the given set;
    those not named go back to their defaults (Kafka's ConfigurationControlManager.legacyAlterConfigs)."""
    def replaced(name: str, resource: dict) -> list:
        if resource["resource_type"] == CONFIG_RESOURCE_GROUP:
            return replaced_group_records(image, broker_config, name, resource["configs"])
        if not name:
            raise RequestError(ErrorCode.INVALID_REQUEST, "default topic resources are not allowed")
        wanted = validate_configs(resource["configs"])  # before the topic's existence, as Kafka checks
        if name not in image.topics:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist")
        current = image.topic_configs(name)
        return [_config_record(name, key, value) for key, value in wanted.items() if current.get(key) != value] + \
            [_config_record(name, key, None) for key in current if key not in wanted]
    return await _topic_config_outcome(resources, _replacement_resource, replaced,
                                       kinds=(CONFIG_RESOURCE_TOPIC, CONFIG_RESOURCE_GROUP))


async def _topic_config_outcome(resources: list, read_resource, records_for,
                                kinds=(CONFIG_RESOURCE_TOPIC,)) -> Outcome:
    """A result per resource; one whose records_for(name, resource) raises writes nothing."""
    if len(expect_list(resources, "resources")) > MAX_RECORDS_PER_USER_OP or sum(
            len(expect(r, dict, "resource").get("configs") or ()) for r in resources
    ) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    resources = [read_resource(r) async for r in gently(resources)]
    outcome = Outcome()
    async for resource in gently(resources):
        kind, name = resource["resource_type"], resource["resource_name"]
        reply = {"resource_type": kind, "resource_name": name, "error_code": 0, "error_message": None}
        try:
            if kind not in kinds:
                raise RequestError(ErrorCode.INVALID_REQUEST, "only topic configs can be altered")
            outcome.records += records_for(name, resource)
        except (RequestError, GroupConfigRefused) as exc:
            reply.update(error_code=int(exc.code), error_message=exc.message)
        outcome.results.append(reply)
    return outcome


def _config_resource(resource) -> dict:
    expect(resource, dict, "resource")
    return {
        "resource_type": expect(resource.get("resource_type"), int, "resource_type"),
        "resource_name": expect(resource.get("resource_name"), str, "resource_name"),
        "configs": [{"name": expect(expect(c, dict, "config").get("name"), str, "config name"),
                     "op": expect(c.get("op"), int, "config operation"),
                     "value": optional(c.get("value"), str, "config value")}
                    for c in expect_list(resource.get("configs"), "configs")],
    }


def _replacement_resource(resource) -> dict:
    expect(resource, dict, "resource")
    configs = expect(resource.get("configs"), dict, "configs")
    return {
        "resource_type": expect(resource.get("resource_type"), int, "resource_type"),
        "resource_name": expect(resource.get("resource_name"), str, "resource_name"),
        "configs": {expect(name, str, "config name"): optional(value, str, "config value")
                    for name, value in configs.items()},
    }


def _new_value(current: dict, change: dict) -> str | None:
    name, op, value = change["name"], change["op"], change.get("value")
    if op == DELETE:
        if name not in TOPIC_CONFIG_NAMES:
            raise RequestError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
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
