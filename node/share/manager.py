"""The share-partitions this node leads (Kafka's SharePartitionManager).

A share-partition is made on its first use by ShareFetch or ShareAcknowledge: its state is read
through the persister (`broker.share_persister`, node.share_coordinator.state), and initialized
there when there is none, at the offset `share.auto.offset.reset` names (latest by default,
earliest, or by_duration:<ISO-8601 duration>). Without a persister the state lives in this
node's memory alone. A share-partition is dropped when this node stops leading its partition or
a new term of it begins: the next leader reads what was persisted. It is dropped too when a write
of its state is fenced (FENCED_STATE_EPOCH after AlterShareGroupOffsets, DeleteShareGroupOffsets or
DeleteGroups; FENCED_LEADER_EPOCH), when a member opening a share session finds its state deleted
or initialized again in the persister, and when the group's last share session here closes: the
next ShareFetch reads the state again.
"""
from __future__ import annotations

import asyncio
import time

from cluster.formats.group_configs import duration_to_ms
from node.coordinator_log import CoordinatorError
from node.group_configs import group_setting, group_setting_int
from node.share.partition import Limits, SharePartition

Key = tuple  # (group id, topic id, partition)


class NotLedHere(Exception):
    """The partition's leadership moved while its share-partition was being loaded."""


class SharePartitionManager:
    def __init__(self, broker):
        self.broker = broker
        self.partitions: dict[Key, SharePartition] = {}
        self._loading: dict[Key, asyncio.Task] = {}

    def limits(self, group_id: str) -> Limits:
        config = self.broker.config
        return Limits(group_setting_int(self.broker, group_id, "share.record.lock.duration.ms"),
                      config.get_int("group.share.delivery.count.limit"),
                      config.get_int("group.share.partition.max.record.locks"))

    async def get(self, group_id: str, topic_id, index: int, hosted) -> SharePartition:
        """The share-partition of a partition led here (`hosted`, node.partition.Partition), loaded
        on first use. Raises node.coordinator_log.CoordinatorError when its state cannot be read,
        NotLedHere when the leadership moved meanwhile."""
        key = (group_id, topic_id, index)
        share_partition = self.partitions.get(key)
        if share_partition is not None and share_partition.leader_epoch != hosted.leader_epoch:
            self._drop(key)
            share_partition = None
        if share_partition is None:
            loading = self._loading.get(key)
            if loading is None:
                loading = self._loading[key] = asyncio.ensure_future(self._load(key, hosted))
                loading.add_done_callback(lambda _, key=key: self._loading.pop(key, None))
            share_partition = await asyncio.shield(loading)
        share_partition.limits = self.limits(group_id)
        return share_partition

    async def _load(self, key: Key, hosted) -> SharePartition:
        group_id, topic_id, index = key
        epoch = hosted.leader_epoch
        persister = self.broker.share_persister
        share_partition = SharePartition(group_id, topic_id, index, self.limits(group_id), persister, epoch)
        share_partition.on_fenced = self._fenced
        if persister is None:  # state in memory only
            share_partition.start_at(self.initial_offset(group_id, hosted.log))
        else:
            state = await persister.read(group_id, topic_id, index, epoch)
            if state is None or state.start_offset < 0:
                offset = self.initial_offset(group_id, hosted.log)
                await persister.initialize(group_id, topic_id, index, 0, offset)
                share_partition.start_at(offset)
            else:
                share_partition.load(state)
        share_partition.move_to_log_start(hosted.log.log_start_offset)
        if not hosted.hosted or hosted.leader_epoch != epoch:
            share_partition.close()
            raise NotLedHere()
        self.partitions[key] = share_partition
        return share_partition

    def initial_offset(self, group_id: str, partition_log) -> int:
        """Where a share group starts on a partition it has no state for (share.auto.offset.reset)."""
        reset = group_setting(self.broker, group_id, "share.auto.offset.reset").strip().lower()
        if reset == "earliest":
            return partition_log.log_start_offset
        if reset.startswith("by_duration:"):
            duration_ms = duration_to_ms(reset[len("by_duration:"):])
            if duration_ms is not None:
                found = partition_log.offset_for_timestamp(int(time.time() * 1000) - duration_ms)
                return found[0] if found else partition_log.high_watermark
        return partition_log.high_watermark

    def forget_unled(self) -> None:
        """Drop the share-partitions of partitions this node no longer leads at their term."""
        for key, share_partition in list(self.partitions.items()):
            group_id, topic_id, index = key
            topic = self.broker.topic_by_id(topic_id)
            info = topic.partitions.get(index) if topic else None
            if info is None or info.leader != self.broker.node_id or info.leader_epoch != share_partition.leader_epoch:
                self._drop(key)

    async def check_state(self, group_id: str, keys) -> None:
        """A member opens a share session: the group's loaded share-partitions among (topic id,
        partition) keys are checked against the persister, and dropped if their state was deleted or
        initialized again since they were read (DeleteGroups, DeleteShareGroupOffsets,
        AlterShareGroupOffsets). A share-partition nobody writes to would not learn of it otherwise,
        and would go on delivering from the old start offset."""
        if self.broker.share_persister is not None:
            await asyncio.gather(*(self._check(share_partition) for share_partition in self.of_member(group_id, keys)))

    async def _check(self, share_partition: SharePartition) -> None:
        try:
            state = await self.broker.share_persister.read_summary(
                share_partition.group_id, share_partition.topic_id, share_partition.partition)
        except CoordinatorError:
            return  # (checked at the next session; a write meanwhile is fenced if the state moved)
        if state is None or state.state_epoch != share_partition.state_epoch:
            self._fenced(share_partition)

    def forget_group(self, group_id: str) -> None:
        """Drop the group's share-partitions (its last share session here closed), unless they live
        in this node's memory alone."""
        if self.broker.share_persister is None:
            return
        for key in [key for key in self.partitions if key[0] == group_id]:
            self._drop(key)

    def of_member(self, group_id: str, keys) -> list[SharePartition]:
        """The loaded share-partitions of group among (topic id, partition) keys."""
        found = (self.partitions.get((group_id, topic_id, index)) for topic_id, index in keys)
        return [share_partition for share_partition in found if share_partition is not None]

    def describe(self, group_id: str) -> list[dict]:
        """Each share-partition of the group loaded here, with its records in flight (SharePartition.in_flight)."""
        described = []
        for (group, topic_id, index), share_partition in sorted(self.partitions.items(), key=lambda kv: str(kv[0])):
            topic = self.broker.topic_by_id(topic_id)
            if group == group_id and topic is not None:
                described.append({"topic": topic.name, "partition": index, **share_partition.in_flight()})
        return described

    def _fenced(self, share_partition: SharePartition) -> None:
        """A write of the share-partition was fenced (its state epoch bumped by an offsets admin, its
        state deleted, a newer leader): dropped, so the next ShareFetch reads the state again, as
        Kafka's handleFencedSharePartitionException does."""
        key = (share_partition.group_id, share_partition.topic_id, share_partition.partition)
        if self.partitions.get(key) is share_partition:
            self._drop(key)

    def _drop(self, key: Key) -> None:
        share_partition = self.partitions.pop(key, None)
        if share_partition is not None:
            share_partition.close()

    def close(self) -> None:
        for key in list(self.partitions):
            self._drop(key)
        for task in self._loading.values():
            task.cancel()

