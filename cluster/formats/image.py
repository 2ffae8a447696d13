"""The metadata image: cluster state built by replaying KRaft metadata records in order.

The controller and every node hold one; both build it with the same ``apply`` so they
can never disagree about what a record means.
"""
from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field

from cluster.formats.acls import AclBinding
from cluster.runtime.time_slices import TimeSlice, gently


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


@dataclass(frozen=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism (Kafka's UserScramCredentialRecord)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# A client quota entity: ((entity type, name or None for the default), ...) sorted by type.
QuotaEntity = tuple[tuple[str, "str | None"], ...]

CONFIG_RESOURCE_TOPIC = 2
CONFIG_RESOURCE_BROKER = 4
CONFIG_RESOURCE_GROUP = 32


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
    # user name -> {SCRAM mechanism code (1: SHA-256, 2: SHA-512): credential}
    scram_credentials: dict[str, dict[int, ScramCredential]] = field(default_factory=dict)
    # AccessControlEntryRecord id -> the ACL it holds
    acls: dict[uuid.UUID, AclBinding] = field(default_factory=dict)
    acl_changes: int = 0  # bumped by every ACL record: what was derived from `acls` may be stale
    # entity -> {quota key, e.g. producer_byte_rate: value}
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # Bumped by every change (each record applied, and new topics made visible): what was
    # derived from the image while this was the same still holds (encoded Metadata answers).
    changes: int = 0

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self.configs.get((CONFIG_RESOURCE_TOPIC, topic), {})

    def live_brokers(self) -> list[BrokerInfo]:
        return [b for b in sorted(self.brokers.values(), key=lambda b: b.node_id) if not b.fenced]

    def apply(self, offset: int, name: str, fields: dict | None) -> None:
        """Apply one record; types we do not track (NoOp, transactions, ...) only advance the offset."""
        applier = _APPLIERS.get(name)
        if applier is not None and fields is not None:
            applier(self, fields)
        self.offset = offset
        self.changes += 1

    def replay(self, data) -> None:
        """Apply every record of a buffer of record batches, skipping control batches."""
        from cluster.formats.metadata_records import iter_metadata_records

        for offset, name, fields in iter_metadata_records(data):
            self.apply(offset, name, fields)
        self._past_control_batches(data)

    async def replay_gently(self, data, time_slice: TimeSlice | None = None) -> "MetadataDelta":
        """replay(), giving way to the event loop every few milliseconds; returns what changed.

        Records are decoded first (most of the work) and only then applied. A topic the buffer
        creates is found by name only once every record is applied, so that nobody reading the
        image meanwhile sees it with some of its partitions.
        """
        from cluster.formats.metadata_records import iter_metadata_records

        time_slice = time_slice or TimeSlice()
        records = [record async for record in gently(iter_metadata_records(data), time_slice)]
        delta = MetadataDelta(records=len(records))
        async for offset, name, fields in gently(records, time_slice):
            if name == "TopicRecord" and fields is not None:
                topic = TopicInfo(fields["name"], fields["topic_id"])
                self.topics_by_id[topic.topic_id] = delta.new_topics[topic.name] = topic
                self.offset = offset
                continue
            delta.note(self, name, fields)
            self.apply(offset, name, fields)
        for topic in delta.new_topics.values():
            if self.topics_by_id.get(topic.topic_id) is topic:  # not removed again by the same buffer
                self.topics[topic.name] = topic
        self._past_control_batches(data)
        self.changes += 1
        return delta

    def _past_control_batches(self, data) -> None:
        """The image's offset is the last one replayed, a control batch's too (a quorum leader's
        LeaderChangeMessage): whoever compares it with the log's end sees it caught up."""
        from cluster.formats.records import iter_batch_headers

        last = None
        for _, header in iter_batch_headers(data):
            last = header
        if last is not None:
            self.offset = max(self.offset, last.next_offset - 1)

    def copy(self) -> "MetadataImage":
        return copy.deepcopy(self)

    def replace_with(self, other: "MetadataImage") -> None:
        """Take every field of other (an image rebuilt from a snapshot) in place, so that whoever holds
        this image sees the new one; the change counters move forward so nothing derived stays cached."""
        changes, acl_changes, cluster_id = self.changes, self.acl_changes, self.cluster_id
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(other, name))
        self.cluster_id = other.cluster_id or cluster_id
        self.changes = max(changes, other.changes) + 1
        self.acl_changes = max(acl_changes, other.acl_changes) + 1


@dataclass
class MetadataDelta:
    """What a run of records changed, for those who act on changes (a node's replicas)."""

    new_topics: dict[str, TopicInfo] = field(default_factory=dict)
    # (topic id, partition) of every partition a record created or changed
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    removed_topics: set[str] = field(default_factory=set)
    # topics whose configs changed; None in the set: a broker's (every topic's defaults)
    config_topics: set[str | None] = field(default_factory=set)
    records: int = 0

    def note(self, image: MetadataImage, name: str, fields: dict | None) -> None:
        """Note what a record is about to change (before it is applied: a removed topic's name is
        known only then)."""
        if fields is None:
            return
        if name in ("PartitionRecord", "PartitionChangeRecord"):
            self.partitions.add((fields["topic_id"], fields["partition_id"]))
        elif name == "RemoveTopicRecord":
            topic = image.topics_by_id.get(fields["topic_id"])
            if topic is not None:
                self.removed_topics.add(topic.name)
        elif name == "ConfigRecord":
            is_topic = fields["resource_type"] == CONFIG_RESOURCE_TOPIC
            self.config_topics.add(fields["resource_name"] if is_topic else None)


# BrokerRegistrationChangeRecord's fencing field
_FENCE, _UNFENCE = 1, -1
# PartitionChangeRecord's leader field when the leader stays
NO_LEADER_CHANGE = -2


def _apply_register_broker(image: "MetadataImage", r: dict) -> None:
    image.brokers[r["broker_id"]] = BrokerInfo(
        node_id=r["broker_id"],
        incarnation_id=r["incarnation_id"],
        broker_epoch=r["broker_epoch"],
        endpoints=[Endpoint(e["name"], e["host"], e["port"], e["security_protocol"]) for e in r["end_points"]],
        rack=r["rack"],
        fenced=r["fenced"],
        in_controlled_shutdown=r.get("in_controlled_shutdown", False),
    )


def _apply_unregister_broker(image: "MetadataImage", r: dict) -> None:
    image.brokers.pop(r["broker_id"], None)


def _set_fenced(image: "MetadataImage", broker_id: int, fenced: bool) -> None:
    broker = image.brokers.get(broker_id)
    if broker is not None:
        broker.fenced = fenced
        if not fenced:
            broker.in_controlled_shutdown = False


def _apply_broker_change(image: "MetadataImage", r: dict) -> None:
    broker = image.brokers.get(r["broker_id"])
    if broker is None:
        return
    if r.get("fenced") == _FENCE:
        broker.fenced = True
    elif r.get("fenced") == _UNFENCE:
        broker.fenced = False
    if r.get("in_controlled_shutdown") == 1:
        broker.in_controlled_shutdown = True


def _apply_topic(image: "MetadataImage", r: dict) -> None:
    topic = TopicInfo(r["name"], r["topic_id"])
    image.topics[topic.name] = topic
    image.topics_by_id[topic.topic_id] = topic


def _apply_partition(image: "MetadataImage", r: dict) -> None:
    topic = image.topics_by_id.get(r["topic_id"])
    if topic is None:
        return
    topic.partitions[r["partition_id"]] = PartitionInfo(
        partition=r["partition_id"], replicas=list(r["replicas"]), isr=list(r["isr"]), leader=r["leader"],
        leader_epoch=r["leader_epoch"], partition_epoch=r["partition_epoch"],
        removing_replicas=list(r["removing_replicas"]), adding_replicas=list(r["adding_replicas"]),
        leader_recovery_state=r.get("leader_recovery_state", 0),
    )


def _apply_partition_change(image: "MetadataImage", r: dict) -> None:
    """Kafka's PartitionRegistration.merge: only the fields present change; epochs advance."""
    topic = image.topics_by_id.get(r["topic_id"])
    partition = topic.partitions.get(r["partition_id"]) if topic else None
    if partition is None:
        return
    for name in ("replicas", "isr", "removing_replicas", "adding_replicas"):
        if r.get(name) is not None:
            setattr(partition, name, list(r[name]))
    if r.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
        partition.leader = r["leader"]
        partition.leader_epoch += 1
    if r.get("leader_recovery_state", -1) != -1:
        partition.leader_recovery_state = r["leader_recovery_state"]
    partition.partition_epoch += 1


def _apply_remove_topic(image: "MetadataImage", r: dict) -> None:
    topic = image.topics_by_id.pop(r["topic_id"], None)
    if topic is not None:
        image.topics.pop(topic.name, None)
        image.configs.pop((CONFIG_RESOURCE_TOPIC, topic.name), None)


def _apply_config(image: "MetadataImage", r: dict) -> None:
    key = (r["resource_type"], r["resource_name"])
    if r["value"] is None:
        configs = image.configs.get(key, {})
        configs.pop(r["name"], None)
        if not configs:
            image.configs.pop(key, None)
    else:
        image.configs.setdefault(key, {})[r["name"]] = r["value"]


def _apply_feature_level(image: "MetadataImage", r: dict) -> None:
    image.features[r["name"]] = r["feature_level"]


def _apply_producer_ids(image: "MetadataImage", r: dict) -> None:
    image.next_producer_id = r["next_producer_id"]


def _apply_scram_credential(image: "MetadataImage", r: dict) -> None:
    image.scram_credentials.setdefault(r["name"], {})[r["mechanism"]] = ScramCredential(
        r["salt"], r["stored_key"], r["server_key"], r["iterations"])


def _apply_remove_scram_credential(image: "MetadataImage", r: dict) -> None:
    credentials = image.scram_credentials.get(r["name"], {})
    credentials.pop(r["mechanism"], None)
    if not credentials:
        image.scram_credentials.pop(r["name"], None)


def _apply_acl(image: "MetadataImage", r: dict) -> None:
    image.acl_changes += 1
    image.acls[r["id"]] = AclBinding(r["resource_type"], r["resource_name"], r["pattern_type"], r["principal"],
                                     r["host"], r["operation"], r["permission_type"])


def _apply_remove_acl(image: "MetadataImage", r: dict) -> None:
    image.acl_changes += 1
    image.acls.pop(r["id"], None)


def quota_entity(entries) -> QuotaEntity:
    """The image's key of a quota entity from (type, name) pairs in any order."""
    return tuple(sorted((entity_type, name) for entity_type, name in entries))


def _apply_client_quota(image: "MetadataImage", r: dict) -> None:
    entity = quota_entity((e["entity_type"], e["entity_name"]) for e in r["entity"] or ())
    if r["remove"]:
        quotas = image.client_quotas.get(entity, {})
        quotas.pop(r["key"], None)
        if not quotas:
            image.client_quotas.pop(entity, None)
    else:
        image.client_quotas.setdefault(entity, {})[r["key"]] = r["value"]


_APPLIERS = {
    "RegisterBrokerRecord": _apply_register_broker,
    "UnregisterBrokerRecord": _apply_unregister_broker,
    "FenceBrokerRecord": lambda image, r: _set_fenced(image, r["id"], True),
    "UnfenceBrokerRecord": lambda image, r: _set_fenced(image, r["id"], False),
    "BrokerRegistrationChangeRecord": _apply_broker_change,
    "TopicRecord": _apply_topic,
    "PartitionRecord": _apply_partition,
    "PartitionChangeRecord": _apply_partition_change,
    "RemoveTopicRecord": _apply_remove_topic,
    "ConfigRecord": _apply_config,
    "FeatureLevelRecord": _apply_feature_level,
    "ProducerIdsRecord": _apply_producer_ids,
    "UserScramCredentialRecord": _apply_scram_credential,
    "RemoveUserScramCredentialRecord": _apply_remove_scram_credential,
    "AccessControlEntryRecord": _apply_acl,
    "RemoveAccessControlEntryRecord": _apply_remove_acl,
    "ClientQuotaRecord": _apply_client_quota,
}
