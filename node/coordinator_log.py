"""Appends to the internal topic partitions a coordinator keeps its state in, while this node leads them.

The group coordinator writes `__consumer_offsets` and the transaction coordinator
`__transaction_state` the same way: leadership is checked before anything else (as Kafka's
appendRecordsToLeader), and a state change counts once every in-sync replica has it. A failed
append is answered with the error a coordinator's client retries on.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch, iter_records, read_header
from node.partition import Partition

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)
Producer = tuple[int, int]  # (producer id, producer epoch) of a transactional write
FIRST_SEQUENCE = 0  # a coordinator's transactional batch carries sequence 0, as Kafka's does

# What a failed append means to a coordinator's client (Kafka's GroupMetadataManager and
# TransactionStateManager map them alike).
APPEND_ERRORS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
}


class CoordinatorError(Exception):
    """A coordinator operation that failed, with the error code its client is answered."""

    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


class CoordinatorLog:
    """Appends to the partitions of one internal topic this node leads. With a producer (id, epoch)
    the batch is that producer's transactional write, which the partition's producer state learns
    of, so that the transaction's marker ends it there too."""

    def __init__(self, broker, topic: str, timeout_config: str):
        self.broker = broker
        self.topic = topic
        self.timeout_config = timeout_config

    def append(self, partition: int, records: list[Record], producer: Producer | None = None) -> int:
        """Append one batch of records; returns its first offset."""
        return self._append(*self.led_here(partition), records, producer)

    async def append_replicated(self, partition: int, records: list[Record], producer: Producer | None = None,
                                on_append: Callable[[int], None] | None = None) -> int:
        """Append with acks=all: returns the batch's first offset once every in-sync replica has it.
        on_append is given that offset as soon as the batch is in this node's log, before the wait,
        so that what the batch stands for is known from then on."""
        hosted, info = self.check_writable(partition)
        first_offset = self._append(hosted, info, records, producer)
        if on_append is not None:
            on_append(first_offset)
        waiter = hosted.commit_waiter(hosted.log.log_end_offset)
        error = await hosted.wait_for_commit(waiter, self.broker.config.get_int(self.timeout_config) / 1000)
        if error:
            raise CoordinatorError(APPEND_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR))
        return first_offset

    def check_writable(self, partition: int) -> tuple[Partition, PartitionInfo]:
        """Raises the CoordinatorError append_replicated would raise before appending: this node does
        not lead the partition, or it has fewer in-sync replicas than min.insync.replicas. A
        coordinator checks this before it changes the state its write is to record, so that a
        refused write leaves memory as the log has it."""
        hosted, info = self.led_here(partition)
        if len(info.isr) < hosted.effective_min_isr(info):
            raise CoordinatorError(APPEND_ERRORS[ErrorCode.NOT_ENOUGH_REPLICAS])
        return hosted, info

    def led_here(self, partition: int) -> tuple[Partition, PartitionInfo]:
        key = (self.topic, partition)
        hosted = self.broker.replicas.partitions.get(key)
        info = self.broker.partition(*key)
        if hosted is None or info is None or info.leader != self.broker.node_id:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR)
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


def replay_records(partition_log) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record a coordinator wrote to a partition, oldest first. Control
    batches and compressed ones are skipped: a coordinator writes neither."""
    for data, position, header in partition_log.batch_headers():
        if header.is_control or header.compression:
            continue
        for record in iter_records(memoryview(data)[position:position + header.size]):
            yield record.key, record.value
