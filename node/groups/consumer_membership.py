"""KIP-848 consumer groups: ConsumerGroupHeartbeat, and the group epochs and assignments it moves.

Kafka's GroupMetadataManager.consumerGroupHeartbeat, in order: the member joins (epoch 0), or is
found and its epoch checked; a change of its subscription (or of the subscribed topics' partition
counts) bumps the group epoch; a group epoch ahead of the assignment epoch has the server-side
assignor compute the next target assignment; the member reconciles towards its share of it
(node.groups.consumer_reconciliation). Every change is a record in the group's
`__consumer_offsets` partition (node.groups.consumer_records); a member is answered once its
heartbeat's records are on every in-sync replica. Session and revocation deadlines are loop
timers: a member that misses either is fenced (removed), which bumps the group epoch.

Unlike Kafka, the target assignment is computed as soon as the group epoch moves, whatever moved
it (a member leaving or timing out, a topic growing), not on the next heartbeat.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, replace

from cluster.formats.errors import ErrorCode
from node.group_configs import group_setting_int
from node.groups import consumer_records as records
from node.groups.assignors import ASSIGNORS, MemberSubscription
from node.groups.consumer import MEMBER_STABLE, UNREVOKED_PARTITIONS, Assignment, ConsumerGroup, ConsumerMember
from node.groups.consumer_reconciliation import FencedMember, PartitionEpochs, Reconciled, reconcile
from node.groups.consumer_subscriptions import (
    TopicShapes, member_topic_ids, subscribed_partition_counts, subscribes_to_any,
)
from node.groups.migration import NotUpgraded
from node.groups.persistence import GroupError, GroupLog

log = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2

Record = tuple[bytes, bytes | None]


@dataclass
class Heartbeat:
    """A ConsumerGroupHeartbeat request as the coordinator reads it (None: unchanged since the last)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[uuid.UUID, set[int]] | None = None
    client_id: str = ""
    client_host: str = ""

    def is_full(self) -> bool:
        """Kafka's isFullRequest: what a member sends when it (re)joins or recovers from an error."""
        return self.rebalance_timeout_ms != -1 and self.owned is not None and (
            self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None)


@dataclass
class HeartbeatResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class Refused(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class ConsumerMembership:
    """The consumer protocol, run on the consumer groups of the coordinator's group map."""

    def __init__(self, broker, directory, group_log: GroupLog):
        self.broker = broker
        self.directory = directory
        self.group_log = group_log
        self.shapes = TopicShapes()  # what metadata_changed last saw

    def assignors(self) -> list[str]:
        names = [a.strip() for a in self.broker.config.get("group.consumer.assignors").split(",")]
        return [name for name in names if name in ASSIGNORS] or ["uniform"]

    # --- ConsumerGroupHeartbeat ---

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatResult:
        """A heartbeat that changes nothing is answered at once. Any other changes the group only once
        this node is known to be able to write the records that say so (led here, enough in-sync
        replicas): a refused write must leave the group as the log has it, or a retry would find
        nothing left to write. A write that fails after its append (a timeout) is in the log already."""
        at_rest = self._at_rest(hb)
        if at_rest is not None:
            return at_rest
        out: list[Record] = []
        try:
            self.group_log.check_writable(self.directory.partition_of(hb.group_id))
        except GroupError as exc:
            self.directory.refused(hb.group_id, "the consumer group's state", exc.code)
            return HeartbeatResult(exc.code)
        try:
            if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                group, result = self._leave(hb, out)
            else:
                group, result = self._heartbeat(hb, out)
        except Refused as exc:
            return HeartbeatResult(exc.code, exc.message)
        except FencedMember as exc:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH, str(exc))
        if out:
            error = await self.directory.store(group, out, "the consumer group's state")
            if error:
                return HeartbeatResult(error)
        return result

    def _heartbeat(self, hb: Heartbeat, out: list[Record]) -> tuple[ConsumerGroup, HeartbeatResult]:
        group = self._group_for(hb.group_id, hb.member_epoch == JOIN_EPOCH, out)
        existing, replaced = self._find_member(group, hb)
        # Nothing is changed before this point: every refusal above leaves the group as it was.
        self.directory.groups[group.group_id] = group
        if replaced is not None:
            member = replace(replaced, member_id=hb.member_id, session_timer=None, revocation_timer=None)
            self.replace_static(group, replaced, member, out)
        else:
            member = existing or ConsumerMember(hb.member_id, member_epoch=0, previous_member_epoch=0)
        before = _metadata(member) if existing is not None or replaced is not None else None
        _update_member(member, hb)
        group.members[member.member_id] = member
        if member.instance_id:
            group.static_members[member.instance_id] = member.member_id
        if before != _metadata(member):
            out.append(self.member_metadata_record(group, member))
        subscription_changed = before is None or before[4:6] != _metadata(member)[4:6]
        if subscription_changed or self.subscribed_topics_moved(group):
            self.bump_epoch(group, out)
        assigned_before = {t: set(ps) for t, ps in member.assigned.items()}
        self.reconcile(group, member, hb.owned, out)
        group.update_state()
        self._arm_session(group, member)
        self._arm_revocation(group, member)
        result = HeartbeatResult(member_id=member.member_id, member_epoch=member.member_epoch,
                                 heartbeat_interval_ms=self._heartbeat_interval(group))
        if hb.member_epoch == JOIN_EPOCH or hb.is_full() or assigned_before != member.assigned:
            result.assignment = member.assigned
        return group, result

    def _at_rest(self, hb: Heartbeat) -> HeartbeatResult | None:
        """The answer to a member's heartbeat that changes nothing (a stable member at its target
        assignment, its metadata and the group's subscribed topics as they were); None for any other.
        It only renews the member's session."""
        group = self.directory.groups.get(hb.group_id)
        if group is None or group.group_type != "consumer" or hb.member_epoch <= JOIN_EPOCH:
            return None
        member = group.members.get(hb.member_id)
        if member is None or member.classic is not None or member.member_epoch != hb.member_epoch or \
                (hb.instance_id is not None and hb.instance_id != member.instance_id):
            return None
        if member.state != MEMBER_STABLE or not member.member_epoch == group.assignment_epoch == group.group_epoch:
            return None
        if _changes_metadata(member, hb) or self.subscribed_topics_moved(group):
            return None
        self._arm_session(group, member)
        return HeartbeatResult(member_id=member.member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self._heartbeat_interval(group),
                               assignment=member.assigned if hb.is_full() else None)

    def subscribed_topics_moved(self, group: ConsumerGroup) -> bool:
        """Whether the subscribed topics' ids or partition counts are no longer those the group's
        target assignment was computed for. A member's subscription changing bumps the epoch, which
        resolves them again; so only a group not resolved at the current shapes is resolved here."""
        if group.resolved_version == self.shapes.version:
            return False
        if subscribed_partition_counts(group, self.broker.image.topics) != group.subscription_metadata:
            return True
        group.resolved_version = self.shapes.version
        return False

    def _group_for(self, group_id: str, create: bool, out: list[Record]) -> ConsumerGroup:
        """Kafka's getOrMaybeCreateConsumerGroup. A classic group with no members (one that only
        commits offsets) becomes a consumer group; its offsets stay. One with members is upgraded
        when the migration policy allows (node.groups.migration)."""
        group = self.directory.groups.get(group_id)
        if group is None or (create and group.group_type == "classic" and not group.members):
            if group is None and not create:
                raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            if group is not None:
                group.cancel_timers()
                out.extend(self.directory.migration.empty_classic_tombstone(group))
            return ConsumerGroup(group_id, self.directory.partition_of(group_id))
        if create and group.group_type == "classic":
            try:
                return self.directory.migration.upgrade(group, out)
            except NotUpgraded as exc:
                raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, str(exc)) from exc
        if group.group_type != "consumer":
            raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group")
        return group

    def _find_member(self, group: ConsumerGroup, hb: Heartbeat) -> tuple[ConsumerMember | None, ConsumerMember | None]:
        """(the member, or None for a new one; the static member a new one takes the place of)."""
        member = group.members.get(hb.member_id)
        if hb.instance_id is None or (member is not None and member.instance_id == hb.instance_id):
            if hb.member_epoch == JOIN_EPOCH:
                if member is None:
                    self._check_size(group)
                return member, None
            if member is None:
                raise Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"Member {hb.member_id} is not a member of group {group.group_id}.")
            _check_epoch(member, hb)
            return member, None
        static = group.static_member(hb.instance_id)
        if hb.member_epoch == JOIN_EPOCH:
            if static is None:
                self._check_size(group)
                return None, None
            if static.member_epoch != STATIC_LEAVE_EPOCH:
                raise Refused(ErrorCode.UNRELEASED_INSTANCE_ID,
                              f"Static member {hb.member_id} with instance id {hb.instance_id} cannot join the "
                              f"group because the instance id is owned by member {static.member_id}.")
            return None, static
        if static is None:
            raise Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
        raise Refused(ErrorCode.FENCED_INSTANCE_ID,
                      f"Static member {hb.member_id} with instance id {hb.instance_id} was fenced by member "
                      f"{static.member_id}.")

    def _check_size(self, group: ConsumerGroup) -> None:
        limit = self.broker.config.get_int("group.consumer.max.size")
        if len(group.members) >= limit:
            raise Refused(ErrorCode.GROUP_MAX_SIZE_REACHED,
                          f"The consumer group has reached its maximum capacity of {limit} members.")

    def replace_static(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember,
                        out: list[Record]) -> None:
        """A static member that comes back under a new member id takes the old one's place and
        assignment, with no new group epoch (Kafka's replaceMember)."""
        old.cancel_timers()
        target = group.target.pop(old.member_id, {})
        del group.members[old.member_id]
        out.extend(_member_tombstones(group.group_id, old.member_id))
        group.members[new.member_id] = new
        group.target[new.member_id] = target
        out.append(self.member_metadata_record(group, new))
        out.append((records.key(records.TARGET_ASSIGNMENT_MEMBER, group.group_id, new.member_id),
                    records.target_assignment_member_value(target)))
        out.append(_current_assignment_record(group, new))

    # --- leaving ---

    def _leave(self, hb: Heartbeat, out: list[Record]) -> tuple[ConsumerGroup, HeartbeatResult]:
        group = self.directory.groups.get(hb.group_id)
        if group is None or group.group_type != "consumer":
            raise Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {hb.group_id} not found.")
        if hb.instance_id is None:
            member = group.members.get(hb.member_id)
            if member is None:
                raise Refused(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"Member {hb.member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(hb.instance_id)
            if member is None:
                raise Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {hb.instance_id} is unknown.")
            if member.member_id != hb.member_id:
                raise Refused(ErrorCode.FENCED_INSTANCE_ID,
                              f"Static member {hb.member_id} with instance id {hb.instance_id} was fenced by "
                              f"member {member.member_id}.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            # Gone for now: its partitions stay with it until it comes back or its session ends.
            member.previous_member_epoch, member.member_epoch = member.member_epoch, STATIC_LEAVE_EPOCH
            member.pending_revocation = {}
            out.append(_current_assignment_record(group, member))
            if member.revocation_timer is not None:
                member.revocation_timer.cancel()
                member.revocation_timer = None
            self._arm_session(group, member)
            group.update_state()
        else:
            self.fence_member(group, member, out)
        return group, HeartbeatResult(member_id=hb.member_id, member_epoch=hb.member_epoch)

    def remove_member(self, group: ConsumerGroup, member_id: str) -> None:
        """Take a member out of the group as its leaving would (heartbeat epoch -1); raises GroupError
        when this node can no longer write the group's records."""
        member = group.members.get(member_id)
        if member is None:
            return
        self.group_log.led_here(group.partition)  # before the member goes: a refusal leaves it in place
        out: list[Record] = []
        self.fence_member(group, member, out)
        self.group_log.append(group.partition, out)

    def fence_member(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None:
        """Kafka's consumerGroupFenceMember: the member's records are tombstoned and the group epoch
        moves, so that its partitions go to the others; or, when it was the last member of the
        consumer protocol, the group becomes a classic group (node.groups.migration)."""
        if self.directory.migration.downgrade_instead_of_removing(group, {member.member_id}, out):
            return
        member.cancel_timers()
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        out.extend(_member_tombstones(group.group_id, member.member_id))
        self.bump_epoch(group, out)
        group.update_state()

    def fence_quietly(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """A timer's fencing: nobody waits for it, so a write that fails is logged only."""
        if self.directory.groups.get(group.group_id) is not group or member_id not in group.members:
            return
        log.info("consumer group %s: member %s %s; removing it", group.group_id, member_id, why)
        try:
            self.remove_member(group, member_id)
        except GroupError as exc:
            self.directory.refused(group.group_id, "a member's removal", exc.code)

    # --- the group epoch and the target assignment ---

    def force_rebalance(self, group: ConsumerGroup) -> None:
        """Bump the group epoch and compute a new target assignment, as a member joining would;
        raises GroupError when this node can no longer write the group's records."""
        self.group_log.led_here(group.partition)  # before the epoch moves: a refusal leaves it as it was
        out: list[Record] = []
        self.bump_epoch(group, out)
        group.update_state()
        self.group_log.append(group.partition, out)

    def metadata_changed(self, groups) -> None:
        """Topics were created, deleted or grown: a group subscribed to one that changed (or not resolved
        at the previous shapes) whose target was computed for other partitions gets a new epoch."""
        changed = self.shapes.refresh(self.broker.image.topics)
        for group in groups:
            if not group.members or group.resolved_version == self.shapes.version:
                continue
            if changed and group.resolved_version == self.shapes.version - 1 and \
                    not subscribes_to_any(group, changed):
                group.resolved_version = self.shapes.version
                continue
            if self.subscribed_topics_moved(group):
                try:
                    self.force_rebalance(group)
                except GroupError as exc:
                    self.directory.refused(group.group_id, "a new group epoch", exc.code)

    def bump_epoch(self, group: ConsumerGroup, out: list[Record]) -> None:
        group.group_epoch += 1
        group.subscription_metadata = subscribed_partition_counts(group, self.broker.image.topics)
        group.resolved_version = self.shapes.version
        out.append((records.key(records.GROUP_METADATA, group.group_id),
                    records.group_metadata_value(group.group_epoch)))
        self._compute_target(group, out)

    def _compute_target(self, group: ConsumerGroup, out: list[Record]) -> None:
        topics = self.broker.image.topics
        group.preferred_assignor = self._preferred_assignor(group)
        subscriptions = {member_id: MemberSubscription(member_topic_ids(m, topics), group.target.get(member_id, {}),
                                                       m.instance_id)
                         for member_id, m in group.members.items()}
        counts = {topic_id: count for topic_id, count in group.subscription_metadata.values()}
        target = ASSIGNORS[group.preferred_assignor](subscriptions, counts)
        for member_id, assignment in target.items():
            if assignment != group.target.get(member_id):
                out.append((records.key(records.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                            records.target_assignment_member_value(assignment)))
        group.target = target
        group.assignment_epoch = group.group_epoch
        out.append((records.key(records.TARGET_ASSIGNMENT_METADATA, group.group_id),
                    records.target_assignment_metadata_value(group.assignment_epoch)))

    def _preferred_assignor(self, group: ConsumerGroup) -> str:
        """Kafka's computePreferredServerAssignor: the one most members name, else the default."""
        named = Counter(m.server_assignor for m in group.members.values() if m.server_assignor in ASSIGNORS)
        if named:
            return max(sorted(named), key=lambda name: named[name])
        return self.assignors()[0]

    # --- reconciliation ---

    def reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned, out: list[Record]) -> None:
        current = Reconciled(member.member_epoch, member.previous_member_epoch, member.state,
                             member.assigned, member.pending_revocation)
        nxt = reconcile(current, group.assignment_epoch, group.target.get(member.member_id, {}), owned,
                        PartitionEpochs(group, exclude=member.member_id))
        if nxt != current:
            member.member_epoch, member.previous_member_epoch = nxt.member_epoch, nxt.previous_member_epoch
            member.state, member.assigned, member.pending_revocation = nxt.state, nxt.assigned, nxt.pending_revocation
            out.append(_current_assignment_record(group, member))

    # --- what the offset store asks of a consumer group ---

    def check_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int, version: int,
                     transactional: bool = False) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit outside the group (epoch -1) only while the
        group has no members; a member's own at its current epoch, with OffsetCommit v9 or later. A
        transactional commit at another epoch is ILLEGAL_GENERATION, as TxnOffsetCommit knows no other."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        classic = member.classic is not None  # a classic-protocol member commits at its generation
        if not transactional and not classic and version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if transactional or classic else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def check_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch: a fetch naming no member (admin tools) is answered."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch == member.member_epoch:
            return ErrorCode.NONE
        return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH

    # --- timers ---

    def _heartbeat_interval(self, group: ConsumerGroup) -> int:
        return group_setting_int(self.broker, group.group_id, "consumer.heartbeat.interval.ms")

    def _arm_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.classic is not None:
            self.directory.classic_members.arm_session(group, member)  # its JoinGroup's session timeout
            return
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout_ms = group_setting_int(self.broker, group.group_id, "consumer.session.timeout.ms")
        member.session_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self.fence_quietly, group, member.member_id, "did not heartbeat within its session")

    def _arm_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """While a member has partitions to revoke it has its rebalance timeout to do so (Kafka's
        scheduleConsumerGroupRebalanceTimeout), counted from the epoch that asked it to."""
        if member.state != UNREVOKED_PARTITIONS or member.classic is not None:  # classic: join and sync deadlines
            if member.revocation_timer is not None:
                member.revocation_timer.cancel()
                member.revocation_timer = None
            return
        if member.revocation_timer is not None and member.revocation_epoch == member.member_epoch:
            return
        if member.revocation_timer is not None:
            member.revocation_timer.cancel()
        member.revocation_epoch = member.member_epoch
        member.revocation_timer = asyncio.get_running_loop().call_later(
            max(member.rebalance_timeout_ms, 0) / 1000, self._revocation_expired, group, member.member_id,
            member.member_epoch)

    def _revocation_expired(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        member = group.members.get(member_id)
        if member is not None and member.state == UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            self.fence_quietly(group, member_id, "did not revoke its partitions within its rebalance timeout")

    def loaded(self, groups) -> None:
        """A new coordinator's members have their session from now, as Kafka's onLoaded gives them;
        one that does not heartbeat here in time is removed."""
        for group in groups:
            group.update_state()
            for member in group.members.values():
                self._arm_session(group, member)
                self._arm_revocation(group, member)

    # --- replay ---

    def replay(self, group: ConsumerGroup, record_type: int, member_id: str | None, value: bytes | None) -> None:
        """A consumer group record read back from the group's partition (a type-3 tombstone, the
        group's deletion, is the coordinator's)."""
        if record_type == records.GROUP_METADATA and value is not None:
            group.group_epoch = records.decode_group_metadata(value)
        elif record_type == records.TARGET_ASSIGNMENT_METADATA and value is not None:
            group.assignment_epoch = records.decode_target_assignment_metadata(value)
        elif record_type == records.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group.target.pop(member_id, None)
            else:
                group.target[member_id] = records.decode_target_assignment_member(value)
        elif record_type == records.MEMBER_METADATA:
            self._replay_member(group, member_id, value)
        elif record_type == records.CURRENT_MEMBER_ASSIGNMENT and member_id in group.members:
            member = group.members[member_id]
            stored = records.decode_current_assignment(value) if value is not None else \
                records.MemberAssignment(0, 0, MEMBER_STABLE)
            member.member_epoch, member.previous_member_epoch = stored.member_epoch, stored.previous_member_epoch
            member.state, member.assigned, member.pending_revocation = (stored.state, stored.assigned,
                                                                        stored.pending_revocation)
        group.update_state()

    def _replay_member(self, group: ConsumerGroup, member_id: str, value: bytes | None) -> None:
        if value is None:
            member = group.members.pop(member_id, None)
            if member is not None and member.instance_id:
                group.static_members.pop(member.instance_id, None)
            return
        stored = records.decode_member_metadata(value)
        member = group.members.setdefault(member_id, ConsumerMember(member_id))
        member.instance_id, member.rack_id = stored.instance_id, stored.rack_id
        member.client_id, member.client_host = stored.client_id, stored.client_host
        member.subscribed_topic_names = stored.subscribed_topic_names
        member.subscribed_topic_regex = stored.subscribed_topic_regex
        member.rebalance_timeout_ms, member.server_assignor = stored.rebalance_timeout_ms, stored.server_assignor
        member.classic = stored.classic
        if member.instance_id:
            group.static_members[member.instance_id] = member_id

    def tombstones(self, group: ConsumerGroup) -> list[Record]:
        """The records that delete an empty group (Kafka's createGroupTombstoneRecords)."""
        out: list[Record] = []
        for member_id in group.members:
            out.extend(_member_tombstones(group.group_id, member_id))
        for record_type in (records.TARGET_ASSIGNMENT_METADATA, records.PARTITION_METADATA, records.GROUP_METADATA):
            out.append((records.key(record_type, group.group_id), None))
        return out

    def member_metadata_record(self, group: ConsumerGroup, member: ConsumerMember) -> Record:
        return (records.key(records.MEMBER_METADATA, group.group_id, member.member_id),
                records.member_metadata_value(records.MemberMetadata(
                    member.instance_id, member.rack_id, member.client_id, member.client_host,
                    list(member.subscribed_topic_names), member.subscribed_topic_regex, member.rebalance_timeout_ms,
                    member.server_assignor, member.classic)))


def _check_epoch(member: ConsumerMember, hb: Heartbeat) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a member one epoch behind whose answer was lost may
    still heartbeat with its previous epoch, if it owns no more than it is assigned."""
    if hb.member_epoch > member.member_epoch:
        raise Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                      f"The consumer group member has a greater member epoch ({hb.member_epoch}) than the one known "
                      f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                      "partitions and rejoin.")
    if hb.member_epoch < member.member_epoch and (
            hb.member_epoch != member.previous_member_epoch or not _is_subset(hb.owned, member.assigned)):
        raise Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                      f"The consumer group member has a smaller member epoch ({hb.member_epoch}) than the one known "
                      f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                      "partitions and rejoin.")


def _is_subset(owned, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(topic_id, set()) for topic_id, ps in owned.items())


def _metadata(member: ConsumerMember) -> tuple:
    return (member.instance_id, member.rack_id, member.client_id, member.client_host,
            tuple(member.subscribed_topic_names), member.subscribed_topic_regex, member.rebalance_timeout_ms,
            member.server_assignor, member.classic)


def _changes_metadata(member: ConsumerMember, hb: Heartbeat) -> bool:
    probe = replace(member, session_timer=None, revocation_timer=None)
    _update_member(probe, hb)
    return _metadata(probe) != _metadata(member)


def _update_member(member: ConsumerMember, hb: Heartbeat) -> None:
    """The fields a heartbeat sends only when they change (Kafka's maybeUpdate... builders)."""
    if hb.instance_id is not None:
        member.instance_id = hb.instance_id
    if hb.rack_id is not None:
        member.rack_id = hb.rack_id
    if hb.rebalance_timeout_ms != -1:
        member.rebalance_timeout_ms = hb.rebalance_timeout_ms
    if hb.server_assignor is not None:
        member.server_assignor = hb.server_assignor
    if hb.subscribed_topic_names is not None:
        member.subscribed_topic_names = sorted(hb.subscribed_topic_names)
    if hb.subscribed_topic_regex is not None:
        member.subscribed_topic_regex = hb.subscribed_topic_regex or None
    member.client_id, member.client_host = hb.client_id, hb.client_host


def _current_assignment_record(group: ConsumerGroup, member: ConsumerMember) -> Record:
    return (records.key(records.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
            records.current_assignment_value(records.MemberAssignment(
                member.member_epoch, member.previous_member_epoch, member.state, member.assigned,
                member.pending_revocation)))


def _member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [(records.key(record_type, group_id, member_id), None) for record_type in
            (records.CURRENT_MEMBER_ASSIGNMENT, records.TARGET_ASSIGNMENT_MEMBER, records.MEMBER_METADATA)]
