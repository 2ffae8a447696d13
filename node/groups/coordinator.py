"""The group coordinator: the groups of the `__consumer_offsets` partitions this node leads.

What the group APIs call first. It holds the group map, answers whether this node coordinates a
group, and holds the membership of each group type (`classic`: node.groups.classic, which the
classic group APIs call) and the offset store (node.groups.offsets); it loads or drops a
partition's groups as this node gains or loses its leadership, replaying the partition's
records (node.groups.persistence). As in Kafka, the GroupCoordinator in front is kept apart
from what the group metadata and offset managers behind it do.

Transactional offset commits stay pending until the transaction ends: the transaction markers'
writer calls complete_transaction once a marker is in a partition, and replay completes them
at the marker in the log, so a coordinator that takes over between the commit and the marker
still holds them pending.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from cluster.formats.errors import ErrorCode
from cluster.formats.records import NO_PRODUCER_ID
from node.groups import placement
from node.groups.classic import DEAD, EMPTY, ClassicGroup, ClassicMembership
from node.groups.consumer import ConsumerGroup
from node.groups.consumer_classic_members import ClassicMembersOfConsumerGroups
from node.groups.consumer_membership import ConsumerMembership
from node.groups.migration import GroupMigration
from node.groups.offsets import OffsetStore, Position
from node.coordinator_log import Producer
from node.groups.persistence import GroupError, GroupLog, ReplayedRecord, TransactionEnd, replay
from node.groups import consumer_records
from node.groups.records import CommittedOffset, decode_key, group_key, key_version
from node.groups.share import ShareGroup, ShareMembership
from node.groups.share_records import SHARE_RECORD_TYPES, decode_share_key

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.groups: dict[str, ClassicGroup | ConsumerGroup] = {}
        self.loaded_partitions: set[int] = set()
        self.group_log = GroupLog(broker)
        self.classic = ClassicMembership(broker.config, self, self.group_log)
        self.consumer = ConsumerMembership(broker, self, self.group_log)
        self.classic_members = ClassicMembersOfConsumerGroups(broker, self, self.consumer)
        self.migration = GroupMigration(broker, self)
        self.share = ShareMembership(broker, self, self.group_log)
        self.offsets = OffsetStore(self.group_log)
        self._refusals_told: dict[str, ErrorCode] = {}  # group -> the write refusal last logged

    # --- placement ---

    def partition_count(self) -> int:
        topic = self.broker.topic(placement.OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.broker.config.get_int("offsets.topic.num.partitions")

    def partition_of(self, group_id: str) -> int:
        return placement.partition_for_group(group_id, self.partition_count())

    def owns(self, group_id: str) -> ErrorCode:
        partition = self.partition_of(group_id)
        info = self.broker.partition(placement.OFFSETS_TOPIC, partition)
        if info is None or info.leader != self.broker.node_id:
            return ErrorCode.NOT_COORDINATOR
        if partition not in self.loaded_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def refused(self, group_id: str, what: str, code: ErrorCode) -> None:
        """A group write refused with an error its client retries on (this node stopped coordinating the
        group, or its partition lost replicas) is normal during failover: logged once per group and
        error until the coordinator moves again."""
        if self._refusals_told.get(group_id) != code:
            self._refusals_told[group_id] = code
            log.info("cannot store %s of group %s: %s; its clients retry or find the new coordinator",
                     what, group_id, code.name)

    async def store(self, group, records: list, what: str) -> ErrorCode:
        """Write a group's records with acks=all; the error its client is answered, NONE once stored.
        A refusal is told as refused() tells it; a disk error is logged at ERROR."""
        try:
            await self.group_log.append_replicated(group.partition, records)
        except GroupError as exc:
            self.refused(group.group_id, what, exc.code)
            return exc.code
        except OSError as exc:
            log.error("cannot store %s of group %s: %s", what, group.group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def _forget_refusals(self, partition: int) -> None:
        for group_id in [g for g in self._refusals_told if self.partition_of(g) == partition]:
            del self._refusals_told[group_id]

    # --- the group map ---

    def consumer_groups(self, partition: int | None = None) -> list[ConsumerGroup]:
        """The KIP-848 consumer groups of one loaded partition, or of every one."""
        return [g for g in self.groups.values() if g.group_type == "consumer"
                and (g.partition == partition if partition is not None else g.partition in self.loaded_partitions)]

    def metadata_changed(self) -> None:
        """The metadata image moved: consumer groups whose subscribed topics changed rebalance."""
        self.consumer.metadata_changed(self.consumer_groups())

    def share_group_refusal(self, group_id: str) -> ErrorCode:
        """A classic group API naming a share group is answered GROUP_ID_NOT_FOUND, as Kafka answers
        it ("Group ... is not a classic group")."""
        return ErrorCode.GROUP_ID_NOT_FOUND if isinstance(self.groups.get(group_id), ShareGroup) else ErrorCode.NONE

    def group(self, group_id: str, create: bool = False) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = ClassicGroup(group_id, self.partition_of(group_id))
        return group

    def _drop(self, group: ClassicGroup) -> None:
        """The group and its offsets leave this node's memory (deleted, or coordinated elsewhere now)."""
        del self.groups[group.group_id]
        self.offsets.forget(group.group_id)
        group.cancel_timers()

    # --- gaining and losing __consumer_offsets partitions ---

    def load_partition(self, partition: int, partition_log) -> None:
        """Rebuild the groups and offsets of one partition from its log (on becoming its leader); the
        transactions whose markers are in the log are completed where their markers stand."""
        for item in replay(partition_log):
            if isinstance(item, TransactionEnd):
                self.complete_transaction(item.producer_id, (partition,), item.committed)
            else:
                self._apply_record(partition, item)
        self.loaded_partitions.add(partition)
        self._forget_refusals(partition)
        self.consumer.loaded(self.consumer_groups(partition))
        self.share.on_loaded(partition)
        log.info("loaded %d groups from %s-%d", sum(g.partition == partition for g in self.groups.values()),
                 placement.OFFSETS_TOPIC, partition)

    def _apply_record(self, partition: int, record: ReplayedRecord) -> None:
        if not record.key:
            return
        key_type = key_version(record.key)
        if key_type in consumer_records.KEY_TYPES:
            self._apply_consumer_record(partition, record)
            return
        if key_type in SHARE_RECORD_TYPES:
            share_key = decode_share_key(record.key)
            if share_key is not None:
                self.share.replay(partition, share_key, record.value)
            return
        decoded = decode_key(record.key)
        if decoded is None:
            return
        value = record.value
        group = self.groups.get(decoded[1])
        if group is None or (decoded[0] == "group" and value is not None and group.group_type != "classic"):
            if value is None:
                return
            group = self._replace(decoded[1], ClassicGroup(decoded[1], partition))
        if decoded[0] == "offset":
            position = (decoded[2], decoded[3])
            if record.producer_id == NO_PRODUCER_ID:
                self.offsets.replay(group.group_id, position, value, record.batch_offset)
            else:
                self.offsets.replay_transactional(group.group_id, (record.producer_id, record.producer_epoch),
                                                  position, value, record.batch_offset)
        elif value is None:
            self._group_removed(group)
        else:
            self.classic.replay(group, value)

    def _apply_consumer_record(self, partition: int, record: ReplayedRecord) -> None:
        """Key types 3-8: a KIP-848 consumer group's records. Its first one turns a classic group of
        the same id that only held offsets into the consumer group; a type-3 tombstone deletes it."""
        record_type, group_id, member_id = consumer_records.decode_key(record.key)
        group = self.groups.get(group_id)
        if group is None or group.group_type != "consumer":
            if record.value is None:
                return
            group = self._replace(group_id, ConsumerGroup(group_id, partition))
        if record_type == consumer_records.GROUP_METADATA and record.value is None:
            self._group_removed(group)
        else:
            self.consumer.replay(group, record_type, member_id, record.value)

    def _group_removed(self, group: ClassicGroup | ConsumerGroup) -> None:
        """Its record's tombstone (a classic group's, or a consumer group's type 3, as a group converted
        to the other type writes): the offsets committed under its id stay, with a classic group to
        hold them (DeleteGroups tombstones the offsets before the group)."""
        if self.offsets.committed(group.group_id) or self.offsets.has_open_transactions(group.group_id):
            self._replace(group.group_id, ClassicGroup(group.group_id, group.partition))
        else:
            self._drop(group)

    def _replace(self, group_id: str, group):
        """A group of another type takes the id; the offsets committed under it stay."""
        old = self.groups.get(group_id)
        if old is not None:
            old.cancel_timers()
        self.groups[group_id] = group
        return group

    def unload_partition(self, partition: int) -> None:
        self.loaded_partitions.discard(partition)
        self._forget_refusals(partition)
        for group in [g for g in self.groups.values() if g.partition == partition]:
            self._drop(group)
            group.resign()

    # --- the group's life ---

    def force_rebalance(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | ConsumerGroup | None]:
        """Start a rebalance of a group with members, as a member joining it would (see
        ClassicMembership.force_rebalance and ConsumerMembership.force_rebalance). A share group has
        none to start, as Kafka has no such operation: INVALID_REQUEST."""
        error = self.owns(group_id)
        group = self.groups.get(group_id)
        if error or group is None or group.state == DEAD:
            return error or ErrorCode.GROUP_ID_NOT_FOUND, None
        if isinstance(group, ShareGroup):
            return ErrorCode.INVALID_REQUEST, None
        if group.group_type == "consumer":
            try:
                self.consumer.force_rebalance(group)
            except GroupError as exc:
                return exc.code, None
        else:
            self.classic.force_rebalance(group)
        return ErrorCode.NONE, group

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state != EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        if isinstance(group, ShareGroup):
            removal = group.tombstones()
        elif group.group_type == "consumer":
            removal = self.consumer.tombstones(group)
        else:
            removal = [(group_key(group_id), None)]
        self.group_log.append(group.partition, [*self.offsets.tombstones(group_id), *removal])
        self._drop(group)
        if isinstance(group, ClassicGroup):
            group.transition(DEAD)
        else:
            group.resign()
        return ErrorCode.NONE

    # --- offsets ---

    def check_commit(self, group_id: str, generation_or_epoch: int, member_id: str, instance_id: str | None,
                     version: int) -> ErrorCode:
        """Whether an OffsetCommit may commit for the group: its group type's rule."""
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and group.group_type == "consumer":
            return self.consumer.check_commit(group, member_id, generation_or_epoch, version)
        return self.classic.check_commit(group_id, generation_or_epoch, member_id, instance_id)

    def check_transactional_commit(self, group_id: str, generation_or_epoch: int, member_id: str,
                                   instance_id: str | None) -> ErrorCode:
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and group.group_type == "consumer":
            return self.consumer.check_commit(group, member_id, generation_or_epoch, 0, transactional=True)
        return self.classic.check_transactional_commit(group_id, generation_or_epoch, member_id, instance_id)

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ names the member fetching: a consumer group checks it; a classic one does not."""
        group = self.groups.get(group_id)
        if group is not None and group.group_type == "consumer":
            return self.consumer.check_fetch(group, member_id, member_epoch)
        return ErrorCode.NONE

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        return group if group is not None and group.group_type == "consumer" else None

    def make_classic(self, group: ConsumerGroup) -> None:
        """An empty consumer group that a classic member joins becomes a classic group, its offsets kept
        (Kafka converts it the same way)."""
        self.group_log.append(group.partition, self.consumer.tombstones(group))
        self._replace(group.group_id, ClassicGroup(group.group_id, group.partition))

    async def commit(self, group_id: str, offsets: dict[Position, CommittedOffset]) -> None:
        """A commit from outside the group protocol creates the group it commits for, as in Kafka."""
        await self.offsets.commit(self.group(group_id, create=True), offsets)

    def committed(self, group_id: str) -> dict[Position, CommittedOffset]:
        return self.offsets.committed(group_id)

    def has_pending(self, group_id: str, position: Position) -> bool:
        """Whether a transaction not yet ended committed an offset of the partition for the group
        (OffsetFetch's require_stable answers it UNSTABLE_OFFSET_COMMIT)."""
        return self.offsets.has_pending(group_id, position)

    def delete_offsets(self, group_id: str, positions: list[Position]) -> None:
        self.offsets.delete(self.groups[group_id], positions)

    def forget_deleted_topics(self, deleted: set[str]) -> None:
        """Tombstone the offsets of deleted topics, as Kafka does on topic deletion."""
        for group in list(self.groups.values()):
            if group.partition not in self.loaded_partitions:
                continue
            gone = self.offsets.of_topics(group.group_id, deleted)
            if gone:
                try:
                    self.delete_offsets(group.group_id, gone)
                except GroupError:
                    pass  # no longer the coordinator: the new one cleans up

    def expire_offsets(self, retention_ms: int, now_ms: int | None = None) -> int:
        """Drop offsets of empty groups not committed for offsets.retention.minutes; then the group,
        unless a transaction still holds offsets pending in it (Kafka keeps that group too)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        expired = 0
        for group in list(self.groups.values()):
            if group.state != EMPTY or group.partition not in self.loaded_partitions or isinstance(group, ShareGroup):
                continue  # a share group is kept while empty, as Kafka's ShareGroup.shouldExpire says
            stale = self.offsets.stale(group.group_id, retention_ms, now)
            try:
                self.delete_offsets(group.group_id, stale)
                expired += len(stale)
                if not self.offsets.committed(group.group_id) \
                        and not self.offsets.has_open_transactions(group.group_id):
                    self.delete_group(group.group_id)
            except GroupError:
                continue
        return expired

    async def run_offset_expiry(self, interval_ms: int, retention_ms: int) -> None:
        """offsets.retention.check.interval.ms timer, as Kafka's offset expiration task."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            self.expire_offsets(retention_ms)

    # --- transactional offsets ---

    async def commit_transactional(self, group_id: str, producer: Producer,
                                   offsets: dict[Position, CommittedOffset]) -> None:
        """A TxnOffsetCommit creates the group it commits for, as a plain commit does; its offsets
        stay pending until the producer's transaction ends."""
        await self.offsets.commit_transactional(self.group(group_id, create=True), producer, offsets)

    def complete_transaction(self, producer_id: int, partitions: Iterable[int], committed: bool) -> None:
        """The producer's transaction ended in these `__consumer_offsets` partitions (its COMMIT or ABORT
        marker is in each of them): the pending offsets it committed for their groups become the
        groups' offsets, or are dropped (Kafka's handleTxnCompletion). Groups coordinated elsewhere
        are the new coordinator's business: it completes them as it replays the marker."""
        ended = set(partitions)
        groups = [group_id for group_id in self.offsets.groups_pending_for(producer_id)
                  if group_id in self.groups and self.groups[group_id].partition in ended]
        self.offsets.complete(producer_id, groups, committed)
