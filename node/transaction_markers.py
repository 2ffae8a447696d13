"""Transaction markers appended to the partitions this node leads: what WriteTxnMarkers does, and what
the transaction coordinator calls directly for the partitions it leads itself.

Each marker is a control batch appended with acks=all: a partition's outcome comes once every
in-sync replica has it, NOT_ENOUGH_REPLICAS while fewer than min.insync.replicas are in sync (the
coordinator retries). A marker with a producer epoch older than the partition's is
INVALID_PRODUCER_EPOCH, one from a coordinator epoch older than the last marker's
TRANSACTION_COORDINATOR_FENCED. Once a marker is on the in-sync replicas of a `__consumer_offsets`
partition, the group coordinator applies (or drops) the transaction's offsets.
"""
from __future__ import annotations

import asyncio
import logging

from cluster.formats.errors import ErrorCode
from node.groups.placement import OFFSETS_TOPIC
from node.leadership import check_leader
from node.producer_state import MarkerError

MARKER_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)

# (producer id, producer epoch, commit, coordinator epoch, [(topic, partition), ...])
Marker = tuple[int, int, bool, int, list[tuple[str, int]]]


async def write_markers(broker, markers: list[Marker]) -> list[list[ErrorCode]]:
    """Append every marker to its partitions and wait for the in-sync replicas: per marker, the
    error code of each of its partitions, in order."""
    outcomes: list[list[ErrorCode]] = []
    waits = []
    for producer_id, epoch, commit, coordinator_epoch, partitions in markers:
        errors = []
        for topic, index in partitions:
            error, waiter = _append_marker(broker, topic, index, producer_id, epoch, commit, coordinator_epoch)
            errors.append(error)
            if waiter is not None:
                waits.append((errors, len(errors) - 1, *waiter))
        outcomes.append(errors)
    results = await asyncio.gather(*(partition.wait_for_commit(waiter, MARKER_TIMEOUT_S)
                                     for _, _, partition, waiter in waits))
    for (errors, position, _, _), error in zip(waits, results):
        errors[position] = error
    _complete_offsets(broker, markers, outcomes)
    return outcomes


def _append_marker(broker, topic: str, index: int, producer_id: int, epoch: int, commit: bool,
                   coordinator_epoch: int):
    """(error, (partition, its commit waiter) or None) for one partition's marker."""
    check = check_leader(broker, topic, index)
    if check.error:
        return check.error, None
    if len(check.info.isr) < check.partition.effective_min_isr(check.info):
        return ErrorCode.NOT_ENOUGH_REPLICAS, None
    try:
        next_offset = check.partition.append_marker(check.info, producer_id, epoch, commit, coordinator_epoch,
                                                    broker.now_ms())
    except MarkerError as exc:
        log.info("%s-%d: %s marker of producer %d refused: %s", topic, index, "COMMIT" if commit else "ABORT",
                 producer_id, exc)
        return exc.code, None
    except OSError as exc:
        log.error("cannot append a marker to %s-%d: %s", topic, index, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, None
    return ErrorCode.NONE, (check.partition, check.partition.commit_waiter(next_offset))


def _complete_offsets(broker, markers: list[Marker], outcomes: list[list[ErrorCode]]) -> None:
    """Transactional offsets commit (or go) once their marker is on the in-sync replicas."""
    for (producer_id, _, commit, _, partitions), errors in zip(markers, outcomes):
        done = [index for (topic, index), error in zip(partitions, errors) if topic == OFFSETS_TOPIC and not error]
        if done:
            broker.groups.complete_transaction(producer_id, done, commit)
