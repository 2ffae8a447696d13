"""Metadata: live brokers, topics, and the true leader of every partition."""
from __future__ import annotations

import logging

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.topic_names import INTERNAL_TOPICS, topic_name_error
from node import offsets_topic

REQUEST = MetadataRequest
RESPONSE = MetadataResponse
VERSIONS = (0, 13)
AUTHORIZED_OPERATIONS_OMITTED = None  # encoded as Kafka's "not requested" value, -2147483648

log = logging.getLogger(__name__)


async def handle(broker, header, request):
    version = header.api_version
    names, unknown_ids = _requested_topics(broker, request, version)
    if names is not None and _may_auto_create(broker, request, version):
        await _auto_create(broker, [n for n in names if broker.topic(n) is None and topic_name_error(n) is None])
    if names is None:
        names = sorted(broker.image.topics)
    topics = [_describe_topic(broker, name, version) for name in names]
    topics += [_unknown_topic_id(topic_id) for topic_id in unknown_ids]
    return RESPONSE[version](
        throttle_time_ms=0,
        brokers=[_broker_entry(broker, node_id) for node_id in broker.live_broker_ids()],
        cluster_id=broker.cluster_id,
        # In KRaft the real controller is hidden from clients: admin clients send
        # controller-only requests to this id, so it must be a live broker.
        controller_id=broker.node_id,
        topics=topics,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=ErrorCode.NONE,
    )


def _requested_topics(broker, request, version):
    """Names asked for (None = all topics) and topic ids that matched nothing."""
    if request.topics is None or (version == 0 and not request.topics):
        return None, []
    names, unknown_ids = [], []
    for topic in request.topics:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None and topic_id is not None and topic_id.int != 0:
            info = broker.topic_by_id(topic_id)
            if info is None:
                unknown_ids.append(topic_id)
                continue
            name = info.name
        if name is not None and name not in names:
            names.append(name)
    return names, unknown_ids


def _may_auto_create(broker, request, version) -> bool:
    allowed = True if version < 4 else request.allow_auto_topic_creation
    return allowed and broker.config.get_bool("auto.create.topics.enable")


async def _auto_create(broker, names: list[str]) -> None:
    if not names:
        return
    topics = [_topic_to_create(broker, name) for name in names]
    try:
        await broker.call_controller("create_topics", topics=topics, validate_only=False)
    except Exception as exc:  # the response then says UNKNOWN_TOPIC_OR_PARTITION and the client retries
        log.warning("auto-creating %s failed: %s", names, exc)


def _topic_to_create(broker, name: str) -> dict:
    # Kafka's AutoTopicCreationManager creates the offsets topic as a group's first use would
    # (Burrow, for one, asks for it before any group exists).
    if name == offsets_topic.OFFSETS_TOPIC:
        return offsets_topic.topic_to_create(broker.config, len(broker.live_broker_ids()))
    return {"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": None, "configs": {}}


def _broker_entry(broker, node_id: int):
    host, port, rack = broker.endpoint_of(node_id)
    return RESPONSE.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)


def _describe_topic(broker, name: str, version: int):
    Topic = RESPONSE.MetadataResponseTopic
    info = broker.topic(name)
    if info is None:
        error = topic_name_error(name) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return Topic(error_code=error, name=name, is_internal=False, partitions=[],
                     authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    return Topic(
        error_code=ErrorCode.NONE,
        name=name,
        topic_id=info.topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=[_describe_partition(broker, p) for _, p in sorted(info.partitions.items())],
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _describe_partition(broker, info):
    alive = broker.is_alive(info.leader)
    return RESPONSE.MetadataResponseTopic.MetadataResponsePartition(
        error_code=ErrorCode.NONE if alive else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=info.partition,
        leader_id=info.leader if alive else -1,
        leader_epoch=info.leader_epoch,
        replica_nodes=list(info.replicas),
        isr_nodes=list(info.isr),
        offline_replicas=[r for r in info.replicas if not broker.is_alive(r)],
    )


def _unknown_topic_id(topic_id):
    return RESPONSE.MetadataResponseTopic(
        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, is_internal=False,
        partitions=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
