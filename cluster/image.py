"""The metadata image: cluster state built by replaying KRaft metadata records in order.

The controller and every node hold one; both build it with the same ``apply`` so they
can never disagree about what a record means.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass
class Endpoint:
    name: str  # listener name, e.g. "PLAINTEXT"
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass
class BrokerInfo:
    node_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: list[Endpoint]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass
class PartitionInfo:
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    leader_recovery_state: int = 0


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


CONFIG_RESOURCE_TOPIC = 2
CONFIG_RESOURCE_BROKER = 4


@dataclass
class MetadataImage:
    cluster_id: str | None = None
    # offset of the last record applied; -1 before any
    offset: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicInfo] = field(default_factory=dict)
    # (resource type, resource name) -> {config name: value}; topic configs use CONFIG_RESOURCE_TOPIC
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    # first producer id not yet handed out in a block
    next_producer_id: int = 0

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self.configs.get((CONFIG_RESOURCE_TOPIC, topic), {})

    def live_brokers(self) -> list[BrokerInfo]:
        return [b for b in sorted(self.brokers.values(), key=lambda b: b.node_id) if not b.fenced]
