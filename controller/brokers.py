"""Broker registration, heartbeats, fencing and unfencing."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Iterator

from cluster.formats.control import BadControlRequest
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage
from cluster.formats.topic_ids import topic_id_from_kafka_string
from controller.arguments import expect_list


@dataclass
class Session:
    """What the controller knows about a live broker beyond the metadata log."""

    node_id: int
    broker_epoch: int
    registered_at_offset: int
    applied_offset: int = -1
    last_heartbeat: float = 0.0
    shutting_down: bool = False  # fenced by a controlled shutdown: stays fenced until it registers again
    # False for a session this controller only inferred from the log when it started.
    heard_from: bool = True
    # Wall-clock ms of the last heartbeat that reported the log end applied (-1: none yet).
    caught_up_ms: int = -1

    def heartbeat_age_ms(self) -> int:
        """0 while a session started by a takeover is in its grace (see Controller._start_sessions)."""
        return max(0, int((time.monotonic() - self.last_heartbeat) * 1000))


def endpoints_of(args: dict) -> list[dict]:
    """A registering node's listeners: [name, host, port, security protocol id] each; a node that
    names none has one PLAINTEXT listener at host:port."""
    listeners = args.get("endpoints") or [["PLAINTEXT", args["host"], args["port"], 0]]
    expect_list(listeners, "endpoints")
    endpoints = []
    for listener in listeners:
        if not isinstance(listener, (list, tuple)) or len(listener) != 4 or not isinstance(listener[0], str) or not isinstance(listener[1], str) \
                or not isinstance(listener[2], int) or listener[3] not in (0, 1, 2, 3):
            raise BadControlRequest(f"endpoints: {listener!r} is not [name, host, port, security protocol]")
        endpoints.append({"name": listener[0], "host": listener[1], "port": listener[2],
                          "security_protocol": listener[3]})
    return endpoints


def register_broker_record(args: dict, broker_epoch: int) -> tuple[str, dict]:
    return ("RegisterBrokerRecord", {
        "broker_id": args["node_id"],
        "incarnation_id": topic_id_from_kafka_string(args["incarnation_id"]),
        "broker_epoch": broker_epoch,
        "end_points": endpoints_of(args),
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 19}],
        "rack": args.get("rack"),
        "fenced": True,
        "in_controlled_shutdown": False,
        "log_dirs": [uuid.UUID(int=0)],
    })


Change = tuple[str, dict]


def leaderless_partition_changes(image: MetadataImage, node_id: int) -> list[Change]:
    return [change for change in iter_leaderless_partition_changes(image, node_id) if change]


def iter_leaderless_partition_changes(image: MetadataImage, node_id: int) -> Iterator[Change | None]:
    """When a broker comes back, it leads partitions that had no leader and keep it in their ISR,
    and, where the topic allows unclean election, leaderless partitions it is a replica of (its
    data becomes the partition's, so the ISR is reset to it, as Kafka's unclean election does).

    Yields a change or None for every partition, so that a caller can give way in between.
    """
    for topic in image.topics.values():
        unclean = _unclean_allowed(image, topic.name)
        for index, partition in topic.partitions.items():
            if partition.leader != -1 or node_id not in partition.replicas:
                yield None
                continue
            change = {"partition_id": index, "topic_id": topic.topic_id, "leader": node_id}
            if node_id not in partition.isr:
                if not unclean:
                    yield None
                    continue
                change["isr"] = [node_id]
            yield "PartitionChangeRecord", change


def _unclean_allowed(image: MetadataImage, topic_name: str) -> bool:
    return image.topic_configs(topic_name).get("unclean.leader.election.enable") == "true"


def _in_replica_order(partition, members) -> list[int]:
    """Candidates in the partition's replica order: Kafka elects the first eligible replica."""
    return [r for r in partition.replicas if r in members]


def changes_for_fenced_broker(image: MetadataImage, node_id: int) -> list[Change]:
    return [change for change in iter_changes_for_fenced_broker(image, node_id) if change]


def iter_changes_for_fenced_broker(image: MetadataImage, node_id: int) -> Iterator[Change | None]:
    """Take a fenced broker out of every ISR and move its leaderships to in-sync replicas.

    As in Kafka, the last member of an ISR stays in it (the partition goes leaderless rather
    than losing the record of who has the data), and only unfenced in-sync replicas can lead
    unless the topic allows unclean election. Yields a change or None for every partition.
    """
    live = {b.node_id for b in image.brokers.values() if not b.fenced and b.node_id != node_id}
    for topic in image.topics.values():
        unclean = _unclean_allowed(image, topic.name)
        for index, partition in topic.partitions.items():
            if node_id not in partition.replicas:
                yield None
                continue
            isr = [r for r in partition.isr if r != node_id] or list(partition.isr)
            change = {"partition_id": index, "topic_id": topic.topic_id}
            if isr != partition.isr:
                change["isr"] = isr
            if partition.leader == node_id:
                candidates = _in_replica_order(partition, set(isr) & live)
                if not candidates and unclean:
                    candidates = _in_replica_order(partition, live)
                    if candidates:  # with no live replica at all the ISR keeps its last member
                        change["isr"] = candidates[:1]
                change["leader"] = candidates[0] if candidates else -1
            yield ("PartitionChangeRecord", change) if len(change) > 2 else None


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


def elect_leader(image: MetadataImage, topic_name: str, index: int, election_type: int
                 ) -> tuple[ErrorCode, tuple[str, dict] | None]:
    """One partition's election as Kafka's ReplicationControlManager.electLeader: (outcome, record).

    Preferred: the first replica leads again if it is unfenced and in sync. Unclean: only for a
    partition without a leader, a live in-sync replica or else any live replica (whose data
    becomes the partition's, so the ISR is reset to it).
    """
    topic = image.topics.get(topic_name)
    partition = topic.partitions.get(index) if topic else None
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    live = {b.node_id for b in image.brokers.values() if not b.fenced}
    change = {"partition_id": index, "topic_id": topic.topic_id}
    if election_type == PREFERRED:
        preferred = partition.replicas[0] if partition.replicas else -1
        if partition.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        if preferred not in live or preferred not in partition.isr:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
        change["leader"] = preferred
    else:
        if partition.leader >= 0:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        in_sync = _in_replica_order(partition, set(partition.isr) & live)
        candidates = in_sync or _in_replica_order(partition, live)
        if not candidates:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
        change["leader"] = candidates[0]
        if not in_sync:
            change["isr"] = candidates[:1]
    return ErrorCode.NONE, ("PartitionChangeRecord", change)


def imbalanced_leader_changes(image: MetadataImage) -> list[Change]:
    return [change for change in iter_imbalanced_leader_changes(image) if change]


def iter_imbalanced_leader_changes(image: MetadataImage) -> Iterator[Change | None]:
    """Give every partition whose preferred replica is live and in sync back to it
    (auto.leader.rebalance.enable). Yields a change or None for every partition."""
    for topic in image.topics.values():
        for index in topic.partitions:
            yield elect_leader(image, topic.name, index, PREFERRED)[1]


def move_leadership(image: MetadataImage, topic_name: str, index: int, target: int | None
                    ) -> tuple[ErrorCode, tuple[str, dict] | None]:
    """Hand a partition's leadership to another live in-sync replica (target, or the first in replica
    order): (outcome, record). The new leader also goes first in the replica list, as a reassignment
    that only reorders the replicas followed by a preferred election leaves it in Kafka, so that
    automatic leader balancing keeps it there rather than moving the leadership back.
    """
    topic = image.topics.get(topic_name)
    partition = topic.partitions.get(index) if topic else None
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if partition.adding_replicas or partition.removing_replicas:
        return ErrorCode.REASSIGNMENT_IN_PROGRESS, None
    live = {b.node_id for b in image.brokers.values() if not b.fenced}
    candidates = [r for r in _in_replica_order(partition, set(partition.isr) & live) if r != partition.leader]
    if target is not None:
        candidates = [target] if target in candidates else []
    if not candidates:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    leader = candidates[0]
    return ErrorCode.NONE, ("PartitionChangeRecord", {
        "partition_id": index, "topic_id": topic.topic_id, "leader": leader,
        "replicas": [leader, *(r for r in partition.replicas if r != leader)]})
