"""TxnOffsetCommit v0-5: a transactional producer commits a group's offsets inside its transaction (KIP-98).

The offsets are written to the group's `__consumer_offsets` partition as one transactional batch
of the producer's id and epoch, acks=all, and stay pending, invisible to OffsetFetch, until the
transaction's COMMIT or ABORT marker reaches that partition (node.groups.coordinator). Errors
are Kafka's: an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION; NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS (COORDINATOR_NOT_AVAILABLE before v2, as Kafka answers clients
older than KAFKA-7296); from v3 a generation, member id or group instance id that is named is
checked against the classic group (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID;
generation -1 with no member skips the check); metadata longer than offset.metadata.max.bytes
is OFFSET_METADATA_TOO_LARGE for its partition; a producer epoch older than the producer's
pending commits is INVALID_PRODUCER_EPOCH. A group that does not exist is created.
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs WRITE on the transactional id, READ
on the group, READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition); what is refused gets
Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: the producer's transaction is not verified with its transaction coordinator
before the write (KIP-890), and an older producer epoch is told apart from the producer's
pending commits only, not from every batch the producer wrote to the partition.
"""
from __future__ import annotations

import logging
import time

from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from cluster.formats.acls import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError
from node.groups.records import CommittedOffset
from node.security import authorizer

REQUEST = TxnOffsetCommitRequest
RESPONSE = TxnOffsetCommitResponse
VERSIONS = (0, 5)

log = logging.getLogger(__name__)
Topic = RESPONSE.TxnOffsetCommitResponseTopic


async def handle(broker, header, request):
    version = header.api_version
    refusal = authorizer.refusal(broker, header, request, RESPONSE, WRITE, TRANSACTIONAL_ID, request.transactional_id) \
        or authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    denied = authorizer.denied(broker, header, READ, TOPIC, [t.name for t in request.topics])
    group_error = _group_error(broker, request, version)
    now = int(time.time() * 1000)
    max_metadata = broker.config.get_int("offset.metadata.max.bytes")
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    results: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
    for topic in request.topics:
        codes = []
        for part in topic.partitions:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied and topic.name in denied else \
                _unknown(broker, topic.name, part) or group_error or _too_large(part, max_metadata)
            if not code:
                accepted[(topic.name, part.partition_index)] = CommittedOffset(
                    part.committed_offset, part.committed_leader_epoch if version >= 2 else -1,
                    part.committed_metadata or "", now)
            codes.append((part.partition_index, code))
        results.append((topic.name, codes))
    if accepted:
        error = await _store(broker, request, accepted)
        if error:
            results = [(name, [(p, c or error) for p, c in codes]) for name, codes in results]
    return RESPONSE[version](throttle_time_ms=0, topics=[
        Topic(name=name, partitions=[Topic.TxnOffsetCommitResponsePartition(partition_index=p, error_code=c)
                                     for p, c in codes]) for name, codes in results])


def _group_error(broker, request, version: int) -> ErrorCode:
    error = broker.groups.owns(request.group_id)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and version < 2:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # clients before 2.0 fail on the loading error
    if error or version < 3:
        return error
    return broker.groups.check_transactional_commit(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id)


async def _store(broker, request, accepted: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
    """Write the offsets as the producer's; the error that refused the write, if any."""
    try:
        await broker.groups.commit_transactional(
            request.group_id, (request.producer_id, request.producer_epoch), accepted)
    except GroupError as exc:
        if exc.code != ErrorCode.INVALID_PRODUCER_EPOCH:  # a fenced producer is no failed write
            broker.groups.refused(request.group_id, "transactional offsets", exc.code)
        return exc.code
    except OSError as exc:
        log.error("cannot store transactional offsets of group %s: %s", request.group_id, exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE


def _unknown(broker, topic: str, part) -> ErrorCode:
    if broker.partition(topic, part.partition_index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _too_large(part, max_metadata: int) -> ErrorCode:
    if part.committed_metadata is not None and len(part.committed_metadata.encode()) > max_metadata:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE
