"""The rules of in-sync replicas, as Kafka's Partition applies them: what counts as committed (the
high watermark), when a follower may join the ISR, when it has fallen out of it, and whether a
committed write had min.insync.replicas copies.

Pure decisions over what a leader knows; node.partition.Partition keeps that knowledge and acts on
the answers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Collection, Mapping

from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo


def now_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class FollowerProgress:
    """What a leader knows of one follower, as Kafka's Replica state: when it was last caught up."""

    caught_up_ms: float
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = -1

    def fetched(self, fetch_offset: int, leader_end: int, now_ms: float) -> None:
        # Caught up now if it has everything; caught up as of its previous fetch if it has
        # everything the leader had then (Kafka's Replica.updateFetchStateOrThrow).
        if fetch_offset >= leader_end:
            self.caught_up_ms = now_ms
        elif fetch_offset >= self.leader_end_at_last_fetch:
            self.caught_up_ms = max(self.caught_up_ms, self.last_fetch_ms)
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end


def effective_min_isr(configured: int, info: PartitionInfo | None) -> int:
    """min.insync.replicas, but never more than there are replicas (Kafka's effectiveMinIsr)."""
    return min(configured, len(info.replicas)) if info is not None else configured


def maximal_isr(info: PartitionInfo | None, requested: list[int] | None) -> Collection[int]:
    """The ISR as it is or as the leader asked the controller to make it (Kafka's maximalIsr).

    Until a requested change lands, the high watermark counts the union of both (KIP-497): a replica
    being added may be elected the moment the controller commits it, so nothing it lacks may be
    acknowledged meanwhile."""
    isr = info.isr if info is not None else ()
    return set(isr) | set(requested) if requested else isr


def holds_high_watermark(info: PartitionInfo, min_isr_of: Callable[[PartitionInfo], int]) -> bool:
    """The high watermark stays put while the ISR is below min.insync.replicas: nothing written then
    counts as committed until enough replicas have it (Kafka 3.7+, KAFKA-15583). A full ISR is never
    under it, so min_isr_of (which reads the topic's configs) is asked only when it may be."""
    return len(info.isr) < len(info.replicas) and len(info.isr) < min_isr_of(info)


def isr_high_watermark(isr: Collection[int], me: int, own_end: int, follower_ends: Mapping[int, int]) -> int:
    """The smallest log end offset over the ISR: what every in-sync replica holds."""
    return min([own_end if r == me else follower_ends.get(r, 0) for r in isr], default=own_end)


def enough_replicas_error(isr: Collection[int], min_isr: int) -> ErrorCode:
    """Once the high watermark covers a write: was it on min.insync.replicas copies
    (Kafka's Partition.checkEnoughReplicasReachOffset)?"""
    return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if len(isr) < min_isr else ErrorCode.NONE


def follower_in_sync(follower_end: int, high_watermark: int, epoch_start_offset: int) -> bool:
    """A follower may join the ISR once it has the leader's high watermark and everything written
    before this term began (Kafka's Partition.isFollowerInSync): the high watermark can lag what the
    last leader acknowledged, and a member lacking that could be elected next and lose it."""
    return follower_end >= max(high_watermark, epoch_start_offset)


def lagging(caught_up_ms: float, now_ms: float, lag_ms: int) -> bool:
    """A follower not caught up for replica.lag.time.max.ms leaves the ISR (Kafka's isr-expiration)."""
    return now_ms - caught_up_ms > lag_ms
