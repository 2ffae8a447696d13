"""DeleteRecords v0-2: the leader moves a partition's log start offset up to the given offset (-1:
the high watermark), deleting the segments wholly below it, and answers once every replica on a
live node has moved its own start there (the low watermark), or REQUEST_TIMED_OUT after
timeout_ms.

Followers learn the new start from their fetches and delete their segments below it. Refusals are
Kafka's: OFFSET_OUT_OF_RANGE beyond the high watermark or below -1, NOT_LEADER_OR_FOLLOWER off the
leader, UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION for a topic whose cleanup.policy lacks
`delete`, INVALID_TOPIC_EXCEPTION for internal topics.

With an authorizer (node.security.authorizer), the request needs DELETE on each topic; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: the new log start offset is checkpointed at once, not at the next
log.flush.start.offset.checkpoint.interval.ms, so a node killed right after keeps it.
"""
from __future__ import annotations

import asyncio

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from cluster.formats.acls import DELETE, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.runtime.timed_wait import result_within
from node.groups.placement import OFFSETS_TOPIC
from node.leadership import check_leader
from node.security import authorizer

REQUEST = DeleteRecordsRequest
RESPONSE = DeleteRecordsResponse
VERSIONS = (0, 2)

HIGH_WATERMARK = -1
INTERNAL_TOPICS = {OFFSETS_TOPIC, "__transaction_state"}
TopicResult = RESPONSE.DeleteRecordsTopicResult
PartitionResult = TopicResult.DeleteRecordsPartitionResult


async def handle(broker, header, request):
    denied = authorizer.denied(broker, header, DELETE, TOPIC, [t.name for t in request.topics])
    deleted = {(topic.name, part.partition_index): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, False)
               if denied and topic.name in denied else _delete(broker, topic.name, part.partition_index, part.offset)
               for topic in request.topics for part in topic.partitions}
    if any(moved for _, _, moved in deleted.values()):
        await broker.replicas.write_checkpoints_in_thread()
    waits = {key: _wait(broker, key, error, target, request.timeout_ms)
             for key, (error, target, _) in deleted.items()}
    outcomes = dict(zip(waits, await asyncio.gather(*waits.values())))
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=[
        TopicResult(name=topic.name, partitions=[
            PartitionResult(partition_index=part.partition_index, low_watermark=outcomes[key][1],
                            error_code=outcomes[key][0])
            for part in topic.partitions for key in [(topic.name, part.partition_index)]])
        for topic in request.topics])


def _delete(broker, topic: str, index: int, offset: int) -> tuple[ErrorCode, int, bool]:
    """The leader's part, done at once: (error, the offset asked for, whether the log start moved)."""
    if topic in INTERNAL_TOPICS:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1, False
    check = check_leader(broker, topic, index)
    if check.error:
        return check.error, -1, False
    partition_log = check.log
    if "delete" not in partition_log.config.cleanup_policy:
        return ErrorCode.POLICY_VIOLATION, -1, False
    target = partition_log.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > partition_log.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1, False
    moved = partition_log.advance_log_start_offset(target)
    if moved:
        check.partition.notify()  # followers' fetch sessions carry the new start
    return ErrorCode.NONE, target, moved


async def _wait(broker, key: tuple[str, int], error: ErrorCode, target: int,
                timeout_ms: int) -> tuple[ErrorCode, int]:
    """(error, low watermark) once every live replica starts at or after target (Kafka's
    DelayedDeleteRecords)."""
    partition = broker.replicas.partitions.get(key)
    if error or partition is None:
        return error or ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
    waiter = partition.low_watermark_waiter(target)
    try:
        error = await result_within(waiter, max(timeout_ms, 0) / 1000, timed_out=ErrorCode.REQUEST_TIMED_OUT)
    finally:
        partition.forget_low_watermark_waiter(waiter)
    return error, (partition.low_watermark() if error != ErrorCode.NOT_LEADER_OR_FOLLOWER else -1)
