"""ShareFetch v1: a share group member acquires records of the partitions this node leads (KIP-932).

The share session (node.share.sessions) decides which partitions the request fetches. The
acknowledgements it carries are applied first (node.share.partition; written through the
persister before they count), then each partition's share-partition acquires whole log batches
from its first available offset, up to MaxRecords in all (a batch may overshoot it) and MaxBytes;
the log is read only as far as MaxRecords offsets from there, in chunks sized by them.
The answer carries the batches read from the log and, apart, the offset ranges acquired with their
delivery counts: the client delivers those alone, and owns them until
AcquisitionLockTimeoutMs runs out. With nothing to acquire the request waits up to MaxWaitMs,
event-driven: woken by appends to its partitions and by records made available again.
Epoch -1 acknowledges, then releases what the member still holds and closes the session. Epoch 0
(a session opening) first checks the share-partitions loaded here against the persister, so that
one whose state was deleted or reset by an admin meanwhile is read again.

Membership is not checked here: the group coordinator assigns partitions, the leader serves any
member id, as Kafka's does. A partition led elsewhere is answered NOT_LEADER_OR_FOLLOWER with its
leader and NodeEndpoints.

With an authorizer (node.security.authorizer), the request needs READ on the group, and READ on each
topic (TOPIC_AUTHORIZATION_FAILED per partition, acknowledgements included); what is refused gets
Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: MinBytes counts as 1 (the answer goes as soon as anything is acquired);
share.isolation.level read_committed is not applied (records are read up to the high watermark);
no quotas, so ThrottleTimeMs is 0.
"""
from __future__ import annotations

import time

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import GROUP, READ
from cluster.formats.errors import ErrorCode
from cluster.formats.partition_log import OffsetOutOfRangeError
from cluster.formats.records import iter_batch_headers
from cluster.runtime.timed_wait import result_within
from node.apis import schemas
from node.group_configs import group_setting_int
from node.security import authorizer
from node.share import requests as share_requests
from node.share.requests import Target, acknowledgement_batches
from node.share.sessions import INITIAL_EPOCH
from node.spliced_response import SplicedResponse, marker


class ShareFetchRequest(ApiMessage, load_json=schemas):
    pass


class ShareFetchResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ShareFetchRequest
RESPONSE = ShareFetchResponse
VERSIONS = (1, 1)

TopicResponse = RESPONSE.ShareFetchableTopicResponse
PartitionData = TopicResponse.PartitionData
# How much of the log a fetch reads first for each record it may acquire (more is read if short).
READ_BYTES_PER_RECORD = 1024
MIN_READ_BYTES = 64 * 1024


class PartitionAnswer:
    __slots__ = ("target", "records", "acquired", "ack_error")

    def __init__(self, target: Target):
        self.target = target
        self.records = b""
        self.acquired: list[tuple[int, int, int]] = []
        self.ack_error: ErrorCode | None = None


async def handle(broker, header, request):
    version = header.api_version
    if not request.group_id or not request.member_id:
        return _error(version, ErrorCode.INVALID_REQUEST)
    if not authorizer.allowed(broker, header, READ, GROUP, request.group_id):
        return _error(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    requested = [(topic.topic_id, p.partition_index) for topic in request.topics for p in topic.partitions]
    acknowledgements = {(topic.topic_id, p.partition_index): acknowledgement_batches(p)
                        for topic in request.topics for p in topic.partitions if p.acknowledgement_batches}
    forgotten = [(topic.topic_id, index) for topic in request.forgotten_topics_data for index in topic.partitions]
    context = broker.share_sessions.fetch_context(request.group_id, request.member_id, request.share_session_epoch,
                                                  requested, forgotten, bool(acknowledgements))
    if context.error:
        return _error(version, context.error)
    denied = authorizer.denied_topic_ids(broker, header, READ, [key[0] for key in (*context.partitions,
                                                                                    *acknowledgements)])
    acked = await _acknowledge(broker, request, acknowledgements, denied)
    if context.final:
        await share_requests.close_session(broker, context.session)
        answers = []
    else:
        if request.share_session_epoch == INITIAL_EPOCH:
            await broker.share_partitions.check_state(request.group_id, context.partitions)
        answers = [PartitionAnswer(target) for target in await share_requests.find_all(
            broker, request.group_id, [key for key in context.partitions if key[0] not in denied])]
        answers += [PartitionAnswer(Target(*key, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    for key in context.partitions if key[0] in denied]
        await _acquire_or_wait(broker, request, answers)
    return _response(broker, request, version, answers, acked, header.session.listener.name)


async def _acknowledge(broker, request, acknowledgements: dict, denied: set) -> dict:
    """The acknowledgements applied, but those of topics the principal may not READ, which are
    TOPIC_AUTHORIZATION_FAILED."""
    allowed = {key: batches for key, batches in acknowledgements.items() if key[0] not in denied}
    acked = await share_requests.acknowledge(broker, request.group_id, request.member_id, allowed)
    for key in acknowledgements.keys() - allowed.keys():
        refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        acked[key] = (refused, Target(*key, error=refused))
    return acked


async def _acquire_or_wait(broker, request, answers: list[PartitionAnswer]) -> None:
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    while True:
        await _acquire_all(request, answers)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or any(a.acquired or a.target.error for a in answers) or not answers:
            return
        await _wait_for_records(broker, answers, remaining)


async def _acquire_all(request, answers: list[PartitionAnswer]) -> None:
    """Each partition acquires in turn, within what the request still allows."""
    records_left = request.max_records if request.max_records > 0 else 1 << 31
    bytes_left = request.max_bytes if request.max_bytes > 0 else 1 << 31
    for answer in answers:
        if answer.target.error or records_left <= 0 or bytes_left <= 0:
            continue
        share_partition = answer.target.share_partition
        async with share_partition.mutex:
            if share_partition.closed or not share_partition.can_acquire():
                continue
            data, headers = _read(answer.target.hosted.log, share_partition, records_left, bytes_left)
            if not headers:
                continue
            acquired = share_partition.acquire(request.member_id,
                                               [(h.base_offset, h.last_offset) for _, h in headers], records_left)
        if acquired:
            answer.acquired = acquired
            answer.records = _acquired_batches(data, headers, acquired[0][0], acquired[-1][1])
            records_left -= sum(last - first + 1 for first, last, _ in acquired)
            bytes_left -= len(answer.records)


def _read(partition_log, share_partition, max_records: int, max_bytes: int):
    """(data, [(position, header)]): whole batches from the share-partition's first available offset,
    below the high watermark, up to the batch holding the max_records-th offset from there and
    within max_bytes. Read a chunk at a time, the first sized for max_records, so that the bytes
    read and the headers walked follow what can be acquired, not MaxBytes (clients ask for 50 MB)."""
    share_partition.move_to_log_start(partition_log.log_start_offset)
    offset = share_partition.next_fetch_offset()
    stop = min(partition_log.high_watermark, offset + max_records)
    chunk_bytes = max(MIN_READ_BYTES, max_records * READ_BYTES_PER_RECORD)
    chunks, headers, total = [], [], 0
    while offset < stop and total < max_bytes:
        try:
            data = partition_log.read(offset, min(chunk_bytes, max_bytes - total), max_offset=stop).records
        except OffsetOutOfRangeError:  # (past a log end a new leader truncated: nothing there to acquire)
            break
        read = [(total + position, header) for position, header in iter_batch_headers(data)]
        if not read or (chunks and total + len(data) > max_bytes):  # (a read gives one batch at least)
            break
        chunks.append(data)
        headers.extend(read)
        total += len(data)
        offset = read[-1][1].last_offset + 1
        chunk_bytes *= 2
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), headers


def _acquired_batches(data, headers, first: int, last: int):
    """The read cut to the batches holding acquired offsets."""
    start = end = None
    for position, header in headers:
        if header.last_offset < first:
            continue
        if header.base_offset > last:
            break
        if start is None:
            start = position
        end = position + header.size
    return data[start:end] if start is not None else b""


async def _wait_for_records(broker, answers: list[PartitionAnswer], timeout: float) -> None:
    """Until a partition has new data or a share-partition records made available, or timeout."""
    keys = [(answer.target.hosted.key) for answer in answers if answer.target.hosted is not None]
    waiter = broker.replicas.new_waiter(keys)
    share_partitions = [a.target.share_partition for a in answers if a.target.share_partition is not None]
    for share_partition in share_partitions:
        share_partition.add_waiter(waiter)
    try:
        await result_within(waiter, timeout, timed_out=False)
    finally:
        broker.replicas.drop_waiter(waiter, keys)
        for share_partition in share_partitions:
            share_partition.drop_waiter(waiter)


def _error(version: int, error: ErrorCode):
    return RESPONSE[version](throttle_time_ms=0, error_code=error, error_message=None,
                             acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])


def _response(broker, request, version: int, answers: list[PartitionAnswer], acked: dict,
              listener: str) -> SplicedResponse:
    by_key = {(a.target.topic_id, a.target.index): a for a in answers}
    for key, (error, target) in acked.items():
        answer = by_key.get(key)
        if answer is None:
            answer = by_key[key] = PartitionAnswer(target)
        answer.ack_error = error
    record_sets: list = []
    topics: dict = {}
    for answer in by_key.values():
        records = answer.records
        if records:
            record_sets.append(records)
            records = marker(len(record_sets) - 1)
        topics.setdefault(answer.target.topic_id, []).append(_partition_data(answer, records))
    response = RESPONSE[version](
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        acquisition_lock_timeout_ms=group_setting_int(broker, request.group_id, "share.record.lock.duration.ms"),
        responses=[TopicResponse(topic_id=topic_id, partitions=partitions) for topic_id, partitions in topics.items()],
        node_endpoints=share_requests.node_endpoints(broker, RESPONSE, [a.target for a in by_key.values()],
                                                      listener))
    return SplicedResponse(response, record_sets, compact=True)


def _partition_data(answer: PartitionAnswer, records) -> PartitionData:
    target = answer.target
    leader_id, leader_epoch = target.leader or (-1, -1)
    return PartitionData(
        partition_index=target.index, error_code=target.error, error_message=None,
        acknowledge_error_code=answer.ack_error or ErrorCode.NONE, acknowledge_error_message=None,
        current_leader=PartitionData.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
        records=records,
        acquired_records=[PartitionData.AcquiredRecords(first_offset=first, last_offset=last, delivery_count=count)
                          for first, last, count in answer.acquired])
