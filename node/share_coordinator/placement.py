"""Where a share-partition's state is kept: its `__share_group_state` partition, and how that topic is created.

A share-partition's coordinator is the leader of partition
abs(javaHashCode("group:topicId:partition")) % the topic's partition count, the topic id written
as Kafka prints a Uuid (URL-safe base64), as Kafka's SharePartitionKey and ShareCoordinatorService
place it. That string is also the key FindCoordinator's SHARE key type (2) looks up.
"""
from __future__ import annotations

import uuid

from cluster.formats.topic_ids import topic_id_to_kafka_string
from node.groups.placement import partition_for_group

SHARE_STATE_TOPIC = "__share_group_state"


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{topic_id_to_kafka_string(topic_id)}:{partition}"


def partition_for_key(key: str, partitions: int) -> int:
    return partition_for_group(key, partitions)


def topic_to_create(config, live_brokers: int) -> dict:
    """How `__share_group_state` is created on first use: Kafka's share.coordinator.state.topic.* settings."""
    factor = min(config.get_int("share.coordinator.state.topic.replication.factor"), live_brokers)
    return {"name": SHARE_STATE_TOPIC, "num_partitions": config.get_int("share.coordinator.state.topic.num.partitions"),
            "replication_factor": factor, "assignments": None,
            "configs": {"cleanup.policy": "compact", "compression.type": "producer",
                        "min.insync.replicas": config.get("share.coordinator.state.topic.min.isr"),
                        "segment.bytes": config.get("share.coordinator.state.topic.segment.bytes")}}
