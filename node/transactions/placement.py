"""Where a transactional id is coordinated: its `__transaction_state` partition, and how that topic is created.

A transactional id's coordinator is the leader of partition abs(javaHashCode(id)) % the topic's
partition count, as in Kafka, and the coordinator epoch is that partition's leader epoch.
"""
from __future__ import annotations

from node.groups.placement import partition_for_group

TRANSACTION_STATE_TOPIC = "__transaction_state"


def partition_for(transactional_id: str, partitions: int) -> int:
    return partition_for_group(transactional_id, partitions)


def topic_to_create(config, live_brokers: int) -> dict:
    """How `__transaction_state` is created on first use: Kafka's transaction.state.log.* settings."""
    factor = min(config.get_int("transaction.state.log.replication.factor"), live_brokers)
    return {"name": TRANSACTION_STATE_TOPIC, "num_partitions": config.get_int("transaction.state.log.num.partitions"),
            "replication_factor": factor, "assignments": None,
            "configs": {"cleanup.policy": "compact", "compression.type": "uncompressed",
                        "min.insync.replicas": config.get("transaction.state.log.min.isr"),
                        "segment.bytes": config.get("transaction.state.log.segment.bytes"),
                        "unclean.leader.election.enable": "false"}}
