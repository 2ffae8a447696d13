"""Where a group is coordinated: its `__consumer_offsets` partition, and how that topic is created.

A group's coordinator is the leader of partition abs(javaHashCode(group id)) % the topic's
partition count, as in Kafka; every node computes the same answer from the same metadata.
"""
from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer"}


def topic_to_create(config, live_brokers: int) -> dict:
    """How `__consumer_offsets` is created on first use, whether by a group's FindCoordinator
    or by a Metadata request naming it: Kafka's offsets.topic.* settings and compacted
    configs, never num.partitions (a group's partition is its hash modulo the count)."""
    factor = min(config.get_int("offsets.topic.replication.factor"), live_brokers)
    return {"name": OFFSETS_TOPIC, "num_partitions": config.get_int("offsets.topic.num.partitions"),
            "replication_factor": factor, "assignments": None,
            "configs": {**OFFSETS_TOPIC_CONFIGS, "segment.bytes": config.get("offsets.topic.segment.bytes")}}


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for_group(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions (abs of MIN_VALUE is 0)."""
    hashed = java_string_hash(group_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partitions
