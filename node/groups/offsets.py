"""Committed offsets of the groups this node coordinates, whatever the group's type.

They are kept apart from membership, as Kafka keeps its OffsetMetadataManager apart from its
GroupMetadataManager: a group of any type commits, fetches and deletes offsets the same way,
and whether a member may commit is the group type's own check. A commit is visible only once
its records are on every in-sync replica of the group's `__consumer_offsets` partition; a
deletion is a tombstone per offset.
"""
from __future__ import annotations

from node.groups.persistence import GroupLog
from node.groups.records import CommittedOffset, decode_offset_value, offset_key, offset_value

Position = tuple[str, int]  # (topic, partition)


class OffsetStore:
    def __init__(self, group_log: GroupLog):
        self.group_log = group_log
        self._by_group: dict[str, dict[Position, CommittedOffset]] = {}

    def committed(self, group_id: str) -> dict[Position, CommittedOffset]:
        return self._by_group.get(group_id, {})

    async def commit(self, group, offsets: dict[Position, CommittedOffset]) -> None:
        """Offsets become visible to OffsetFetch only once they are on every in-sync replica."""
        # Taken before the write: offsets of a group that moves away while it waits go nowhere.
        committed = self._by_group.setdefault(group.group_id, {})
        batch = [(offset_key(group.group_id, topic, partition), offset_value(offset))
                 for (topic, partition), offset in offsets.items()]
        if batch:
            await self.group_log.append_replicated(group.partition, batch)
        committed.update(offsets)

    def delete(self, group, positions: list[Position]) -> None:
        committed = self._by_group.get(group.group_id, {})
        batch = [(offset_key(group.group_id, t, p), None) for t, p in positions if (t, p) in committed]
        if batch:
            self.group_log.append(group.partition, batch)
        for position in positions:
            committed.pop(position, None)

    def tombstones(self, group_id: str) -> list[tuple[bytes, None]]:
        """A tombstone for every offset of the group, for deleting it."""
        return [(offset_key(group_id, t, p), None) for t, p in self.committed(group_id)]

    def of_topics(self, group_id: str, topics: set[str]) -> list[Position]:
        return [position for position in self.committed(group_id) if position[0] in topics]

    def stale(self, group_id: str, retention_ms: int, now_ms: int) -> list[Position]:
        """Offsets not committed for retention_ms (offsets.retention.minutes)."""
        return [p for p, c in self.committed(group_id).items() if now_ms - c.commit_timestamp > retention_ms]

    def replay(self, group_id: str, position: Position, value: bytes | None) -> None:
        """An offset record read back from the group's partition (None: its tombstone)."""
        if value is None:
            self._by_group.get(group_id, {}).pop(position, None)
        else:
            self._by_group.setdefault(group_id, {})[position] = decode_offset_value(value)

    def forget(self, group_id: str) -> None:
        """The group was deleted, or is coordinated elsewhere now."""
        self._by_group.pop(group_id, None)
