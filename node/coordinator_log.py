"""Appends to the internal topic partitions a coordinator keeps its state in, while this node leads them.

The group coordinator writes `__consumer_offsets` and the transaction coordinator
`__transaction_state` the same way: leadership is checked before anything else (as Kafka's
appendRecordsToLeader), and a state change counts once every in-sync replica has it. A failed
append is answered with the error a coordinator's client retries on.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.records import encode_batch, iter_records, read_header
from node.partition import Partition

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)

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
    def __init__(self, broker, topic: str, timeout_config: str):
        self.broker = broker
        self.topic = topic
        self.timeout_config = timeout_config

    def append(self, partition: int, records: list[Record], **batch) -> int:
        """Append one batch of records; returns the offset after it. `batch`: encode_batch's header
        fields (a transactional producer's id and epoch)."""
        return self._append(*self.led_here(partition), records, batch)

    async def append_replicated(self, partition: int, records: list[Record], **batch) -> int:
        """Append with acks=all: returns once every in-sync replica has it."""
        hosted, info = self.led_here(partition)
        if len(info.isr) < hosted.effective_min_isr(info):
            raise CoordinatorError(APPEND_ERRORS[ErrorCode.NOT_ENOUGH_REPLICAS])
        next_offset = self._append(hosted, info, records, batch)
        waiter = hosted.commit_waiter(next_offset)
        timeout_s = self.broker.config.get_int(self.timeout_config) / 1000
        error = await hosted.wait_for_commit(waiter, timeout_s)
        if error:
            raise CoordinatorError(APPEND_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR))
        return next_offset

    def led_here(self, partition: int) -> tuple[Partition, PartitionInfo]:
        key = (self.topic, partition)
        hosted = self.broker.replicas.partitions.get(key)
        info = self.broker.partition(*key)
        if hosted is None or info is None or info.leader != self.broker.node_id:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR)
        return hosted, info

    @staticmethod
    def _append(hosted: Partition, info: PartitionInfo, records: list[Record], batch: dict) -> int:
        data = encode_batch(records, timestamp=int(time.time() * 1000), **batch)
        appended = hosted.log.append(data, leader_epoch=info.leader_epoch)
        if batch.get("producer_id", -1) >= 0:
            hosted.producers.record(read_header(data)._replace(base_offset=appended.first_offset),
                                    appended.first_offset)
        hosted.appended_as_leader(info)
        return appended.last_offset + 1


def replay_records(partition_log) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The (key, value) of every record a coordinator wrote to a partition, oldest first. Control
    batches and compressed ones are skipped: a coordinator writes neither."""
    for data, position, header in partition_log.batch_headers():
        if header.is_control or header.compression:
            continue
        for record in iter_records(memoryview(data)[position:position + header.size]):
            yield record.key, record.value
