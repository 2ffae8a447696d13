"""What the share-group offset admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) ask of the group coordinator: whether it coordinates the group here and
the group is a share group, and whether the group has members. The share-partitions' offsets
themselves are read and changed through the persister (node.share_coordinator.persister).
"""
from __future__ import annotations

import asyncio
import uuid

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError

SHARE_GROUP_TYPE = "share"
EMPTY = "Empty"
ZERO_UUID = uuid.UUID(int=0)


def share_group(broker, group_id: str):
    """(error, group): the share group this node coordinates, or Kafka's error for the request."""
    if not group_id:
        return ErrorCode.INVALID_REQUEST, None
    error = broker.groups.owns(group_id)
    if error:
        return error, None
    group = broker.groups.group(group_id)
    if group is None or group.group_type != SHARE_GROUP_TYPE:
        return ErrorCode.GROUP_ID_NOT_FOUND, None
    return ErrorCode.NONE, group


def empty_share_group(broker, group_id: str):
    """share_group(), refused NON_EMPTY_GROUP while it has members: its offsets change only then."""
    error, group = share_group(broker, group_id)
    if not error and (group.members or group.state != EMPTY):
        return ErrorCode.NON_EMPTY_GROUP, None
    return error, group


def subscribed_topics(group) -> list[str]:
    """The topics the group's members subscribe to, sorted: what a describe of all offsets covers."""
    names = set()
    for member in group.members.values():
        names.update(member.subscribed_topic_names)
    return sorted(names)


def partition_error(broker, topic_name: str, partition: int):
    """(topic id, error): the topic's id, or UNKNOWN_TOPIC_OR_PARTITION (and the zero id)."""
    topic = broker.topic(topic_name)
    if topic is None:
        return ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if partition not in topic.partitions:
        return topic.topic_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return topic.topic_id, ErrorCode.NONE


async def start_offset(broker, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[ErrorCode, int]:
    """(error, the share-partition start offset; -1 if never initialized)."""
    try:
        state = await broker.share_persister.read_summary(group_id, topic_id, partition)
    except CoordinatorError as exc:
        return exc.code, -1
    return ErrorCode.NONE, -1 if state is None else state.start_offset


async def reset(broker, group_id: str, topic_id: uuid.UUID, partition: int, offset: int) -> ErrorCode:
    """Initialize the share-partition again at offset, with the next state epoch: a partition leader
    still holding the old state is fenced by it."""
    try:
        state = await broker.share_persister.read_summary(group_id, topic_id, partition)
        await broker.share_persister.initialize(group_id, topic_id, partition,
                                                0 if state is None else state.state_epoch + 1, offset)
    except CoordinatorError as exc:
        return exc.code
    return ErrorCode.NONE


async def forget(broker, group_id: str, topic_id: uuid.UUID, partition: int) -> ErrorCode:
    try:
        await broker.share_persister.delete(group_id, topic_id, partition)
    except CoordinatorError as exc:
        return exc.code
    return ErrorCode.NONE


async def forget_group(broker, group) -> ErrorCode:
    """Delete the share state of every partition of the topics the group subscribed to (DeleteGroups);
    the first error, if any."""
    keys = [(topic.topic_id, partition) for topic in map(broker.topic, sorted(group.state_topics))
            if topic is not None for partition in sorted(topic.partitions)]
    errors = await asyncio.gather(*(forget(broker, group.group_id, topic_id, partition)
                                    for topic_id, partition in keys))
    return next((error for error in errors if error), ErrorCode.NONE)


def message(code: ErrorCode) -> str | None:
    return None if code == ErrorCode.NONE else code.name
