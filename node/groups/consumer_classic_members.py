"""Members that speak the classic protocol inside a KIP-848 consumer group (Kafka's
GroupMetadataManager classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup).

Such a member is a consumer-group member (node.groups.consumer) whose ClassicMemberMetadata holds
its session timeout and its JoinGroup protocols. Its generation is its member epoch. JoinGroup is
its heartbeat with a full request: its subscription (read from the embedded Subscription) may bump
the group epoch and compute a new target assignment, and it reconciles towards its target with the
partitions its Subscription says it owns. No member leads: the answer names no leader and no
members, and SyncGroup hands the member its assigned partitions in the ConsumerProtocolAssignment
layout of its own subscription's version. Heartbeat answers REBALANCE_IN_PROGRESS while the group
epoch is ahead of the member's, while it must revoke partitions, or once partitions it waits for are
free: it rejoins to move on. Timers: the session (its JoinGroup's session timeout), the JoinGroup
expected within the rebalance timeout after being told to rejoin, and the SyncGroup expected within
the rebalance timeout after a join; a member that misses any of them is fenced as a consumer-protocol
member would be (which may downgrade the group, node.groups.migration).
"""
from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from dataclasses import replace

from cluster.formats.errors import ErrorCode
from node.groups.classic import JoinResult
from node.groups.consumer import (
    UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, Assignment, ClassicMemberMetadata, ConsumerGroup, ConsumerMember,
)
from node.groups.migration import CONSUMER_PROTOCOL_TYPE
from node.groups.persistence import GroupError
from node.groups.records import decode_subscription, encode_assignment, protocol_version

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]


class _Refused(Exception):
    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


class ClassicMembersOfConsumerGroups:
    """The classic group APIs, answered for members of consumer groups."""

    def __init__(self, broker, directory, consumer):
        self.broker = broker
        self.directory = directory
        self.consumer = consumer  # node.groups.consumer_membership.ConsumerMembership
        self._join_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._sync_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # --- JoinGroup ---

    async def join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        requested, unknown = member_id, not member_id
        if unknown:
            member_id = str(uuid.uuid4())
        classic = self.directory.classic
        if not classic.min_session_ms <= session_timeout_ms <= classic.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=requested)
        try:
            if self._is_full(group, member_id):
                raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED)
            if not _supports_protocols(group, protocol_type, protocols):
                raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if unknown and require_known_member and instance_id is None:
                # Kafka remembers no pending member id for consumer groups: the id is only handed out.
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
            subscription = decode_subscription(protocols[0][1])
        except _Refused as exc:
            return JoinResult(exc.code, member_id=requested)
        except (ValueError, struct.error, UnicodeDecodeError):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=requested)
        error = self._writable(group)
        if error:
            return JoinResult(error, member_id=requested)
        out: list[Record] = []
        replaced = group.static_member(instance_id) if unknown else None
        try:
            member = self._member_for_join(group, member_id, instance_id, unknown, out)
        except _Refused as exc:
            return JoinResult(exc.code, member_id=requested)
        before = _fields(member) if member.member_id in group.members else None
        if instance_id is not None:
            member.instance_id = instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.subscribed_topic_names = sorted(subscription.topics)
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMemberMetadata(session_timeout_ms, list(protocols))
        group.members[member.member_id] = member
        if member.instance_id:
            group.static_members[member.instance_id] = member.member_id
        self._update_group(group, member, before, _owned_ids(subscription.owned_partitions, self.broker), out)
        if replaced is not None and replaced.classic is None:
            subscription_changed = before is not None and before[4:6] != _fields(member)[4:6]
            self.directory.migration.downgrade_if_all_classic(group, subscription_changed, out)
        error = await self._store(group, out)
        if error:
            return JoinResult(error, member_id=member.member_id)
        self._cancel(self._join_timers, group, member.member_id)
        if self.directory.groups.get(group.group_id) is group and group.members.get(member.member_id) is member:
            self.arm_session(group, member)
            self._arm(self._sync_timers, group, member, member.rebalance_timeout_ms, "did not send SyncGroup in time")
        return JoinResult(ErrorCode.NONE, member.member_epoch, CONSUMER_PROTOCOL_TYPE, protocols[0][0], "",
                          member.member_id, [])

    def _update_group(self, group: ConsumerGroup, member: ConsumerMember, before: tuple | None, owned: Assignment,
                      out: list[Record]) -> None:
        """What a consumer-protocol member's full heartbeat moves (ConsumerMembership's steps): its
        metadata record when it changed; the group epoch and target assignment when its subscription
        or the subscribed topics changed; its reconciliation with the partitions it says it owns."""
        if before != _fields(member):
            out.append(self.consumer.member_metadata_record(group, member))
        subscription_changed = before is None or before[4:6] != _fields(member)[4:6]
        if subscription_changed or self.consumer.subscribed_topics_moved(group):
            self.consumer.bump_epoch(group, out)
        self.consumer.reconcile(group, member, owned, out)
        group.update_state()

    def _is_full(self, group: ConsumerGroup, member_id: str) -> bool:
        return member_id not in group.members and \
            len(group.members) >= self.broker.config.get_int("group.consumer.max.size")

    def _member_for_join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, unknown: bool,
                         out: list[Record]) -> ConsumerMember:
        """Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember with the classic protocol: a
        static member that joins with no member id takes the place of the one holding its instance id."""
        if instance_id is None:
            return group.members.get(member_id) or ConsumerMember(member_id)
        static = group.static_member(instance_id)
        if static is None:
            if not unknown:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            return ConsumerMember(member_id, instance_id=instance_id)
        if not unknown:
            if static.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
            return static
        self._cancel_all(group, static.member_id)
        member = replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0, session_timer=None,
                         revocation_timer=None)
        self.consumer.replace_static(group, static, member, out)
        return member

    # --- SyncGroup ---

    def sync(self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> tuple[ErrorCode, bytes]:
        try:
            member = self._classic_member(group, member_id, instance_id)
            if generation != member.member_epoch:
                raise _Refused(ErrorCode.ILLEGAL_GENERATION)
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                    (protocol_name is not None and protocol_name != member.classic.supported_protocols[0][0]):
                raise _Refused(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
                self._arm(self._join_timers, group, member, member.rebalance_timeout_ms,
                          "did not rejoin within its rebalance timeout", replace=False)
                raise _Refused(ErrorCode.REBALANCE_IN_PROGRESS)
        except _Refused as exc:
            return exc.code, b""
        self._cancel(self._sync_timers, group, member.member_id)
        self.arm_session(group, member)
        return ErrorCode.NONE, self.assignment_bytes(member)

    def assignment_bytes(self, member: ConsumerMember) -> bytes:
        """Kafka's prepareAssignment: the member's assigned partitions, in its subscription's version."""
        names: dict[str, list[int]] = {}
        for topic_id, partitions in member.assigned.items():
            topic = self.broker.topic_by_id(topic_id)
            if topic is not None and partitions:
                names[topic.name] = sorted(partitions)
        try:
            version = protocol_version(member.classic.supported_protocols[0][1])
        except (struct.error, IndexError):
            version = 0
        return encode_assignment(names, version)

    # --- Heartbeat ---

    def heartbeat(self, group: ConsumerGroup, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        try:
            member = self._classic_member(group, member_id, instance_id)
        except _Refused as exc:
            return exc.code
        if generation != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.arm_session(group, member)
        if member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS or (
                member.state == UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member)):
            self._arm(self._join_timers, group, member, member.rebalance_timeout_ms,
                      "did not rejoin within its rebalance timeout", replace=False)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # --- LeaveGroup ---

    async def leave(self, group: ConsumerGroup, members: list[tuple[str | None, str | None]]) -> list[ErrorCode]:
        error = self._writable(group)
        if error:
            return [error] * len(members)
        errors: list[ErrorCode] = []
        out: list[Record] = []
        rest: list[tuple[str | None, str | None]] = []
        for index, (member_id, instance_id) in enumerate(members):
            if self.directory.groups.get(group.group_id) is not group:
                rest = members[index:]  # a member's leaving downgraded the group: the rest leave the classic one
                break
            try:
                if instance_id is None:
                    member = self._classic_member(group, member_id or "", None)
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
                    if member_id and member.member_id != member_id:
                        raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
                    if member.classic is None:
                        raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            except _Refused as exc:
                errors.append(exc.code)
                continue
            log.info("member %s of consumer group %s left through LeaveGroup", member.member_id, group.group_id)
            self._cancel_all(group, member.member_id)
            self.consumer.fence_member(group, member, out)
            errors.append(ErrorCode.NONE)
        error = await self._store(group, out)
        errors = [error or code if code == ErrorCode.NONE else code for code in errors]
        return errors + (self.directory.classic.leave(group.group_id, rest) if rest else [])

    # --- members, timers, records ---

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID)
        if member.classic is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID)
        return member

    def arm_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = asyncio.get_running_loop().call_later(
            member.classic.session_timeout_ms / 1000, self._fence, group, member, "missed its session timeout")

    def _arm(self, timers: dict, group: ConsumerGroup, member: ConsumerMember, timeout_ms: int, why: str,
             replace: bool = True) -> None:
        key = (group.group_id, member.member_id)
        if key in timers:
            if not replace:
                return
            timers.pop(key).cancel()
        timers[key] = asyncio.get_running_loop().call_later(max(timeout_ms, 0) / 1000, self._fence, group, member, why)

    def _cancel(self, timers: dict, group: ConsumerGroup, member_id: str) -> None:
        timer = timers.pop((group.group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    def _cancel_all(self, group: ConsumerGroup, member_id: str) -> None:
        self._cancel(self._join_timers, group, member_id)
        self._cancel(self._sync_timers, group, member_id)

    def forget(self, group_id: str) -> None:
        """The group left this coordinator or changed type: its members' join and sync deadlines go."""
        for timers in (self._join_timers, self._sync_timers):
            for key in [k for k in timers if k[0] == group_id]:
                timers.pop(key).cancel()

    def _fence(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        self._cancel_all(group, member.member_id)
        if self.directory.groups.get(group.group_id) is not group or group.members.get(member.member_id) is not member:
            return
        self.consumer.fence_quietly(group, member.member_id, why)

    def _writable(self, group: ConsumerGroup) -> ErrorCode:
        """What a write to the group's partition would be refused with now: checked before a join or a
        leave changes the group, so that a refused write leaves it as the log has it."""
        try:
            self.consumer.group_log.check_writable(group.partition)
        except GroupError as exc:
            self.directory.refused(group.group_id, "the consumer group's state", exc.code)
            return exc.code
        return ErrorCode.NONE

    async def _store(self, group: ConsumerGroup, out: list[Record]) -> ErrorCode:
        if not out:
            return ErrorCode.NONE
        return await self.directory.store(group, out, "the consumer group's state")


def _fields(member: ConsumerMember) -> tuple:
    """What the member's MemberMetadata record holds; [4:6] is its subscription."""
    return (member.instance_id, member.rack_id, member.client_id, member.client_host,
            tuple(member.subscribed_topic_names), member.subscribed_topic_regex, member.rebalance_timeout_ms,
            member.server_assignor, member.classic)


def _supports_protocols(group: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a protocol every
    classic member of the group offers."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
        return False
    classic = [m for m in group.members.values() if m.classic is not None]
    if not classic:
        return True
    return any(all(name in {n for n, _ in m.classic.supported_protocols} for m in classic) for name, _ in protocols)


def _owned_ids(owned: dict[str, list[int]], broker) -> Assignment:
    result: Assignment = {}
    for name, partitions in owned.items():
        topic = broker.topic(name)
        if topic is not None and partitions:
            result.setdefault(topic.topic_id, set()).update(partitions)
    return result


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target another member still holds."""
    held = {(t, p) for m in group.members.values() if m is not member
            for owned in (m.assigned, m.pending_revocation) for t, ps in owned.items() for p in ps}
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(topic_id, set())
        if any(p not in mine and (topic_id, p) in held for p in partitions):
            return True
    return False
