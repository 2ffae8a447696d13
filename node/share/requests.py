"""What ShareFetch and ShareAcknowledge share: finding a share-partition led here, applying a
member's acknowledgements, closing a session."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError
from node.leadership import check_leader, leader_endpoints
from node.share.manager import NotLedHere
from node.share.partition import SharePartition, write_error

# Errors whose answer names the current leader (KIP-951), so that clients move there at once.
NAMES_THE_LEADER = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


@dataclass(slots=True)
class Target:
    """One (topic id, partition) of a request, and its share-partition when led here."""
    topic_id: object
    index: int
    error: ErrorCode = ErrorCode.NONE
    leader: tuple[int, int] | None = None  # (id, epoch) when led elsewhere
    hosted: object = None  # node.partition.Partition
    share_partition: SharePartition | None = None


async def find(broker, group_id: str, topic_id, index: int) -> Target:
    target = Target(topic_id, index)
    topic = broker.topic_by_id(topic_id)
    if topic is None:
        target.error = ErrorCode.UNKNOWN_TOPIC_ID
        return target
    check = check_leader(broker, topic.name, index)
    if check.error:
        target.error = check.error
        if check.error in NAMES_THE_LEADER and check.info is not None:
            target.leader = (check.info.leader, check.info.leader_epoch)
        return target
    target.hosted = check.partition
    try:
        target.share_partition = await broker.share_partitions.get(group_id, topic_id, index, check.partition)
    except CoordinatorError as exc:
        target.error = write_error(exc.code)
    except NotLedHere:
        target.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return target


async def find_all(broker, group_id: str, keys) -> list[Target]:
    return list(await asyncio.gather(*(find(broker, group_id, topic_id, index) for topic_id, index in keys)))


async def acknowledge(broker, group_id: str, member_id: str,
                      acknowledgements: dict[tuple, list]) -> dict[tuple, tuple[ErrorCode, Target]]:
    """Apply each partition's (first, last, types) batches; (error, target) by (topic id, partition)."""
    targets = await find_all(broker, group_id, list(acknowledgements))
    results = await asyncio.gather(*(_acknowledge_one(target, member_id, acknowledgements[(target.topic_id, target.index)])
                                     for target in targets))
    return {(target.topic_id, target.index): (error, target) for target, error in zip(targets, results)}


async def _acknowledge_one(target: Target, member_id: str, batches: list) -> ErrorCode:
    if target.error:
        return target.error
    return await target.share_partition.acknowledge(member_id, batches)


async def close_session(broker, session) -> None:
    """A closing session's member gives back what it still holds on the session's partitions. The
    group's last session here drops the group's share-partitions: when its members come back they
    are read again, and find the state as it is then (DeleteGroups may have deleted it)."""
    for share_partition in broker.share_partitions.of_member(session.group_id, list(session.partitions)):
        await share_partition.release_member(session.member_id)
    broker.share_sessions.close(session)
    if not broker.share_sessions.has_group(session.group_id):
        broker.share_partitions.forget_group(session.group_id)


def acknowledgement_batches(partition) -> list[tuple[int, int, list[int]]]:
    return [(batch.first_offset, batch.last_offset, list(batch.acknowledge_types))
            for batch in partition.acknowledgement_batches]


def node_endpoints(broker, response_class, targets, listener: str) -> list:
    leaders = [target.leader[0] for target in targets if target.leader]
    return [response_class.NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in (leader_endpoints(broker, leaders, listener) if leaders else [])]
