"""Idempotent producers: producer ids handed out in blocks, and per-partition sequence checks.

A retried batch that was already written is answered with its original offsets
(DUPLICATE_SEQUENCE_NUMBER is success to the client); a gap in sequence numbers is
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH. State lives in
memory and is rebuilt from the batch headers of the log when a partition is opened.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from cluster.formats.errors import ErrorCode

# Kafka keeps the last five batches per producer so that in-flight retries can be matched.
BATCHES_REMEMBERED = 5
MAX_SEQUENCE = (1 << 31) - 1


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int = -1
    # (first sequence, last sequence, first offset, last offset) of recent batches
    recent: deque = field(default_factory=lambda: deque(maxlen=BATCHES_REMEMBERED))


class SequenceError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class PartitionProducers:
    """Sequence state of the idempotent producers writing to one partition."""

    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}

    @classmethod
    def from_log(cls, partition_log) -> "PartitionProducers":
        """Rebuild sequence state from the batch headers of a log (after a restart)."""
        producers = cls()
        for _, _, header in partition_log.batch_headers():
            if header.producer_id >= 0 and not header.is_control:
                producers.record(header, header.base_offset)
        return producers

    def find_duplicate(self, header) -> tuple[int, int] | None:
        """(first offset, last offset) when this batch was already appended."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        last_sequence = _last_sequence(header)
        for first_seq, last_seq, first_offset, last_offset in entry.recent:
            if first_seq == header.base_sequence and last_seq == last_sequence:
                return first_offset, last_offset
        return None

    def check(self, header) -> None:
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.epoch:
            raise SequenceError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                f"producer epoch {header.producer_epoch} is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise SequenceError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    f"a new producer epoch must start at sequence 0, got {header.base_sequence}")
            return
        expected = 0 if entry.last_sequence == MAX_SEQUENCE else entry.last_sequence + 1
        if header.base_sequence != expected:
            raise SequenceError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                f"expected sequence {expected}, got {header.base_sequence}")

    def record(self, header, first_offset: int) -> None:
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.last_sequence = _last_sequence(header)
        entry.recent.append((header.base_sequence, entry.last_sequence, first_offset,
                             first_offset + header.last_offset_delta))


def _last_sequence(header) -> int:
    return (header.base_sequence + header.last_offset_delta) % (MAX_SEQUENCE + 1)


class ProducerIdAllocator:
    """Hands out producer ids from blocks the controller reserves in the metadata log."""

    def __init__(self, broker):
        self.broker = broker
        self.next_id = 0
        self.end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self.next_id >= self.end:
                block = await self.broker.metadata.call_controller(
                    "allocate_producer_ids", node_id=self.broker.node_id, broker_epoch=self.broker.metadata.broker_epoch)
                self.next_id, self.end = block["first_producer_id"], block["first_producer_id"] + block["count"]
            producer_id = self.next_id
            self.next_id += 1
            return producer_id
