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
from collections.abc import Iterator
from typing import NamedTuple

from cluster.formats.control_records import ABORT, COMMIT, control_type
from cluster.formats.records import NO_PRODUCER_ID, CorruptRecordError, iter_records
from node.coordinator_log import CoordinatorError, CoordinatorLog
from node.groups.placement import OFFSETS_TOPIC

log = logging.getLogger(__name__)

GroupError = CoordinatorError  # a group operation that failed, with the error code its client is answered


class GroupLog(CoordinatorLog):
    """Appends to the `__consumer_offsets` partitions this node leads (node.coordinator_log)."""

    def __init__(self, broker):
        super().__init__(broker, OFFSETS_TOPIC, "offsets.commit.timeout.ms")


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
