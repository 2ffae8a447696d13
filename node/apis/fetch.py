"""Fetch v0-18: whole batches from the requested offsets, long-polling until min_bytes or max_wait.

Waiting is event-driven: the request parks a future on its partitions and the produce path
resolves it on append. Fetch sessions (KIP-227, node.fetch_sessions) decide which partitions a
request reads (an incremental one: every partition of its session) and which the answer carries
(an incremental one: those with news). Followers fetch here too; the leader's replication
throttle holds back a throttled replica's data.

Versions 0-3 predate magic 2: what was read is down-converted once the fetch is complete, to
magic 0 for v0-1 and magic 1 for v2-3 (cluster.formats.message_sets), as Kafka's
KafkaApis.maybeConvertFetchedData does, and only then; v4+ fetches never take that path. Kafka's
checks for those versions come with it: a topic with `compression.type=zstd` is
UNSUPPORTED_COMPRESSION_TYPE, one with `message.downconversion.enable=false` is
UNSUPPORTED_VERSION for consumers.

Record bytes are read from the segment once (one pread, kept as a memoryview; large reads stay on
disk for sendfile) and never pass through the response encoder: the answer of a flexible version
without tagged fields is written with struct (node.fetch_answers), any other is a
node.spliced_response.SplicedResponse; either way the server writes the record sets beside the
encoded fields.

A read_committed consumer (isolation level 1, v4+) reads up to the partition's last stable offset
(node.producer_state): nothing of a transaction still open, or ended by a marker not yet on the
in-sync replicas. Its answer lists the aborted transactions whose records it may read, from the
log's aborted-transaction index, so that the client drops them; every answer carries the LSO.

With an authorizer (node.security.authorizer), a follower needs CLUSTER_ACTION on the cluster and
a consumer READ on each topic; a partition refused is TOPIC_AUTHORIZATION_FAILED, as in Kafka.

Differs from Kafka: consumers always read from the leader (no preferred read replica, KIP-392).
A consumer over its consumer_byte_rate (node.security.quotas) gets the data it asked for with
throttle_time_ms set and its connection muted; Kafka answers it with no data.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from kafka.protocol.consumer import FetchRequest, FetchResponse

from cluster.formats import message_sets
from cluster.formats.compression import DecompressedTooLargeError
from cluster.formats.partition_log import OffsetOutOfRangeError
from cluster.formats.records import CorruptRecordError
from cluster.formats.acls import CLUSTER_ACTION, READ, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.runtime.timed_wait import result_within
from cluster.runtime import timeline
from node.fetch_stats import record_client_fetches
from node.security import authorizer
from node.leadership import check_leader, leader_endpoints
from node.fetch_answers import fetch_answer_pieces, writable
from node.spliced_response import EncodedResponse, SplicedResponse, marker
from node.wire_tuples import struct_array, struct_tuple

REQUEST = FetchRequest
RESPONSE = FetchResponse
VERSIONS = (0, 18)
LAST_MAGIC_0_VERSION = 1
FIRST_ISOLATION_VERSION = 4
READ_COMMITTED = 1
# What _read_all takes for `follower` when a consumer reads committed transactions only.
READ_COMMITTED_CONSUMER = -2
LAST_LEGACY_FORMAT_VERSION = 3
# A partition's read of at least this many bytes stays on disk and goes out with sendfile
# (node.socket_writes). Smaller ones are read: up to about 128 KiB the extra steps of a region (a
# descriptor dup, an emptied transport) cost as much as the copy saves (python -m benchmarks.fetch_send).
SENDFILE_FROM_BYTES = 256 << 10
# Errors whose partition answer carries the current leader (KIP-951), so clients re-route at once.
_NAMES_THE_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)

TopicResponse = RESPONSE.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData


@dataclass(slots=True)
class PartitionFetch:
    topic: str | None
    topic_id: object
    request: object
    error: ErrorCode = ErrorCode.NONE
    leader: tuple[int, int] | None = None
    diverging: tuple[int, int] | None = None  # (epoch, end offset) a follower must truncate to
    records: bytes = b""
    high_watermark: int = -1
    last_stable_offset: int = -1  # (-1: as the high watermark, for a follower or an error)
    log_start_offset: int = -1
    aborted: list | None = None  # read_committed: (producer id, first offset) of aborted transactions read
    throttled: bool = False  # a replica fetch under the leader's replication throttle
    held_back: bool = False  # ... that got no data this time because the throttle's bucket is spent
    follower_offset_taken: bool = False  # a follower's fetch offset counts once per request, as in Kafka


async def handle(broker, header, request):
    if timeline.ENABLED:
        timeline.mark("fetch started")
    version = header.api_version
    follower = _follower_id(request, version)
    context = broker.fetch_sessions.context(request, version, follower)
    if context.error:
        return RESPONSE[version](throttle_time_ms=0, error_code=context.error, session_id=0, responses=[])
    fetches = [_plan(broker, topic, part, version) for topic, part in context.partitions]
    if broker.authorizer is not None:
        _refuse_unauthorized(broker, header, fetches, follower)
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    # Legacy versions convert what they read, in memory.
    region_from = SENDFILE_FROM_BYTES if version > LAST_LEGACY_FORMAT_VERSION else None
    if follower < 0 and version >= FIRST_ISOLATION_VERSION and request.isolation_level == READ_COMMITTED:
        follower = READ_COMMITTED_CONSUMER
    while True:
        total = _read_all(broker, fetches, request.max_bytes, follower, region_from)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or any(f.error or f.diverging for f in fetches):
            break
        # A throttled follower gets its data once the bucket allows, not only at max_wait_ms.
        wait = min(remaining, broker.leader_throttle.wait_s()) if any(f.held_back for f in fetches) else remaining
        if timeline.ENABLED:
            timeline.mark("fetch parked")
        if not await _wait_for_data(broker, fetches, wait, context) and wait >= remaining:
            # Time is up: read again what may have changed unseen, and a session's partitions told of
            # news meanwhile (a follower's is not woken for high watermark moves: it hears of them now).
            # The request's own partitions too: news may have come after the wait ran out and before
            # this request ran again, and taking it from the session leaves it to this read alone.
            if context.session is not None:
                fetches += _woken(broker, context, version)
            _read_all(broker, fetches, request.max_bytes, follower, region_from)
            break
        if context.session is not None:
            fetches += _woken(broker, context, version)
    if version <= LAST_LEGACY_FORMAT_VERSION:
        await _down_convert(broker, fetches, version, follower)
    record_client_fetches(fetches, follower)
    session_id, answered = broker.fetch_sessions.answer(context, fetches)
    if timeline.ENABLED:
        timeline.mark("fetch answered")
    return _response(broker, answered, version, session_id, header.session.listener.name)


def _refuse_unauthorized(broker, header, fetches: list[PartitionFetch], follower: int) -> None:
    """As Kafka: a follower needs CLUSTER_ACTION, a consumer READ on each topic; each partition
    refused is TOPIC_AUTHORIZATION_FAILED."""
    if follower >= 0:
        denied = None if authorizer.allowed(broker, header, CLUSTER_ACTION) else {f.topic for f in fetches}
    else:
        denied = authorizer.denied(broker, header, READ, TOPIC, [f.topic for f in fetches if f.topic is not None])
    for fetch in fetches:
        if denied and fetch.topic in denied:
            fetch.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _woken(broker, context, version: int) -> list[PartitionFetch]:
    """The session's partitions with news that this request has not read yet, to read now."""
    return [_plan(broker, topic, part, version) for topic, part in context.take_woken()]


def _follower_id(request, version: int) -> int:
    """The fetching replica's node id, or -1 for consumers (ReplicaState from v15)."""
    if version >= 15:
        return request.replica_state.replica_id if request.replica_state is not None else -1
    return request.replica_id


def _plan(broker, topic, part, version) -> PartitionFetch:
    if version >= 13:
        info = broker.topic_by_id(topic.topic_id)
        fetch = PartitionFetch(info.name if info else None, topic.topic_id, part)
        if info is None:
            fetch.error = ErrorCode.UNKNOWN_TOPIC_ID
    else:
        info = broker.topic(topic.topic)
        fetch = PartitionFetch(topic.topic, info.topic_id if info else None, part)
    return fetch


# Errors a partition gets before it is read, which no read changes.
_DECIDED_BEFORE_READING = (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _read_all(broker, fetches: list[PartitionFetch], max_bytes: int, follower: int = -1,
              region_from: int | None = None) -> int:
    """Read every partition again from its fetch offset; returns the bytes gathered.

    A follower's fetch offset is its log end offset, which may move the high watermark; a
    follower reads up to the log end, consumers only up to the high watermark, read_committed
    ones (follower READ_COMMITTED_CONSUMER) up to the last stable offset.
    """
    total = 0
    for fetch in fetches:
        if fetch.error and fetch.error in _DECIDED_BEFORE_READING:
            continue
        check = check_leader(broker, fetch.topic, fetch.request.partition, fetch.request.current_leader_epoch)
        fetch.error = check.error
        fetch.records = b""
        if check.error:
            if check.error in _NAMES_THE_LEADER and check.info is not None:
                fetch.leader = (check.info.leader, check.info.leader_epoch)
            continue
        partition_log = check.partition.log
        limit = min(fetch.request.partition_max_bytes, max_bytes - total)
        max_offset = None
        stable = fetch.last_stable_offset = check.partition.last_stable_offset() if follower < 0 else -1
        if follower == READ_COMMITTED_CONSUMER:
            max_offset = stable
        elif follower >= 0:
            fetch.diverging = _divergence(partition_log, fetch.request)
            if fetch.diverging is not None:
                fetch.high_watermark = partition_log.high_watermark
                fetch.log_start_offset = partition_log.log_start_offset
                continue
            if not fetch.follower_offset_taken:  # (read again after a wait: new data, nothing new of the follower)
                check.partition.record_follower_offset(follower, fetch.request.fetch_offset, check.info,
                                                       getattr(fetch.request, "log_start_offset", -1))
                fetch.follower_offset_taken = True
            max_offset = partition_log.log_end_offset
            if _held_back(broker, fetch, follower, partition_log):
                continue
        try:
            result = partition_log.read(fetch.request.fetch_offset, max(limit, 1), max_offset=max_offset,
                                       region_from=region_from)
        except OffsetOutOfRangeError:
            fetch.error = ErrorCode.OFFSET_OUT_OF_RANGE
            fetch.high_watermark = partition_log.high_watermark
            fetch.log_start_offset = partition_log.log_start_offset
            continue
        # Only the first partition with data may exceed the limits (KIP-74), so that a
        # batch larger than max.partition.fetch.bytes can still be consumed.
        if total > 0 and len(result.records) > limit:
            fetch.records = b""
        else:
            fetch.records = result.records
        fetch.high_watermark = result.high_watermark
        fetch.log_start_offset = result.log_start_offset
        if follower == READ_COMMITTED_CONSUMER:
            fetch.aborted = _aborted_read(partition_log, fetch) if fetch.records else []
        total += len(fetch.records)
        if fetch.throttled:
            broker.leader_throttle.record(len(fetch.records))
    return total


def _aborted_read(partition_log, fetch: PartitionFetch) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions with records in what was read, up to
    the last stable offset (Kafka bounds it by the read's end; a wider list is harmless to clients)."""
    return [(entry.producer_id, entry.first_offset) for entry in partition_log.collect_aborted_transactions(
        fetch.request.fetch_offset, fetch.last_stable_offset)]


def _held_back(broker, fetch: PartitionFetch, follower: int, partition_log) -> bool:
    """A follower's throttled replica gets nothing while the leader's bucket is spent (Kafka's
    ReplicaManager.shouldLeaderThrottle); it is answered with the offsets alone."""
    fetch.throttled = broker.leader_throttle.applies((fetch.topic, fetch.request.partition), follower)
    fetch.held_back = fetch.throttled and broker.leader_throttle.exceeded()
    if fetch.held_back:
        fetch.high_watermark = partition_log.high_watermark
        fetch.log_start_offset = partition_log.log_start_offset
    return fetch.held_back


async def _down_convert(broker, fetches: list[PartitionFetch], version: int, follower: int) -> None:
    """Turn what each partition read into the legacy message set an old fetcher reads.

    Converting decodes every record, far more work per byte than anything else a fetch does;
    it runs on a worker thread so that the node keeps answering other clients meanwhile. What it converts was read already.
    """
    magic = 0 if version <= LAST_MAGIC_0_VERSION else 1
    to_convert = []
    for fetch in fetches:
        if fetch.error or fetch.topic is None:
            continue
        configs = broker.topic_configs(fetch.topic)
        if configs["compression.type"] == "zstd":
            _refuse(fetch, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        elif follower < 0 and configs["message.downconversion.enable"].lower() != "true":
            _refuse(fetch, ErrorCode.UNSUPPORTED_VERSION)
        elif fetch.records:
            to_convert.append(fetch)
    if not to_convert:
        return
    reads = [(bytes(f.records), f.request.fetch_offset) for f in to_convert]
    converted = await asyncio.to_thread(_convert_each, reads, magic)
    for fetch, records in zip(to_convert, converted):
        if isinstance(records, ErrorCode):
            _refuse(fetch, records)
        else:
            fetch.records = records


def _convert_each(reads: list[tuple[bytes, int]], magic: int) -> list[bytes | ErrorCode]:
    """Each (records, fetch offset) as a legacy message set, or the error that prevents it."""
    converted: list[bytes | ErrorCode] = []
    for records, fetch_offset in reads:
        try:
            converted.append(message_sets.down_convert(records, magic, fetch_offset))
        except message_sets.UnsupportedCompressionError:
            converted.append(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        except DecompressedTooLargeError:
            converted.append(ErrorCode.MESSAGE_TOO_LARGE)
        except CorruptRecordError:
            converted.append(ErrorCode.CORRUPT_MESSAGE)
    return converted


def _refuse(fetch: PartitionFetch, error: ErrorCode) -> None:
    """A partition answered with an error alone, as Kafka's FetchResponse.partitionResponse."""
    fetch.error = error
    fetch.records = b""
    fetch.high_watermark = fetch.log_start_offset = -1


def _divergence(partition_log, request) -> tuple[int, int] | None:
    """Where a follower's log stops matching ours (KIP-595 DivergingEpoch), or None.

    The follower names the epoch of its last batch; if our copy of that epoch ends before
    the follower's log does, it holds a tail this leader never had and must truncate.
    """
    last_epoch = request.last_fetched_epoch
    if last_epoch < 0:
        return None
    epoch, end_offset = partition_log.end_offset_for_epoch(last_epoch)
    if epoch == last_epoch and end_offset >= request.fetch_offset:
        return None
    return epoch, end_offset


async def _wait_for_data(broker, fetches: list[PartitionFetch], timeout: float, context) -> bool:
    if context.session is not None:
        return await context.wait(timeout)
    keys = [(f.topic, f.request.partition) for f in fetches if f.topic is not None]
    waiter = broker.replicas.new_waiter(keys)
    try:
        return await result_within(waiter, timeout, timed_out=False)
    finally:
        broker.replicas.drop_waiter(waiter, keys)


def _response(broker, fetches: list[PartitionFetch], version: int, session_id: int,
              listener: str) -> SplicedResponse | EncodedResponse:
    if writable(fetches, version):
        return fetch_answer_pieces(fetches, version, session_id)
    by_topic: dict = {}
    for fetch in fetches:
        by_topic.setdefault(fetch.topic_id if version >= 13 else fetch.topic, []).append(fetch)
    # Markers are numbered in the order the encoder writes them: topic by topic, which is not the
    # request's order when it interleaves topics (as followers' fetches do).
    record_sets: list = []
    topics = []
    name_or_id = "topic_id" if version >= 13 else "topic"
    for key, topic_fetches in by_topic.items():
        partitions = []
        for fetch in topic_fetches:
            records = fetch.records
            if records:
                record_sets.append(records)
                records = marker(len(record_sets) - 1)
            partitions.append(_partition_data(fetch, records))
        topics.append(struct_tuple(TopicResponse, version, {
            name_or_id: key, "partitions": struct_array(PartitionData, version, partitions)}))
    leaders = [f.leader[0] for f in fetches if f.leader]
    extra = {}
    endpoints = leader_endpoints(broker, leaders, listener) if leaders else []
    if endpoints:
        extra["node_endpoints"] = [RESPONSE.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints]
    response = RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=session_id,
                                 responses=topics, **extra)
    return SplicedResponse(response, record_sets, compact=RESPONSE.flexible_version_q(version))


def _partition_data(fetch: PartitionFetch, records) -> dict:
    """A partition's answer as PartitionData's fields (node.wire_tuples.struct_array builds it)."""
    values = {
        "partition_index": fetch.request.partition,
        "error_code": fetch.error,
        "high_watermark": fetch.high_watermark,
        "last_stable_offset": fetch.last_stable_offset if fetch.last_stable_offset >= 0 else fetch.high_watermark,
        "log_start_offset": fetch.log_start_offset,
        "aborted_transactions": None if fetch.aborted is None else [
            PartitionData.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
            for producer_id, first_offset in fetch.aborted],
        "preferred_read_replica": -1,
        # librdkafka reads a null record set as an invalid MessageSet size: always bytes.
        "records": records,
    }
    if fetch.diverging is not None:
        epoch, end_offset = fetch.diverging
        values["diverging_epoch"] = PartitionData.EpochEndOffset(epoch=epoch, end_offset=end_offset)
    if fetch.leader is not None:
        leader_id, leader_epoch = fetch.leader
        values["current_leader"] = PartitionData.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
    return values
