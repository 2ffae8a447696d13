"""OffsetFetch v0-10: committed offsets of one group (v0-7) or of several (v8+).

A null topic list asks for every committed offset of the group; -1 where nothing is committed.
Versions 0 and 1 have no group-level error code: a group error (NOT_COORDINATOR, ...) is answered
in every partition asked for, as Kafka's OffsetFetchRequest.getErrorResponse does. v10 names
topics by id. Offsets a transaction committed are not answered before the transaction commits;
with require_stable (v7+, KIP-447) a partition the group has such pending offsets for is answered
UNSTABLE_OFFSET_COMMIT, offset -1, in the partition (at every version, as Kafka does), and the
client asks again; without it, the offset committed before the transaction is answered. From v9
the fetch names the member: a KIP-848 consumer group answers an unknown member UNKNOWN_MEMBER_ID
and another epoch than the member's STALE_MEMBER_EPOCH, for the group. A share group's id is
answered GROUP_ID_NOT_FOUND, as Kafka answers it.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the group; a topic
asked for that may not be described is TOPIC_AUTHORIZATION_FAILED, and left out of a request for
every topic; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from cluster.formats.acls import DESCRIBE, GROUP, TOPIC
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = OffsetFetchRequest
RESPONSE = OffsetFetchResponse
VERSIONS = (0, 10)

OldTopic = RESPONSE.OffsetFetchResponseTopic
Group = RESPONSE.OffsetFetchResponseGroup


async def handle(broker, header, request):
    version = header.api_version
    if version < 8:
        wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
        error, offsets = _authorized_lookup(broker, header, request.group_id, wanted,
                                            version >= 7 and request.require_stable)
        if error and version < 2:
            offsets = [(topic, [(p, -1, -1, "", error) for p in partitions]) for topic, partitions in wanted or []]
        return RESPONSE[version](throttle_time_ms=0, error_code=error, topics=[
            OldTopic(name=topic, partitions=[OldTopic.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
                for p, o, e, m, c in parts]) for topic, parts in offsets])
    groups = []
    for group in request.groups:
        wanted = None if group.topics is None else [(_topic_name(broker, t, version), list(t.partition_indexes))
                                                     for t in group.topics]
        error, offsets = _authorized_lookup(broker, header, group.group_id, wanted, request.require_stable,
                                            (group.member_id, group.member_epoch) if version >= 9 else None)
        Topic = Group.OffsetFetchResponseTopics
        groups.append(Group(group_id=group.group_id, error_code=error, topics=[
            Topic(name=topic if version < 10 else None,
                  topic_id=_topic_id(broker, topic) if version >= 10 else None,
                  partitions=[Topic.OffsetFetchResponsePartitions(
                      partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
                      for p, o, e, m, c in parts]) for topic, parts in offsets]))
    return RESPONSE[version](throttle_time_ms=0, groups=groups)


def _topic_name(broker, topic, version):
    if version >= 10:
        info = broker.topic_by_id(topic.topic_id)
        return info.name if info else None
    return topic.name


def _topic_id(broker, name):
    info = broker.topic(name) if name else None
    return info.topic_id if info else None


def _authorized_lookup(broker, header, group_id: str, wanted, require_stable: bool, member=None):
    """_lookup, as Kafka authorizes it: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED),
    and on each topic: one asked for by name is TOPIC_AUTHORIZATION_FAILED, one among all the
    group's is left out."""
    if not authorizer.allowed(broker, header, DESCRIBE, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    error, offsets = _lookup(broker, group_id, wanted, require_stable, member)
    if broker.authorizer is None or not offsets:
        return error, offsets
    denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, [topic for topic, _ in offsets if topic is not None])
    if wanted is None:
        return error, [(topic, parts) for topic, parts in offsets if topic not in denied]
    return error, [(topic, [(p[0], -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts]
                    if topic in denied else parts) for topic, parts in offsets]


def _lookup(broker, group_id: str, wanted, require_stable: bool, member: tuple[str | None, int] | None = None):
    """(group error, [(topic, [(partition, offset, epoch, metadata, error)])]); -1 where nothing is committed."""
    coordinator = broker.groups
    error = coordinator.owns(group_id) or coordinator.share_group_refusal(group_id) \
        or (coordinator.check_fetch(group_id, *member) if member else ErrorCode.NONE)
    if error:
        return error, []
    committed = coordinator.committed(group_id)
    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            by_topic.setdefault(topic, []).append(partition)
        wanted = list(by_topic.items())
    found = []
    for topic, partitions in wanted:
        parts = []
        for partition in partitions:
            offset = committed.get((topic, partition))
            if require_stable and coordinator.has_pending(group_id, (topic, partition)):
                parts.append((partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif offset is None:
                parts.append((partition, -1, -1, "", ErrorCode.NONE))
            else:
                parts.append((partition, offset.offset, offset.leader_epoch, offset.metadata, ErrorCode.NONE))
        found.append((topic, parts))
    return ErrorCode.NONE, found
