"""Produce v0-13: validate batches, append them on the leader, answer per partition.

acks=0 gets no answer, acks=1 is answered once the leader has appended, acks=all once every
in-sync replica has the batch (and NOT_ENOUGH_REPLICAS when fewer than min.insync.replicas are
in sync). The handler never decodes magic-2 records (but for the keys of a compacted topic's, each
of which must have one: INVALID_RECORD): cluster.formats.records validates batch headers and CRCs and the log assigns offsets by rewriting each batch's base offset in place. A
NOT_LEADER_OR_FOLLOWER answer names the current leader (v10+).

Versions 0-2 carry legacy message sets (magic 0 and 1). Kafka checks nothing about them before
leadership; on the leader they are validated (CRC-32 of every message, compressed wrappers
included) and up-converted into one magic-2 batch by cluster.formats.message_sets, which is then
appended like any other. A payload with no whole message appends nothing and is answered without
error at offset -1, as Kafka answers it. Magic-2 batches are accepted in those versions too
(Kafka never refused them there), one batch per partition as always.

A transactional batch that would open its producer's transaction in a partition is first verified
with the transaction coordinator (KIP-890, node.transaction_verification): if the partition is not
part of the producer's open transaction, TRANSACTION_ABORTABLE (v11+) or INVALID_TXN_STATE;
NOT_ENOUGH_REPLICAS (retriable) while the coordinator cannot tell. A transactional batch in a request
that names no transactional id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing could verify it, and
no marker would ever end the transaction it opened. A control batch (a COMMIT or ABORT marker) is
INVALID_RECORD: only the transaction coordinator writes markers, as Kafka's LogValidator insists.

With an authorizer (node.security.authorizer), a transactional id needs WRITE (else every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and each topic WRITE (else its partitions are
TOPIC_AUTHORIZATION_FAILED), as Kafka checks them.

Client quotas (node.security.quotas) set throttle_time_ms.

Differs from Kafka: Kafka refuses a whole request holding a transactional batch without a
transactional id; here each partition whose batch is transactional is refused (real producers put
no other batch in such a request).
"""
from __future__ import annotations

import asyncio
import logging

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from cluster.formats import message_sets
from cluster.formats.compression import DecompressedTooLargeError
from cluster.formats.log_cleaner import has_keyless_record
from cluster.formats.records import (
    COMPRESSION_ZSTD, CorruptRecordError, compression_of, leading_batches, validate_batches,
)
from cluster.formats.acls import TOPIC, TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from cluster.runtime import timeline
from node import produce_answers, transaction_verification
from node.leadership import check_leader, leader_endpoints
from node.partition import Partition
from node.producer_state import SequenceError
from node.security import authorizer
from node.wire_tuples import struct_array, struct_tuple

REQUEST = ProduceRequest
RESPONSE = ProduceResponse
VERSIONS = (0, 13)
FIRST_MAGIC_2_VERSION = 3

log = logging.getLogger(__name__)

TopicResponse = RESPONSE.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


async def handle(broker, header, request):
    if timeline.ENABLED:
        timeline.mark("produce started")
    if request.acks not in (0, 1, -1):
        return _reply_all(request, header.api_version, ErrorCode.INVALID_REQUIRED_ACKS)
    refused = None
    if broker.authorizer is not None:
        refused = _unauthorized(broker, header, request)
        if refused is ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return _reply_all(request, header.api_version, refused)
    # (only a transactional producer names its transactional id: every other write skips this)
    if request.transactional_id:
        refused = {**(await _unverified(broker, request, header.api_version) or {}), **(refused or {})}
    leaders_named = []
    topics = []
    awaiting: list[tuple[dict, Partition, int]] = []
    for topic_data in request.topic_data:
        name, topic_id = _topic_of(broker, topic_data, header.api_version)
        partitions = []
        for data in topic_data.partition_data:
            if refused and (name, data.index) in refused:
                partitions.append(_error(data.index, refused[(name, data.index)]))
                continue
            answer, commit = _produce_partition(broker, name, data, request.acks, header.api_version, leaders_named,
                                                request.transactional_id)
            partitions.append(answer)
            if request.acks == -1 and commit is not None:
                awaiting.append((answer, *commit))
        topics.append((topic_data.name if header.api_version < 13 else None, topic_id, partitions))
    if request.acks == 0:
        return None
    if timeline.ENABLED:
        timeline.mark("produce appended")
    await _wait_for_in_sync_replicas(awaiting, request.timeout_ms)
    if timeline.ENABLED:
        timeline.mark("produce committed")
    return response_of(topics, header.api_version, leader_endpoints(broker, leaders_named, header.session.listener.name) if leaders_named else [])


def _unauthorized(broker, header, request) -> dict | ErrorCode:
    """As Kafka: WRITE on the transactional id, if one is named (else the whole request is refused),
    and WRITE on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED)."""
    if request.transactional_id and not authorizer.allowed(broker, header, WRITE, TRANSACTIONAL_ID,
                                                           request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    named = [(_topic_of(broker, t, header.api_version)[0], t) for t in request.topic_data]
    denied = authorizer.denied(broker, header, WRITE, TOPIC, [name for name, _ in named if name is not None])
    return {(name, p.index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for name, t in named if name in denied for p in t.partition_data}


async def _unverified(broker, request, version: int) -> dict | None:
    """Partitions whose transactional batch the transaction coordinator did not confirm; None when
    no batch is transactional (checked from the first batch's header, before anything else)."""
    writes = [((name, data.index), data.records) for topic_data in request.topic_data
              for name in (_topic_of(broker, topic_data, version)[0],)
              for data in topic_data.partition_data if transaction_verification.transactional_producer(data.records)]
    if not writes:
        return None
    return await transaction_verification.refusals(broker, request.transactional_id, writes, version)


def response_of(topics: list[tuple[str | None, object, list[dict]]], version: int, endpoints: list):
    """The Produce answer: per topic (name, id, each partition's answer as PartitionResponse's fields).
    Written with struct (node.produce_answers) unless it carries a tagged field or record errors."""
    if produce_answers.writable(topics, version, endpoints):
        return produce_answers.produce_answer(topics, version)
    responses = [struct_tuple(TopicResponse, version, {
                     "name": name, "topic_id": topic_id,
                     "partition_responses": struct_array(PartitionResponse, version, answers)})
                 for name, topic_id, answers in topics]
    extra = {}
    if endpoints:
        extra["node_endpoints"] = [RESPONSE.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints]
    return RESPONSE[version](responses=responses, throttle_time_ms=0, **extra)


_COMMIT_FAILURES = {
    ErrorCode.REQUEST_TIMED_OUT: "the in-sync replicas did not acknowledge in time",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "written, but fewer than min.insync.replicas replicas are in sync",
}


async def _wait_for_in_sync_replicas(awaiting, timeout_ms: int) -> None:
    """acks=all: answer once every in-sync replica has the batch (a purgatory of futures)."""
    if not awaiting:
        return
    # Registered before anything else runs, in the same step as the appends.
    waiters = [(partition, partition.commit_waiter(next_offset)) for _, partition, next_offset in awaiting]
    waits = [partition.wait_for_commit(waiter, timeout_ms / 1000) for partition, waiter in waiters]
    # (one partition, the usual case, is awaited directly: gather would make it a task of its own)
    outcomes = [await waits[0]] if len(waits) == 1 else await asyncio.gather(*waits)
    for (answer, _, _), error in zip(awaiting, outcomes):
        if error:
            answer["error_code"] = error
            answer["error_message"] = _COMMIT_FAILURES.get(error)


def _topic_of(broker, topic_data, version):
    """(topic name or None, topic id) for name-addressed (v<13) or id-addressed (v13+) requests."""
    if version >= 13:
        info = broker.topic_by_id(topic_data.topic_id)
        return (info.name if info else None), topic_data.topic_id
    info = broker.topic(topic_data.name)
    return topic_data.name, (info.topic_id if info else None)


def _produce_partition(broker, topic: str | None, data, acks: int, version: int, leaders_named: list[int],
                       transactional_id: str | None):
    """(partition response, (the partition, the offset its high watermark must reach for acks=all) or None)."""
    index = data.index
    if topic is None:
        return _error(index, ErrorCode.UNKNOWN_TOPIC_ID), None
    check = check_leader(broker, topic, index)
    if check.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return _error(index, check.error), None
    raw = data.records or b""
    records, invalid = _one_batch(raw, version) if version >= FIRST_MAGIC_2_VERSION else (None, None)
    if invalid is not None:
        return _error(index, *invalid), None
    if check.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and check.info is not None:
        leaders_named.append(check.info.leader)
        return _error(index, check.error, leader=(check.info.leader, check.info.leader_epoch)), None
    if check.error:
        return _error(index, check.error), None
    configs = broker.topic_configs(topic)
    max_bytes = int(configs["max.message.bytes"])
    if version < FIRST_MAGIC_2_VERSION:
        records, invalid = _old_version_records(raw, configs, max_bytes)
        if invalid is not None:
            return _error(index, *invalid), None
        if records is None:
            return _success(index, -1, check.log), None
    if len(records) > max_bytes:
        message = f"record batch exceeds max.message.bytes {max_bytes}"
        return _error(index, ErrorCode.MESSAGE_TOO_LARGE, message), None
    if "compact" in configs["cleanup.policy"]:
        refused = _keyless(records, topic, index)
        if refused:
            return _error(index, *refused), None
    if acks == -1 and len(check.info.isr) < check.partition.effective_min_isr(check.info, configs):
        return _error(index, ErrorCode.NOT_ENOUGH_REPLICAS), None
    return _append_as_leader(broker, topic, index, check, records, transactional_id)


def _append_as_leader(broker, topic: str, index: int, check, records: bytes, transactional_id: str | None):
    """Append a validated partition's batch on this leader, unless an idempotent producer already
    wrote it: (partition response, (the partition, the offset its high watermark must reach) or None)."""
    try:
        batches = validate_batches(records)
        if transactional_id is None and batches[0][1].is_transactional:
            return _error(index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                          "transactional records in a request without a transactional id"), None
        if batches[0][1].is_control:  # (markers are the coordinator's to write: node.transaction_markers)
            return _error(index, ErrorCode.INVALID_RECORD,
                          f"Clients are not allowed to write control records in topic partition {topic}-{index}"), None
        producers = check.partition.producers
        duplicate = _duplicate_of(producers, batches)
        if duplicate is not None:
            header = batches[0][1]
            log.info("%s-%d: producer %d epoch %d sequences %d+%d already written at offset %d", topic, index,
                     header.producer_id, header.producer_epoch, header.base_sequence, header.last_offset_delta,
                     duplicate[0])
            # acks=all: answered once the whole original batch is on the in-sync replicas.
            return _success(index, duplicate[0], check.log), (check.partition, duplicate[1] + 1)
        for _, header in batches:
            if header.producer_id >= 0:
                producers.check(header)
        if timeline.ENABLED:
            timeline.mark("produce validated")
        appended = check.log.append(records, leader_epoch=check.info.leader_epoch, now_ms=broker.now_ms(),
                                    batches=batches)
        if timeline.ENABLED:
            timeline.mark("log appended")
    except SequenceError as exc:
        log.info("%s-%d: producer %d refused: %s", topic, index, batches[0][1].producer_id, exc)
        return _error(index, exc.code, str(exc)), None
    except CorruptRecordError as exc:
        return _error(index, ErrorCode.CORRUPT_MESSAGE, str(exc)), None
    except OSError as exc:
        log.error("cannot append to %s-%d: %s", topic, index, exc)
        return _error(index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc)), None
    _remember_sequences(producers, batches, appended.first_offset)
    check.partition.appended_as_leader(check.info)
    return {"index": index, "error_code": ErrorCode.NONE, "base_offset": appended.first_offset,
            "log_append_time_ms": appended.log_append_time, "log_start_offset": appended.log_start_offset,
            "record_errors": [], "error_message": None}, (check.partition, appended.last_offset + 1)


def _one_batch(records, version: int) -> tuple[memoryview | None, tuple[ErrorCode, str] | None]:
    """(the one record batch a partition's records must be, or why they are refused), checked before
    anything else as Kafka's ProduceRequest.validateRecords does. Bytes after that batch that do not
    make a whole one are dropped, as Kafka trims them."""
    try:
        batches = leading_batches(records)
    except CorruptRecordError as exc:
        return None, (ErrorCode.CORRUPT_MESSAGE, str(exc))
    if not batches:
        return None, (ErrorCode.INVALID_RECORD, "a partition's records must hold one whole record batch")
    size, magic = batches[0]
    if magic != 2:
        return None, (ErrorCode.INVALID_RECORD, f"only magic 2 record batches are accepted, not magic {magic}")
    if FIRST_MAGIC_2_VERSION <= version < 7 and compression_of(records) == COMPRESSION_ZSTD:
        return None, (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"zstd needs Produce v7 or later, not v{version}")
    if len(batches) > 1:
        return None, (ErrorCode.INVALID_RECORD, "exactly one record batch per partition is allowed")
    return memoryview(records)[:size], None


def _old_version_records(raw, configs, max_bytes: int):
    """(the magic-2 batch to append for a Produce v0-2 payload, or None when it holds no whole
    message; or why it is refused), validated on the leader as Kafka's log does it."""
    try:
        magic = message_sets.first_magic(raw)
        if magic is None:
            return None, None
        if magic == 2:
            return _one_batch(raw, 0)
        log_append_time = configs["message.timestamp.type"] == "LogAppendTime"
        converted = message_sets.up_convert(raw, log_append_time_topic=log_append_time)
    except CorruptRecordError as exc:
        return None, (ErrorCode.CORRUPT_MESSAGE, str(exc))
    except message_sets.InvalidRecordError as exc:
        return None, (ErrorCode.INVALID_RECORD, str(exc))
    except message_sets.InvalidTimestampError as exc:
        return None, (ErrorCode.INVALID_TIMESTAMP, str(exc))
    except DecompressedTooLargeError as exc:
        return None, (ErrorCode.MESSAGE_TOO_LARGE, str(exc))
    if converted.largest_message > max_bytes:
        return None, (ErrorCode.MESSAGE_TOO_LARGE, f"a message exceeds max.message.bytes {max_bytes}")
    return converted.batch, None


def _keyless(records, topic: str, index: int) -> tuple[ErrorCode, str] | None:
    """A compacted topic's records each need a key (the one per-record look of this path, for
    compacted topics only, as Kafka's LogValidator)."""
    try:
        if not has_keyless_record(records, message_sets.MAX_DECOMPRESSED_BYTES):
            return None
    except (CorruptRecordError, IndexError, ValueError) as exc:
        return ErrorCode.CORRUPT_MESSAGE, str(exc) or "a record runs past the end of its batch"
    except DecompressedTooLargeError as exc:
        return ErrorCode.MESSAGE_TOO_LARGE, str(exc)
    return (ErrorCode.INVALID_RECORD,
            f"Compacted topic cannot accept message without key in topic partition {topic}-{index}.")


def _duplicate_of(producers, batches) -> tuple[int, int] | None:
    """(first, last) offsets of an idempotent batch that was already written (a client retry)."""
    if len(batches) != 1 or batches[0][1].producer_id < 0:
        return None
    return producers.find_duplicate(batches[0][1])


def _remember_sequences(producers, batches, first_offset: int) -> None:
    offset = first_offset
    for _, header in batches:
        if header.producer_id >= 0:
            producers.record(header, offset)
        offset += header.last_offset_delta + 1


def _success(index: int, base_offset: int, partition_log) -> dict:
    return {"index": index, "error_code": ErrorCode.NONE, "base_offset": base_offset, "log_append_time_ms": -1,
            "log_start_offset": partition_log.log_start_offset, "record_errors": [], "error_message": None}


def _error(index: int, code: ErrorCode, message: str | None = None, leader: tuple[int, int] | None = None) -> dict:
    answer = {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
              "record_errors": [], "error_message": message}
    if leader is not None:
        answer["current_leader"] = PartitionResponse.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
    return answer


def _reply_all(request, version, code: ErrorCode):
    topics = [(t.name if version < 13 else None, getattr(t, "topic_id", None),
               [_error(p.index, code) for p in t.partition_data]) for t in request.topic_data]
    return response_of(topics, version, [])
