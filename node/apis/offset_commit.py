"""OffsetCommit v0-10: offsets written to `__consumer_offsets` before they are acknowledged.

Version 0 carries no generation or member id: it commits as a client outside the group protocol
does (accepted while the group has no members). Version 1 names a commit timestamp per partition,
stored as the commit's time (what offset expiry counts from) unless it is -1, as in Kafka 3.9.
Metadata longer than offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE; v10 names topics
by id. A KIP-848 consumer group's member commits with its member epoch (v9+): another epoch is
STALE_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID, an older version UNSUPPORTED_VERSION; a
commit with epoch -1 from outside the group is accepted only while the group has no members.
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs READ on the group, and READ on each
topic (TOPIC_AUTHORIZATION_FAILED per partition); what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Differs from Kafka: Kafka kept version 0 commits in ZooKeeper, apart from the others; here they
are the group's offsets like every other version's.
"""
from __future__ import annotations

import logging
import time

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from cluster.formats.acls import GROUP, READ, TOPIC
from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError
from node.groups.records import CommittedOffset
from node.security import authorizer

REQUEST = OffsetCommitRequest
RESPONSE = OffsetCommitResponse
VERSIONS = (0, 10)

log = logging.getLogger(__name__)
Topic = RESPONSE.OffsetCommitResponseTopic
DEFAULT_TIMESTAMP = -1  # a version 1 partition without a timestamp of its own: the time of the commit


async def handle(broker, header, request):
    version = header.api_version
    refusal = authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    denied = _denied_topics(broker, header, request, version)
    error = broker.groups.owns(request.group_id) or broker.groups.check_commit(
        request.group_id, request.generation_id_or_member_epoch, request.member_id,
        request.group_instance_id if version >= 7 else None, version)
    now = int(time.time() * 1000)
    max_metadata = broker.config.get_int("offset.metadata.max.bytes")
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    results: list[tuple[object, str | None, list[tuple[int, ErrorCode]]]] = []
    for topic in request.topics:
        name = broker.topic_by_id(topic.topic_id).name if version >= 10 and broker.topic_by_id(topic.topic_id) \
            else getattr(topic, "name", None)
        codes = []
        for part in topic.partitions:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied and name in denied \
                else error or _partition_error(broker, name, part, max_metadata, version)
            if not code:
                accepted[(name, part.partition_index)] = CommittedOffset(
                    part.committed_offset, part.committed_leader_epoch if version >= 6 else -1,
                    part.committed_metadata or "", _commit_timestamp(part, version, now))
            codes.append((part.partition_index, code))
        results.append((topic, name, codes))
    if accepted:
        try:
            await broker.groups.commit(request.group_id, accepted)
        except GroupError as exc:
            broker.groups.refused(request.group_id, "offsets", exc.code)
            results = _failed(results, exc.code)
        except OSError as exc:
            log.error("cannot store offsets of group %s: %s", request.group_id, exc)
            results = _failed(results, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return RESPONSE[version](throttle_time_ms=0, topics=[
        Topic(name=name if version < 10 else None, topic_id=getattr(topic, "topic_id", None), partitions=[
            Topic.OffsetCommitResponsePartition(partition_index=p, error_code=c) for p, c in codes])
        for topic, name, codes in results])


def _denied_topics(broker, header, request, version: int) -> set[str]:
    """The topics committed to that the principal may not READ (none without an authorizer)."""
    if broker.authorizer is None:
        return set()
    if version < 10:
        return authorizer.denied(broker, header, READ, TOPIC, [t.name for t in request.topics])
    found = (broker.topic_by_id(t.topic_id) for t in request.topics)
    return authorizer.denied(broker, header, READ, TOPIC, [info.name for info in found if info is not None])


def _failed(results, error: ErrorCode):
    """Every partition the commit was to store answered with the error that refused the write."""
    return [(topic, name, [(p, c or error) for p, c in codes]) for topic, name, codes in results]


def _commit_timestamp(part, version: int, now: int) -> int:
    if version == 1 and part.commit_timestamp != DEFAULT_TIMESTAMP:
        return part.commit_timestamp
    return now


def _partition_error(broker, topic: str | None, part, max_metadata: int, version: int) -> ErrorCode:
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID if version >= 10 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if broker.partition(topic, part.partition_index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if part.committed_metadata is not None and len(part.committed_metadata.encode()) > max_metadata:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE
