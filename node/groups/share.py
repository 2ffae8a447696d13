"""Share groups (KIP-932): membership and assignment of ShareGroupHeartbeat.

A share group's members heartbeat with ids they chose themselves: epoch 0 joins, -1 leaves, and
otherwise a member sends the epoch it was last given. The coordinator answers with the member's
epoch and the partitions it is to fetch from. Unlike a consumer group there is no revocation
phase: a member is given its target assignment at once, and a partition may be assigned to several
members (its leader hands each record to one of them). The group epoch goes up when a member
joins, leaves or changes its subscription, and when the subscribed topics' metadata changes (a
topic created, partitions added: every heartbeat compares the group's metadata hash with the
image, which is when Kafka's refresh would notice it); the target assignment is then computed
again (node.groups.share_assignor) at the member's heartbeat.

Every change is a set of records (node.groups.share_records) written to the group's partition of
`__consumer_offsets`, and memory changes only by replaying them, the same code a coordinator
that takes over runs: what a member was told is what a new coordinator knows.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from cluster.formats.errors import ErrorCode
from node.group_configs import group_setting_int
from node.groups import share_assignor
from node.groups import share_records as rec
from node.groups.persistence import GroupError, GroupLog

log = logging.getLogger(__name__)

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
JOIN_EPOCH, LEAVE_EPOCH = 0, -1

Assignment = dict[uuid.UUID, set[int]]


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = 0
    subscribed_topic_names: list[str] = field(default_factory=list)  # sorted: Kafka compares them as a set
    assigned: Assignment = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False, compare=False)

    def metadata(self) -> rec.MemberMetadata:
        return rec.MemberMetadata(self.rack_id, self.client_id, self.client_host, list(self.subscribed_topic_names))


@dataclass
class ShareGroup:
    group_id: str
    partition: int
    group_type = "share"
    protocol_type = "share"  # what ListGroups lists, as Kafka's ShareGroup.PROTOCOL_TYPE
    state: str = EMPTY
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> its target assignment
    # Every topic a member subscribed to, as far as the group's records go back: the topics whose
    # share state DeleteGroups deletes.
    state_topics: set[str] = field(default_factory=set)

    def members_changed(self) -> None:
        if self.state != DEAD:
            self.state = STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set[str]:
        return {name for member in self.members.values() for name in member.subscribed_topic_names}

    def cancel_timers(self) -> None:
        for member in self.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
                member.expiry = None

    def resign(self) -> None:
        """Coordinated elsewhere now: its members find the new coordinator at their next heartbeat."""
        self.cancel_timers()
        self.state = DEAD

    def tombstones(self) -> list[tuple[bytes, None]]:
        """The tombstones that delete every record of the group (DeleteGroups of an empty group)."""
        records = [(rec.share_key(record_type, self.group_id, member_id), None)
                   for member_id in sorted(set(self.members) | set(self.target))
                   for record_type in (rec.CURRENT_MEMBER_ASSIGNMENT, rec.TARGET_ASSIGNMENT_MEMBER,
                                       rec.MEMBER_METADATA)]
        records.append((rec.share_key(rec.TARGET_ASSIGNMENT_METADATA, self.group_id), None))
        records.append((rec.share_key(rec.GROUP_METADATA, self.group_id), None))
        return records


class HeartbeatAnswer(NamedTuple):
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: not sent


class ShareMembership:
    """ShareGroupHeartbeat and ShareGroupDescribe on the share groups of the coordinator's group map
    (`directory.groups`), which every group type shares; a group id belongs to one type."""

    def __init__(self, broker, directory, group_log: GroupLog):
        self.broker = broker
        self.directory = directory
        self.group_log = group_log
        self._expiries: set[asyncio.Task] = set()

    # --- ShareGroupHeartbeat ---

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                        topics: list[str] | None, client_id: str, client_host: str) -> HeartbeatAnswer:
        if member_epoch == LEAVE_EPOCH:
            return await self._leave(group_id, member_id)
        group = self.directory.groups.get(group_id)
        if group is None:
            if member_epoch != JOIN_EPOCH:
                return HeartbeatAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            group = ShareGroup(group_id, self.directory.partition_of(group_id))
        elif not isinstance(group, ShareGroup):
            return HeartbeatAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        max_size = self.broker.config.get_int("group.share.max.size")
        if len(group.members) >= max_size and member_id not in group.members:
            return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                   f"The share group has reached its maximum capacity of {max_size} members.")
        member = group.members.get(member_id)
        if member is None:
            if member_epoch != JOIN_EPOCH:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {member_id} is not a member of group {group_id}.")
            member = ShareMember(member_id)
        fenced = _fenced(member, member_epoch)
        if fenced:
            return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH, fenced)
        updated = ShareMember(member_id, rack_id if rack_id is not None else member.rack_id, client_id, client_host,
                              member.member_epoch, member.previous_member_epoch,
                              sorted(set(topics)) if topics is not None else list(member.subscribed_topic_names),
                              member.assigned)
        records = self._heartbeat_records(group, member, updated)
        assigned_before = {topic_id: set(partitions) for topic_id, partitions in member.assigned.items()}
        try:
            await self._write(group, records)
        except GroupError as exc:
            self.directory.refused(group_id, "a share-group heartbeat", exc.code)
            return HeartbeatAnswer(exc.code)
        current = self._member(group_id, member_id)
        if current is None:  # coordinated elsewhere now, or removed while the records were replicated
            return HeartbeatAnswer(ErrorCode.NOT_COORDINATOR if group_id not in self.directory.groups
                                   else ErrorCode.UNKNOWN_MEMBER_ID)
        self._arm_session(group_id, current)
        changed = current.assigned != assigned_before
        send = member_epoch == JOIN_EPOCH or topics is not None or changed
        return HeartbeatAnswer(ErrorCode.NONE, None, member_id, current.member_epoch,
                               group_setting_int(self.broker, group_id, "share.heartbeat.interval.ms"),
                               current.assigned if send else None)

    def _heartbeat_records(self, group: ShareGroup, member: ShareMember, updated: ShareMember) -> list:
        """The records of one heartbeat, as Kafka's shareGroupHeartbeat builds them: the member's
        metadata, a bumped group epoch, the new target assignment, the member's new assignment."""
        records = []
        if updated.metadata() != member.metadata() or member.member_id not in group.members:
            records.append((rec.share_key(rec.MEMBER_METADATA, group.group_id, member.member_id),
                            rec.member_metadata_value(updated.metadata())))
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        members = {**group.members, member.member_id: updated}
        group_epoch = self._bump_epoch(group, members, subscription_changed, records)
        if group_epoch > group.assignment_epoch:
            target = self._new_target(group, members, group_epoch, records)[member.member_id]
            target_epoch = group_epoch
        else:
            target, target_epoch = group.target.get(member.member_id, {}), group.assignment_epoch
        if target_epoch != member.member_epoch or subscription_changed:
            self._reconcile(group, member, updated, target_epoch, target, records)
        return records

    def _bump_epoch(self, group: ShareGroup, members: dict[str, ShareMember], subscription_changed: bool,
                    records: list) -> int:
        """The group epoch, one higher (and written) if a subscription or the subscribed topics changed."""
        metadata_hash = self._metadata_hash({t for m in members.values() for t in m.subscribed_topic_names})
        if not subscription_changed and metadata_hash == group.metadata_hash:
            return group.group_epoch
        epoch = group.group_epoch + 1
        records.append((rec.share_key(rec.GROUP_METADATA, group.group_id),
                        rec.group_metadata_value(epoch, metadata_hash)))
        log.info("share group %s: epoch %d", group.group_id, epoch)
        return epoch

    def _new_target(self, group: ShareGroup, members: dict[str, ShareMember], epoch: int,
                    records: list) -> dict[str, Assignment]:
        """The target assignment of the epoch; the members' targets that changed are written."""
        target = self._assign(group, members)
        records.extend((rec.share_key(rec.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                        rec.target_member_value(assigned))
                       for member_id, assigned in target.items()
                       if member_id not in group.target or group.target[member_id] != assigned)
        records.append((rec.share_key(rec.TARGET_ASSIGNMENT_METADATA, group.group_id),
                        rec.target_metadata_value(epoch)))
        return target

    def _reconcile(self, group: ShareGroup, member: ShareMember, updated: ShareMember, target_epoch: int,
                   target: Assignment, records: list) -> None:
        """The member takes its target at once (Kafka's ShareGroupAssignmentBuilder), within its subscription."""
        assigned = self._within_subscription(target, updated.subscribed_topic_names)
        epochs = (target_epoch, member.member_epoch) if target_epoch != member.member_epoch \
            else (member.member_epoch, member.previous_member_epoch)
        current = rec.CurrentAssignment(*epochs, rec.MEMBER_STATE_STABLE, assigned)
        if current != rec.CurrentAssignment(member.member_epoch, member.previous_member_epoch,
                                            rec.MEMBER_STATE_STABLE, member.assigned):
            records.append((rec.share_key(rec.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
                            rec.current_assignment_value(current)))

    def _assign(self, group: ShareGroup, members: dict[str, ShareMember]) -> dict[str, Assignment]:
        topics = self.broker.image.topics
        subscriptions = {m.member_id: {topics[name].topic_id for name in m.subscribed_topic_names if name in topics}
                         for m in members.values()}
        counts = {topics[name].topic_id: len(topics[name].partitions)
                  for m in members.values() for name in m.subscribed_topic_names if name in topics}
        return share_assignor.assign(subscriptions, counts, group.target)

    def _within_subscription(self, assignment: Assignment, topic_names: list[str]) -> Assignment:
        topics = self.broker.image.topics
        ids = {topics[name].topic_id for name in topic_names if name in topics}
        return {topic_id: set(partitions) for topic_id, partitions in assignment.items()
                if topic_id in ids and partitions}

    def _metadata_hash(self, topic_names: set[str]) -> int:
        """What the subscribed topics look like: their ids and partition counts (Kafka 4.1's
        ShareGroupMetadataValue.MetadataHash; ours is computed differently, for the same use)."""
        topics = self.broker.image.topics
        described = sorted((name, str(topics[name].topic_id), len(topics[name].partitions))
                           for name in topic_names if name in topics)
        if not described:
            return 0
        digest = hashlib.blake2b(repr(described).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    # --- leaving, and being removed ---

    async def _leave(self, group_id: str, member_id: str) -> HeartbeatAnswer:
        group = self.directory.groups.get(group_id)
        if group is None:
            return HeartbeatAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if not isinstance(group, ShareGroup):
            return HeartbeatAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if member_id not in group.members:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {member_id} is not a member of group {group_id}.")
        try:
            await self.remove_member(group, member_id)
        except GroupError as exc:
            self.directory.refused(group_id, "a share-group leave", exc.code)
            return HeartbeatAnswer(exc.code)
        log.info("share group %s: member %s left", group_id, member_id)
        return HeartbeatAnswer(ErrorCode.NONE, None, member_id, LEAVE_EPOCH)  # no interval, as from Kafka

    async def remove_member(self, group: ShareGroup, member_id: str) -> None:
        """Take a member out of the group (it left, its session expired, or an admin removed it) and
        bump the group epoch, so that the others are given its partitions at their next heartbeat.
        Raises GroupError (node.groups.persistence) if the records cannot be written."""
        member = group.members.get(member_id)
        if member is None:
            return
        others = {t for m in group.members.values() if m.member_id != member_id for t in m.subscribed_topic_names}
        records = [(rec.share_key(record_type, group.group_id, member_id), None)
                   for record_type in (rec.CURRENT_MEMBER_ASSIGNMENT, rec.TARGET_ASSIGNMENT_MEMBER,
                                       rec.MEMBER_METADATA)]
        records.append((rec.share_key(rec.GROUP_METADATA, group.group_id),
                        rec.group_metadata_value(group.group_epoch + 1, self._metadata_hash(others))))
        try:
            await self._write(group, records)  # (replaying the member's tombstone stops its session timer)
        except GroupError:
            # Still a member: its session runs again, so that it is removed later if it stays silent.
            current = self._member(group.group_id, member_id)
            if current is not None:
                self._arm_session(group.group_id, current)
            raise

    @staticmethod
    def tombstones(group: ShareGroup) -> list[tuple[bytes, None]]:
        return group.tombstones()

    # --- sessions ---

    def _arm_session(self, group_id: str, member: ShareMember) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        timeout_ms = group_setting_int(self.broker, group_id, "share.session.timeout.ms")
        member.expiry = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._expire, group_id,
                                                              member.member_id)

    def _expire(self, group_id: str, member_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._expire_member(group_id, member_id))
        self._expiries.add(task)
        task.add_done_callback(self._expiries.discard)

    async def _expire_member(self, group_id: str, member_id: str) -> None:
        group = self.directory.groups.get(group_id)
        if not isinstance(group, ShareGroup) or group.state == DEAD or member_id not in group.members:
            return
        group.members[member_id].expiry = None
        log.info("share group %s: member %s removed, its session expired", group_id, member_id)
        try:
            await self.remove_member(group, member_id)
        except GroupError as exc:
            self.directory.refused(group_id, "a share-group session expiry", exc.code)

    def on_loaded(self, partition: int) -> None:
        """A partition's groups were replayed: their members' sessions start now, as in Kafka."""
        for group in list(self.directory.groups.values()):
            if isinstance(group, ShareGroup) and group.partition == partition:
                for member in group.members.values():
                    self._arm_session(group.group_id, member)

    # --- ShareGroupDescribe ---

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        group = self.directory.groups.get(group_id)
        if group is None or getattr(group, "state", None) == DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if not isinstance(group, ShareGroup):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
        return ErrorCode.NONE, None, group

    # --- records: writing, and replaying ---

    async def _write(self, group: ShareGroup, records: list) -> None:
        """Append with acks=all; memory follows the records as soon as they are in this node's log."""
        if not records:
            return
        await self.group_log.append_replicated(group.partition, records,
                                               on_append=lambda _offset: self._replay_all(group.partition, records))

    def _replay_all(self, partition: int, records: list) -> None:
        for key, value in records:
            self.replay(partition, rec.decode_share_key(key), value)

    def _member(self, group_id: str, member_id: str) -> ShareMember | None:
        group = self.directory.groups.get(group_id)
        return group.members.get(member_id) if isinstance(group, ShareGroup) and group.state != DEAD else None

    def replay(self, partition: int, key: rec.ShareKey, value: bytes | None) -> None:
        """Apply one share-group record of a partition, as written or read back on loading it."""
        group = self.directory.groups.get(key.group_id)
        if group is not None and not isinstance(group, ShareGroup):
            log.warning("ignoring a share-group record of group %s, which is a %s group", key.group_id,
                        getattr(group, "group_type", "classic"))
            return
        if group is None:
            if value is None or key.record_type in (rec.PARTITION_METADATA, rec.STATE_PARTITION_METADATA):
                return
            group = self.directory.groups[key.group_id] = ShareGroup(key.group_id, partition)
        if key.record_type == rec.GROUP_METADATA and value is None:
            group.resign()
            del self.directory.groups[key.group_id]
            return
        _REPLAY[key.record_type](group, key.member_id, value)
        group.members_changed()


def _fenced(member: ShareMember, epoch: int) -> str | None:
    """Kafka's check: the member's epoch, or the one before it (the answer that bumped it may be lost)."""
    if epoch > member.member_epoch:
        return (f"The share group member has a greater member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        return (f"The share group member has a smaller member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}), and it does not match the previous member epoch "
                f"({member.previous_member_epoch}). The member must abandon all its partitions and rejoin.")
    return None


def _replay_group_metadata(group: ShareGroup, _member_id, value: bytes) -> None:
    group.group_epoch, group.metadata_hash = rec.decode_group_metadata(value)


def _replay_member_metadata(group: ShareGroup, member_id: str, value: bytes | None) -> None:
    if value is None:
        member = group.members.pop(member_id, None)
        if member is not None and member.expiry is not None:
            member.expiry.cancel()
        return
    metadata = rec.decode_member_metadata(value)
    member = group.members.setdefault(member_id, ShareMember(member_id))
    member.rack_id, member.client_id, member.client_host = metadata.rack_id, metadata.client_id, metadata.client_host
    member.subscribed_topic_names = sorted(set(metadata.subscribed_topic_names))
    group.state_topics.update(member.subscribed_topic_names)


def _replay_target_metadata(group: ShareGroup, _member_id, value: bytes | None) -> None:
    if value is not None:
        group.assignment_epoch = rec.decode_target_metadata(value)


def _replay_target_member(group: ShareGroup, member_id: str, value: bytes | None) -> None:
    if value is None:
        group.target.pop(member_id, None)
    else:
        group.target[member_id] = rec.decode_target_member(value)


def _replay_current_assignment(group: ShareGroup, member_id: str, value: bytes | None) -> None:
    member = group.members.get(member_id)
    if member is None:
        return  # written after the member's metadata: only a member removed since leaves this behind
    if value is None:
        member.member_epoch = member.previous_member_epoch = 0
        member.assigned = {}
        return
    current = rec.decode_current_assignment(value)
    member.member_epoch, member.previous_member_epoch = current.member_epoch, current.previous_member_epoch
    member.assigned = current.assigned


def _replay_nothing(_group: ShareGroup, _member_id, _value) -> None:
    """ShareGroupPartitionMetadata (what Kafka 4.0 wrote) and ShareGroupStatePartitionMetadata: not kept."""


_REPLAY = {
    rec.PARTITION_METADATA: _replay_nothing,
    rec.MEMBER_METADATA: _replay_member_metadata,
    rec.GROUP_METADATA: _replay_group_metadata,
    rec.TARGET_ASSIGNMENT_METADATA: _replay_target_metadata,
    rec.TARGET_ASSIGNMENT_MEMBER: _replay_target_member,
    rec.CURRENT_MEMBER_ASSIGNMENT: _replay_current_assignment,
    rec.STATE_PARTITION_METADATA: _replay_nothing,
}
