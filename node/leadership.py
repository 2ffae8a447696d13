"""Checks shared by the partition APIs: is this node the leader, at the epoch the client knows?"""
from __future__ import annotations

from dataclasses import dataclass

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.partition_log import PartitionLog
from node.partition import Partition


@dataclass(slots=True)
class LeaderCheck:
    error: ErrorCode
    info: PartitionInfo | None = None
    partition: Partition | None = None  # the hosted partition, when this node leads it at that epoch

    @property
    def log(self) -> PartitionLog | None:
        return self.partition.log if self.partition is not None else None


def check_leader(broker, topic: str, partition: int, current_leader_epoch: int = -1) -> LeaderCheck:
    info = broker.partition(topic, partition)
    if info is None:
        return LeaderCheck(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if broker.node_id not in info.replicas:
        # Not hosted here: the client's epoch says nothing about this node (Kafka's getPartitionOrError).
        return LeaderCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER, info)
    if current_leader_epoch >= 0:
        if current_leader_epoch < info.leader_epoch:
            return LeaderCheck(ErrorCode.FENCED_LEADER_EPOCH, info)
        if current_leader_epoch > info.leader_epoch:
            return LeaderCheck(ErrorCode.UNKNOWN_LEADER_EPOCH, info)
    if info.leader != broker.node_id:
        return LeaderCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER, info)
    hosted = broker.replicas.partitions.get((topic, partition))
    if hosted is None or hosted.leader_epoch != info.leader_epoch:
        # Led here by the image but not yet opened, or this term not yet taken: the metadata is
        # still being applied.
        return LeaderCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER, info)
    return LeaderCheck(ErrorCode.NONE, info, hosted)


def leader_endpoints(broker, leader_ids, listener: str) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of each known leader on `listener`, for KIP-951 NodeEndpoints."""
    found = []
    for node_id in sorted(set(leader_ids)):
        endpoint = broker.endpoint_of(node_id, listener) if node_id >= 0 else None
        if endpoint:
            found.append((node_id, *endpoint))
    return found
