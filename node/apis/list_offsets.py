"""ListOffsets v0-11: earliest, latest, max-timestamp, and offset-for-timestamp lookups.

Version 0 (Burrow, clients pinned to brokers before 0.10.1) answers an array of up to
max_num_offsets offsets, newest first, as Kafka's legacy lookup does: the base offset of each
segment whose file was last modified at or before the timestamp, the log end when the active
segment holds data, and for consumers nothing above the high watermark (which takes the place of
whatever was above it). Only -1 (latest) and -2 (earliest) of the special timestamps exist there.

A read_committed client (isolation level 1, v2+) may know only what is stable: its latest offset
is the last stable offset, and a timestamp lookup finds nothing at or above it.

A topic the principal may not DESCRIBE (node.security.authorizer) is TOPIC_AUTHORIZATION_FAILED.

Differs from Kafka: no tiered storage, so earliest-local (-4) is the earliest offset and
latest-tiered (-5) finds none.
"""
from __future__ import annotations

import os

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from cluster.formats.acls import DESCRIBE, TOPIC
from cluster.formats.errors import ErrorCode
from node.leadership import check_leader
from node.security import authorizer

REQUEST = ListOffsetsRequest
RESPONSE = ListOffsetsResponse
VERSIONS = (0, 11)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
CONSUMER_REPLICA_ID = -1
FIRST_ISOLATION_VERSION = 2
READ_COMMITTED = 1

TopicResponse = RESPONSE.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse


async def handle(broker, header, request):
    from_client = request.replica_id == CONSUMER_REPLICA_ID
    topics = []
    read_committed = (from_client and header.api_version >= FIRST_ISOLATION_VERSION
                      and request.isolation_level == READ_COMMITTED)
    denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, [t.name for t in request.topics])
    for topic in request.topics:
        if denied and topic.name in denied:
            topics.append(TopicResponse(name=topic.name, partitions=[PartitionResponse(
                partition_index=part.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, timestamp=-1,
                offset=-1, leader_epoch=-1, old_style_offsets=[]) for part in topic.partitions]))
            continue
        partitions = [_legacy_lookup(broker, topic.name, part, header.api_version, from_client)
                      if header.api_version == 0 else
                      _lookup(broker, topic.name, part, header.api_version, from_client, read_committed)
                      for part in topic.partitions]
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=topics)


def _lookup(broker, topic: str, part, version: int, from_client: bool, read_committed: bool):
    check = check_leader(broker, topic, part.partition_index, part.current_leader_epoch)
    if check.error:
        return _answer(part, check.error)
    partition_log = check.log
    # Clients may know only what is committed (read_committed ones, what is stable); replicas and
    # tools asking as one, the whole log.
    if read_committed:
        last_fetchable = check.partition.last_stable_offset()
    else:
        last_fetchable = partition_log.high_watermark if from_client else partition_log.log_end_offset
    if part.timestamp == LATEST_TIMESTAMP:
        lagging = _lagging(check.partition, version, from_client)
        return _answer(part, lagging) if lagging else _answer(part, offset=last_fetchable, info=check.info)
    if part.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return _answer(part, offset=partition_log.log_start_offset, info=check.info)
    if part.timestamp == LATEST_TIERED_TIMESTAMP:
        return _answer(part)  # nothing is tiered
    if part.timestamp == MAX_TIMESTAMP:
        timestamp, offset = partition_log.max_timestamp_and_offset()
    elif part.timestamp < 0:
        return _answer(part, ErrorCode.INVALID_REQUEST)
    else:
        offset, timestamp = partition_log.offset_for_timestamp(part.timestamp) or (-1, -1)
    if 0 <= offset < last_fetchable:
        return _answer(part, timestamp=timestamp, offset=offset, info=check.info)
    # Nothing found below the high watermark: perhaps only because it lags this term's start.
    return _answer(part, _lagging(check.partition, version, from_client))


def _lagging(partition, version: int, from_client: bool) -> ErrorCode:
    """A new leader whose high watermark has not yet reached where its term began cannot say what
    is committed: clients are told to retry (Kafka's Partition.fetchOffsetForTimestamp)."""
    if not from_client or partition.log.high_watermark >= partition.epoch_start_offset:
        return ErrorCode.NONE
    return ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE


def _answer(part, error: ErrorCode = ErrorCode.NONE, timestamp: int = -1, offset: int = -1, info=None):
    return PartitionResponse(partition_index=part.partition_index, error_code=error, timestamp=timestamp,
                             offset=offset, leader_epoch=info.leader_epoch if info is not None and offset >= 0 else -1)


def _legacy_lookup(broker, topic: str, part, version: int, from_client: bool):
    if part.timestamp < EARLIEST_TIMESTAMP:
        return PartitionResponse(partition_index=part.partition_index, error_code=ErrorCode.UNSUPPORTED_VERSION,
                                 old_style_offsets=[])
    check = check_leader(broker, topic, part.partition_index)
    if check.error:
        return PartitionResponse(partition_index=part.partition_index, error_code=check.error, old_style_offsets=[])
    offsets = legacy_offsets_before(check.log, part.timestamp, part.max_num_offsets, broker.now_ms())
    high_watermark = check.log.high_watermark
    if from_client and any(offset > high_watermark for offset in offsets):
        offsets = [high_watermark] + [offset for offset in offsets if offset <= high_watermark]
    return PartitionResponse(partition_index=part.partition_index, error_code=ErrorCode.NONE,
                             old_style_offsets=offsets)


def legacy_offsets_before(partition_log, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
    """Kafka's UnifiedLog.legacyFetchOffsetsBefore: candidates are (segment base, file mtime) per
    segment, plus (log end, now) when the active segment is not empty; the answer walks back from
    the newest candidate at or before the timestamp."""
    segments = partition_log.segments
    candidates = [(max(s.base_offset, partition_log.log_start_offset), _modified_ms(s)) for s in segments]
    if segments[-1].size > 0:
        candidates.append((partition_log.log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(candidates) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = next((i for i in range(len(candidates) - 1, -1, -1) if candidates[i][1] <= timestamp), -1)
    count = max(0, min(max_num_offsets, start + 1))
    return sorted((candidates[start - j][0] for j in range(count)), reverse=True)


def _modified_ms(segment) -> int:
    try:
        return int(os.stat(segment.path(".log")).st_mtime * 1000)
    except OSError:
        return -1  # deleted by retention meanwhile: as old as can be
