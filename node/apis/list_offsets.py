"""ListOffsets: earliest, latest, max-timestamp, and offset-for-timestamp lookups."""
from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from cluster.errors import ErrorCode
from node.leadership import check_leader

REQUEST = ListOffsetsRequest
RESPONSE = ListOffsetsResponse
VERSIONS = (1, 11)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

TopicResponse = RESPONSE.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse


async def handle(broker, header, request):
    topics = []
    for topic in request.topics:
        partitions = [_lookup(broker, topic.name, part, header.api_version) for part in topic.partitions]
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=topics)


def _lookup(broker, topic: str, part, version: int):
    check = check_leader(broker, topic, part.partition_index, part.current_leader_epoch)
    if check.error:
        return PartitionResponse(partition_index=part.partition_index, error_code=check.error,
                                 timestamp=-1, offset=-1, leader_epoch=-1)
    partition_log = check.log
    timestamp, offset = -1, -1
    if part.timestamp == LATEST_TIMESTAMP:
        offset = partition_log.high_watermark
    elif part.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        offset = partition_log.log_start_offset
    elif part.timestamp == LATEST_TIERED_TIMESTAMP:
        offset = -1  # nothing is tiered
    elif part.timestamp == MAX_TIMESTAMP:
        timestamp, offset = partition_log.max_timestamp_and_offset()
    elif part.timestamp < 0:
        return PartitionResponse(partition_index=part.partition_index, error_code=ErrorCode.INVALID_REQUEST,
                                 timestamp=-1, offset=-1, leader_epoch=-1)
    else:
        found = partition_log.offset_for_timestamp(part.timestamp)
        if found is not None and found[0] < partition_log.high_watermark:
            offset, timestamp = found
    return PartitionResponse(partition_index=part.partition_index, error_code=ErrorCode.NONE,
                             timestamp=timestamp, offset=offset,
                             leader_epoch=check.info.leader_epoch if offset >= 0 else -1)
