"""OffsetForLeaderEpoch v0-4: where a leader epoch ends in the leader's log.

Consumers (librdkafka since KIP-320) ask after a leader change to check that their position is
still on the log; followers may ask to find where to truncate (ours use Fetch's DivergingEpoch).
Versions 0-1 name no current leader epoch, so nothing is fenced, and version 0 answers the end
offset without its epoch. A replica id of -2 (v3+) may ask any replica, not only the leader.
With an authorizer, CLUSTER_ACTION on the cluster allows every topic, else each needs DESCRIBE
(TOPIC_AUTHORIZATION_FAILED), as in Kafka.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from cluster.formats.acls import CLUSTER_ACTION, DESCRIBE, TOPIC
from cluster.formats.errors import ErrorCode
from node.leadership import check_leader
from node.security import authorizer

REQUEST = OffsetForLeaderEpochRequest
RESPONSE = OffsetForLeaderEpochResponse
VERSIONS = (0, 4)

DEBUGGING_REPLICA_ID = -2  # may ask any replica, not only the leader (Kafka's DEBUGGING_REPLICA_ID)

TopicResult = RESPONSE.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset


async def handle(broker, header, request):
    any_replica = header.api_version >= 3 and request.replica_id == DEBUGGING_REPLICA_ID
    denied = _denied(broker, header, request)
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=[
        TopicResult(topic=topic.topic, partitions=[
            _refused(p) if denied and topic.topic in denied else _end_offset(broker, topic.topic, p, any_replica)
            for p in topic.partitions])
        for topic in request.topics])


def _denied(broker, header, request) -> set[str]:
    """As Kafka: CLUSTER_ACTION on the cluster allows every topic, else each needs DESCRIBE."""
    if broker.authorizer is None or authorizer.allowed(broker, header, CLUSTER_ACTION):
        return set()
    return authorizer.denied(broker, header, DESCRIBE, TOPIC, [t.topic for t in request.topics])


def _refused(request):
    return EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=request.partition,
                          leader_epoch=-1, end_offset=-1)


def _end_offset(broker, topic: str, request, any_replica: bool):
    check = check_leader(broker, topic, request.partition, request.current_leader_epoch)
    partition_log = check.log or (broker.replicas.get_log(topic, request.partition) if any_replica else None)
    if check.error and not (any_replica and check.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and partition_log):
        return EpochEndOffset(error_code=check.error, partition=request.partition, leader_epoch=-1, end_offset=-1)
    epoch, end_offset = partition_log.end_offset_for_epoch(request.leader_epoch)
    return EpochEndOffset(error_code=ErrorCode.NONE, partition=request.partition, leader_epoch=epoch,
                          end_offset=end_offset)
