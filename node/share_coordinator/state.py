"""A share-partition's durable state, as the share coordinator keeps it and partition leaders read it.

A share-partition is one (share group, topic, partition). Its state is the share-partition start
offset (SPSO: every record before it is done with), a state epoch (bumped when the state is
initialized again, e.g. by AlterShareGroupOffsets), the leader epoch of the partition leader
that wrote it, and the records past the start offset whose delivery has begun, in batches of
consecutive offsets sharing a delivery state and a delivery count (Kafka's PersisterStateBatch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

# Delivery states as Kafka's RecordState numbers them in the persisted batches.
AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVED = 4

NO_START_OFFSET = -1  # a share-partition that was never initialized


@dataclass(frozen=True)
class StateBatch:
    first_offset: int
    last_offset: int  # inclusive
    delivery_state: int
    delivery_count: int


@dataclass
class ShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)


class SharePersister(Protocol):
    """Where partition leaders keep share-partition state (Kafka's Persister)."""

    async def read(self, group_id: str, topic_id: UUID, partition: int, leader_epoch: int) -> ShareState | None:
        """The state last written; None if the share-partition was never initialized."""

    async def write(self, group_id: str, topic_id: UUID, partition: int, state: ShareState) -> None:
        """Store a change: state.batches replace what was stored for their offsets, and everything
        before state.start_offset is dropped. Raises node.coordinator_log.CoordinatorError."""

    async def initialize(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        """Start (or start again) a share-partition at start_offset, with no batches."""

    async def read_summary(self, group_id: str, topic_id: UUID, partition: int) -> ShareState | None:
        """The state epoch and start offset (leader epoch -1, no batches); None if never initialized."""

    async def delete(self, group_id: str, topic_id: UUID, partition: int) -> None:
        """Forget the share-partition's state: it reads as never initialized afterwards."""
