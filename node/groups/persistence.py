"""Writing the group coordinator's records to `__consumer_offsets`, and reading them back.

Every change to a group or its offsets is a record in the group's partition of
`__consumer_offsets` (formats in node.groups.records); the node that leads a partition
replays it into memory when it becomes the coordinator of its groups. Kafka's
GroupMetadataManager plays this part there.

A transactional offset commit (TxnOffsetCommit) is one transactional batch of the producer's id
and epoch, as Kafka's GroupMetadataManager builds it; the partition's producer state learns of
it, so the transaction's marker ends it there too. Replay hands back those records with their
producer, and the COMMIT and ABORT markers that end them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from cluster.formats.control_records import ABORT, COMMIT, control_type
from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.records import (
    ATTR_TRANSACTIONAL, NO_PRODUCER_ID, CorruptRecordError, encode_batch, iter_records, read_header,
)
from node.groups.placement import OFFSETS_TOPIC
from node.partition import Partition

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)
Producer = tuple[int, int]  # (producer id, producer epoch) of a transactional write
FIRST_SEQUENCE = 0  # a coordinator's transactional batch carries sequence 0, as Kafka's does

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
    """Appends to the `__consumer_offsets` partitions this node leads. With a producer, the batch is
    that producer's transactional write."""

    def __init__(self, broker):
        self.broker = broker

    def append(self, partition: int, records: list[Record], producer: Producer | None = None) -> int:
        """Append to a __consumer_offsets partition; returns the offset after the batch."""
        hosted, info = self._led_here(partition)
        self._append(hosted, info, records, producer)
        return hosted.log.log_end_offset

    async def append_replicated(self, partition: int, records: list[Record], producer: Producer | None = None,
                                on_append: Callable[[int], None] | None = None) -> int:
        """Append with acks=all, as Kafka writes offsets: answered once every in-sync replica has it.
        Returns the batch's first offset; on_append is given it as soon as the batch is in this
        node's log, before the wait, so what the batch stands for is known from then on."""
        hosted, info = self._led_here(partition)
        if len(info.isr) < hosted.effective_min_isr(info):
            raise GroupError(APPEND_ERRORS_FOR_GROUPS[ErrorCode.NOT_ENOUGH_REPLICAS])
        first_offset = self._append(hosted, info, records, producer)
        if on_append is not None:
            on_append(first_offset)
        waiter = hosted.commit_waiter(hosted.log.log_end_offset)
        error = await hosted.wait_for_commit(waiter, self.broker.config.get_int("offsets.commit.timeout.ms") / 1000)
        if error:
            raise GroupError(APPEND_ERRORS_FOR_GROUPS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR))
        return first_offset

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
    def _append(hosted: Partition, info: PartitionInfo, records: list[Record], producer: Producer | None) -> int:
        """Write the batch as leader; returns its first offset."""
        batch = _encode(records, hosted.log.log_end_offset, info.leader_epoch, producer)
        first_offset = hosted.log.append(batch, leader_epoch=info.leader_epoch).first_offset
        if producer is not None:
            # Encoded at the offset and epoch the log gives it, so this is the header as written.
            hosted.producers.record(read_header(batch), first_offset)
        hosted.appended_as_leader(info)
        return first_offset


def _encode(records: list[Record], base_offset: int, leader_epoch: int, producer: Producer | None) -> bytes:
    timestamp = int(time.time() * 1000)
    if producer is None:
        return encode_batch(records, base_offset=base_offset, leader_epoch=leader_epoch, timestamp=timestamp)
    producer_id, producer_epoch = producer
    return encode_batch(records, base_offset=base_offset, leader_epoch=leader_epoch, timestamp=timestamp,
                        attributes=ATTR_TRANSACTIONAL, producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=FIRST_SEQUENCE)


class ReplayedRecord(NamedTuple):
    """A record read back from a __consumer_offsets partition."""

    key: bytes | None
    value: bytes | None
    batch_offset: int  # where its batch starts: what orders a plain commit and a transactional one
    producer_id: int  # the transaction that wrote it; NO_PRODUCER_ID for a plain write
    producer_epoch: int


class TransactionEnd(NamedTuple):
    """A COMMIT or ABORT marker: the producer's transactional records before it are committed or dropped."""

    producer_id: int
    committed: bool


def replay(partition_log) -> Iterator[ReplayedRecord | TransactionEnd]:
    """Every record in a partition's log and every transaction marker, oldest first. Compressed
    batches are skipped: the coordinator writes none."""
    for data, position, header in partition_log.batch_headers():
        if header.is_control:
            end = _transaction_end(data, position, header)
            if end is not None:
                yield end
            continue
        if header.compression:
            continue
        producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
        for record in iter_records(memoryview(data)[position:position + header.size]):
            yield ReplayedRecord(record.key, record.value, header.base_offset, producer_id, header.producer_epoch)


def _transaction_end(data, position: int, header) -> TransactionEnd | None:
    """The marker a control batch holds; None for any other control record (none belongs in this log),
    and for an empty control batch, what the log cleaner leaves of a marker whose transaction is gone."""
    if header.record_count == 0:
        return None
    try:
        kind = control_type(data, position)
    except CorruptRecordError as exc:
        log.warning("skipping an unreadable control batch at offset %d of %s: %s", header.base_offset,
                    OFFSETS_TOPIC, exc)
        return None
    if kind not in (ABORT, COMMIT):
        return None
    return TransactionEnd(header.producer_id, kind == COMMIT)
