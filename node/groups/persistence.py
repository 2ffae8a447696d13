"""Writing the group coordinator's records to `__consumer_offsets`, and reading them back.

Every change to a group or its offsets is a record in the group's partition of
`__consumer_offsets` (formats in node.groups.records); the node that leads a partition
replays it into memory when it becomes the coordinator of its groups. Kafka's
GroupMetadataManager plays this part there.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.records import encode_batch, iter_records
from node.groups.placement import OFFSETS_TOPIC
from node.partition import Partition

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)

# What a failed __consumer_offsets append means to a group client (Kafka's GroupMetadataManager).
APPEND_ERRORS_FOR_GROUPS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
}


class GroupError(Exception):
    """A group operation that failed, with the error code its client is answered."""

    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


class GroupLog:
    """Appends to the `__consumer_offsets` partitions this node leads."""

    def __init__(self, broker):
        self.broker = broker

    def append(self, partition: int, records: list[Record]) -> int:
        """Append to a __consumer_offsets partition; returns the offset after the batch."""
        return self._append(*self._led_here(partition), records)

    async def append_replicated(self, partition: int, records: list[Record]) -> None:
        """Append with acks=all, as Kafka writes offsets: answered once every in-sync replica has it."""
        hosted, info = self._led_here(partition)
        if len(info.isr) < hosted.effective_min_isr(info):
            raise GroupError(APPEND_ERRORS_FOR_GROUPS[ErrorCode.NOT_ENOUGH_REPLICAS])
        waiter = hosted.commit_waiter(self._append(hosted, info, records))
        error = await hosted.wait_for_commit(waiter, self.broker.config.get_int("offsets.commit.timeout.ms") / 1000)
        if error:
            raise GroupError(APPEND_ERRORS_FOR_GROUPS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR))

    def _led_here(self, partition: int) -> tuple[Partition, PartitionInfo]:
        """The __consumer_offsets partition and its image, if this node leads it (as Kafka's
        appendRecordsToLeader, leadership is checked before anything else)."""
        key = (OFFSETS_TOPIC, partition)
        hosted = self.broker.replicas.partitions.get(key)
        info = self.broker.partition(*key)
        if hosted is None or info is None or info.leader != self.broker.node_id:
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        return hosted, info

    @staticmethod
    def _append(hosted: Partition, info: PartitionInfo, records: list[Record]) -> int:
        hosted.log.append(encode_batch(records, timestamp=int(time.time() * 1000)), leader_epoch=info.leader_epoch)
        hosted.appended_as_leader(info)
        return hosted.log.log_end_offset


def replay(partition_log) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record in a partition's log, oldest first. Control batches and
    compressed ones are skipped: the coordinator writes neither."""
    for data, position, header in partition_log.batch_headers():
        if header.is_control or header.compression:
            continue
        for record in iter_records(memoryview(data)[position:position + header.size]):
            yield record.key, record.value
