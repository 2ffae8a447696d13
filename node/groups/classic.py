"""Classic groups: membership and the rebalance protocol of JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable. Joins park on
futures until every known member has rejoined (or the rebalance timeout drops the ones that
did not); the leader's SyncGroup hands every member its assignment. Session expiry and
rebalance deadlines are loop timers. Each generation's assignment is written to the group's
`__consumer_offsets` partition before any member is told it.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field

from cluster.formats.errors import ErrorCode
from node.groups.persistence import GroupError, GroupLog
from node.groups.records import (
    StoredGroup, StoredMember, decode_group_value, group_key, group_value, subscription_topics,
)

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


@dataclass
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    expiry: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class ClassicGroup:
    group_id: str
    partition: int
    group_type = "classic"
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    join_deadline: asyncio.TimerHandle | None = None
    initial_delay: bool = False
    joined_during_delay: bool = False  # a new member arrived while the initial delay ran
    state_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))

    def transition(self, state: str) -> None:
        self.state = state
        self.state_timestamp = int(time.time() * 1000)

    def add_member(self, member: ClassicMember) -> ClassicMember:
        """Every member that joins enters the group here. The first one fixes the group's protocol
        type at once, as in Kafka: members joining before the first rebalance completes are
        checked against it."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        return member

    def static_member(self, instance_id: str | None) -> ClassicMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.group_instance_id == instance_id), None)

    def all_rejoined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    def cancel_timers(self) -> None:
        for handle in [self.join_deadline, *self.pending.values(), *(m.expiry for m in self.members.values())]:
            if handle:
                handle.cancel()

    def resign(self) -> None:
        """Members waiting on a group coordinated elsewhere now go and find the new coordinator
        (Kafka's onGroupUnloaded)."""
        self.transition(DEAD)
        for member in self.members.values():
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result((ErrorCode.NOT_COORDINATOR, b""))

    def record(self) -> tuple[bytes, bytes]:
        """The group's GroupMetadata record: its generation, and each member with its assignment."""
        stored = StoredGroup(self.protocol_type or "", self.generation, self.protocol, self.leader,
                             self.state_timestamp, [
                                 StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                              m.rebalance_timeout_ms, m.session_timeout_ms,
                                              m.metadata_for(self.protocol or ""), m.assignment)
                                 for m in self.members.values()])
        return group_key(self.group_id), group_value(stored)


def select_protocol(group: ClassicGroup) -> str:
    """Kafka's selectProtocol: of the protocols every member offers, the one most members prefer."""
    members = list(group.members.values())
    candidates = [name for name, _ in members[0].protocols
                  if all(name in {n for n, _ in m.protocols} for m in members)]
    votes = {name: 0 for name in candidates}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in votes)
        votes[choice] += 1
    return max(candidates, key=lambda name: votes[name])


class ClassicMembership:
    """The classic protocol, run on the classic groups of the coordinator's group map
    (`directory.group(group_id, create=...)`), which every group type shares."""

    def __init__(self, config, directory, group_log: GroupLog):
        self.directory = directory
        self.group_log = group_log
        self.initial_delay_ms = config.get_int("group.initial.rebalance.delay.ms")
        self.min_session_ms = config.get_int("group.min.session.timeout.ms")
        self.max_session_ms = config.get_int("group.max.session.timeout.ms")

    # --- JoinGroup ---

    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.directory.group(group_id, create=True)
        if not self._protocols_compatible(group, protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if not member_id:
            static = group.static_member(instance_id)
            if static is not None:
                member_id = self._replace_static_member(group, static, client_id)
            elif require_known_member and instance_id is None:
                # Kafka (KIP-394): hand out the id first, so that a client that dies before
                # rejoining does not leave an unknown member blocking the rebalance.
                new_id = f"{client_id}-{uuid.uuid4()}"
                group.pending[new_id] = asyncio.get_running_loop().call_later(
                    session_timeout_ms / 1000, self._expire_pending, group, new_id)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            else:
                member_id = f"{client_id}-{uuid.uuid4()}"
        elif member_id not in group.members and member_id not in group.pending:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        pending_timer = group.pending.pop(member_id, None)
        if pending_timer:
            pending_timer.cancel()
        member = group.members.get(member_id)
        if member is not None and member.protocols == protocols \
                and (group.state == COMPLETING or (group.state == STABLE and member_id != group.leader)):
            # Nothing changed (the member may have missed its JoinGroup answer): the current
            # generation, no rebalance. Only the leader's rejoin of a stable group starts one, as in Kafka.
            self._arm_session(group, member)
            return self._join_result(group, member)
        if member is None:
            group.joined_during_delay |= group.initial_delay
            member = group.add_member(ClassicMember(member_id, instance_id, client_id, client_host, session_timeout_ms,
                                                    rebalance_timeout_ms, protocol_type, protocols))
        else:
            member.protocols, member.session_timeout_ms = protocols, session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if member.expiry:
            member.expiry.cancel()
            member.expiry = None
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id))
        member.join_future = asyncio.get_running_loop().create_future()
        future = member.join_future
        if group.state in (EMPTY, STABLE, COMPLETING):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return await future

    def _protocols_compatible(self, group: ClassicGroup, protocol_type: str, protocols) -> bool:
        """Kafka's supportsProtocols: the group's protocol type, and one protocol every member offers."""
        if not protocols or not protocol_type:
            return False
        if not group.members:
            return True
        if group.protocol_type != protocol_type:
            return False
        offered = {name for name, _ in protocols}
        return any(all(name in {n for n, _ in m.protocols} for m in group.members.values()) for name in offered)

    def _replace_static_member(self, group: ClassicGroup, old: ClassicMember, client_id: str) -> str:
        """A static member that restarts takes its old place under a new member id."""
        new_id = f"{client_id}-{uuid.uuid4()}"
        del group.members[old.member_id]
        if old.expiry:
            old.expiry.cancel()
        for future in (old.join_future, old.sync_future):
            if future is not None and not future.done():
                future.set_result(JoinResult(ErrorCode.FENCED_INSTANCE_ID) if future is old.join_future
                                  else (ErrorCode.FENCED_INSTANCE_ID, b""))
        if group.leader == old.member_id:
            group.leader = new_id
        old.member_id = new_id
        old.join_future = old.sync_future = old.expiry = None
        group.members[new_id] = old
        return new_id

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state == COMPLETING:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))
        was_empty = group.state == EMPTY
        group.transition(PREPARING)
        loop = asyncio.get_running_loop()
        if group.join_deadline:
            group.join_deadline.cancel()
        if was_empty and self.initial_delay_ms > 0:
            group.initial_delay, group.joined_during_delay = True, False
            rebalance_timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.join_deadline = loop.call_later(self.initial_delay_ms / 1000, self._end_initial_delay, group,
                                                  max(rebalance_timeout - self.initial_delay_ms, 0))
        else:
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.join_deadline = loop.call_later(timeout / 1000, self._complete_join, group)

    def _end_initial_delay(self, group: ClassicGroup, remaining_ms: int) -> None:
        """As Kafka's InitialDelayedJoin: while members keep arriving, the delay starts again, for
        at most the rebalance timeout in all."""
        if self._replaced(group):
            return
        if group.joined_during_delay and remaining_ms > 0:
            group.joined_during_delay = False
            delay_ms = min(self.initial_delay_ms, remaining_ms)
            group.join_deadline = asyncio.get_running_loop().call_later(
                delay_ms / 1000, self._end_initial_delay, group, remaining_ms - delay_ms)
            return
        group.initial_delay = False
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline = asyncio.get_running_loop().call_later(timeout / 1000, self._complete_join, group)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        if group.state == PREPARING and not group.initial_delay and group.all_rejoined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if group.state != PREPARING or self._replaced(group):
            return
        if group.join_deadline:
            group.join_deadline.cancel()
            group.join_deadline = None
        group.initial_delay = False
        for member_id in [m.member_id for m in group.members.values() if m.join_future is None]:
            self._remove_member(group, member_id)  # did not rejoin in time
        group.generation += 1
        if not group.members:
            group.protocol = group.leader = None
            group.transition(EMPTY)
            self._safe_persist(group)
            return
        group.protocol = self._select_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(COMPLETING)
        for member in group.members.values():
            future, member.join_future = member.join_future, None
            if not future.done():
                future.set_result(self._join_result(group, member))
            self._arm_session(group, member)

    def _select_protocol(self, group: ClassicGroup) -> str:
        return select_protocol(group)

    def _join_result(self, group: ClassicGroup, member: ClassicMember) -> JoinResult:
        members = []
        if member.member_id == group.leader:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol)) for m in group.members.values()]
        return JoinResult(ErrorCode.NONE, group.generation, group.protocol_type, group.protocol, group.leader,
                          member.member_id, members)

    # --- SyncGroup ---

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        group = self.directory.group(group_id)
        member = group.members.get(member_id) if group else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION, b""
        if group.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        if group.state == STABLE:
            self._arm_session(group, member)
            return ErrorCode.NONE, member.assignment
        member.sync_future = asyncio.get_running_loop().create_future()
        future = member.sync_future
        if member_id == group.leader:
            for target in group.members.values():
                target.assignment = assignments.get(target.member_id, b"")
            error = await self._store_assignment(group)
            # Members that joined or left while it was written started a new rebalance, which
            # has answered every waiting member already.
            if group.state == COMPLETING and group.generation == generation:
                if error:
                    for target in group.members.values():
                        target.assignment = b""
                    self._answer_syncs(group, error)
                    self._prepare_rebalance(group)
                else:
                    group.transition(STABLE)
                    self._answer_syncs(group, ErrorCode.NONE)
        if self.directory.group(group_id) is group and group.members.get(member_id) is member:
            self._arm_session(group, member)  # unless it left, or the group moved away, meanwhile
        return await future

    @staticmethod
    def _answer_syncs(group: ClassicGroup, error: ErrorCode) -> None:
        for target in group.members.values():
            if target.sync_future is not None and not target.sync_future.done():
                target.sync_future.set_result((error, target.assignment))
            target.sync_future = None

    # --- Heartbeat, sessions, LeaveGroup ---

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        group = self.directory.group(group_id)
        member = group.members.get(member_id) if group else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        self._arm_session(group, member)
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state == PREPARING else ErrorCode.NONE

    def _arm_session(self, group: ClassicGroup, member: ClassicMember) -> None:
        if member.expiry:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire_member, group, member.member_id)

    def _expire_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or member.join_future is not None or self._replaced(group):
            return  # a member waiting in JoinGroup is not expired, as in Kafka
        log.info("member %s of group %s missed its session timeout", member_id, group.group_id)
        self._remove_and_rebalance(group, [member_id])

    def _expire_pending(self, group: ClassicGroup, member_id: str) -> None:
        group.pending.pop(member_id, None)
        if self._replaced(group):
            return
        self._maybe_complete_join(group)

    def leave(self, group_id: str, members: list[tuple[str | None, str | None]]) -> list[ErrorCode]:
        group = self.directory.group(group_id)
        errors, leaving = [], []
        for member_id, instance_id in members:
            member = None
            if group is not None:
                member = group.static_member(instance_id) if instance_id else group.members.get(member_id)
                if member is not None and instance_id and member_id and member.member_id != member_id:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
            if member is None:
                if group is not None and member_id in group.pending:
                    group.pending.pop(member_id).cancel()
                    errors.append(ErrorCode.NONE)
                    continue
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            leaving.append(member.member_id)
            errors.append(ErrorCode.NONE)
        if leaving:
            self._remove_and_rebalance(group, leaving)
        return errors

    def _remove_and_rebalance(self, group: ClassicGroup, member_ids: list[str]) -> None:
        for member_id in member_ids:
            self._remove_member(group, member_id)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.expiry:
            member.expiry.cancel()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result((ErrorCode.UNKNOWN_MEMBER_ID, b""))

    def force_rebalance(self, group: ClassicGroup) -> None:
        """Start a rebalance of a group with members, exactly as a member joining it would: each member
        is answered REBALANCE_IN_PROGRESS on its next heartbeat (or pending SyncGroup) and rejoins, and
        one that does not rejoin within its rebalance timeout leaves the group. A group already
        preparing a rebalance is left as it is; an empty one has nobody to rebalance."""
        if group.state in (STABLE, COMPLETING):
            log.info("rebalance of group %s (generation %d) started on request", group.group_id, group.generation)
            self._prepare_rebalance(group)

    # --- groups converted between the protocols (node.groups.migration) ---

    def _replaced(self, group: ClassicGroup) -> bool:
        """A timer of a group that is no longer the group map's (it became a consumer group, or was
        deleted) does nothing: its members are the new group's business."""
        return self.directory.groups.get(group.group_id) is not group

    @staticmethod
    def release_waiting(group: ClassicGroup) -> None:
        """Members waiting in JoinGroup or SyncGroup of a group that becomes a consumer group rejoin
        it (Kafka's completeAllJoinFutures/completeAllSyncFutures with REBALANCE_IN_PROGRESS). Its
        timers do nothing once the group map holds the consumer group."""
        for member in group.members.values():
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))

    def adopt(self, group: ClassicGroup, rebalance: bool) -> None:
        """A consumer group converted into this classic group: its members' sessions run from now,
        and, when a member's leaving converted it, the others rejoin."""
        for member in group.members.values():
            self._arm_session(group, member)
        if rebalance:
            self._prepare_rebalance(group)

    # --- the group's record in __consumer_offsets ---

    def replay(self, group: ClassicGroup, value: bytes) -> None:
        """A GroupMetadata record read back from the group's partition: its last generation."""
        stored = decode_group_value(value)
        # A partition's log holds a record per generation: the sessions an earlier one armed must not
        # expire the members of the last one.
        group.cancel_timers()
        group.generation, group.protocol_type = stored.generation, stored.protocol_type
        group.protocol, group.leader = stored.protocol, stored.leader
        group.members = {m.member_id: ClassicMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                                    m.session_timeout_ms, m.rebalance_timeout_ms, stored.protocol_type,
                                                    [(stored.protocol or "", m.subscription)], m.assignment)
                         for m in stored.members}
        group.transition(STABLE if group.members else EMPTY)
        for member in group.members.values():
            self._arm_session(group, member)

    def _persist_group(self, group: ClassicGroup) -> None:
        self.group_log.append(group.partition, [group.record()])

    async def _store_assignment(self, group: ClassicGroup) -> ErrorCode:
        """The leader's assignment, written with acks=all before any member is answered (Kafka's
        storeGroup): a coordinator that takes over after a crash then knows this generation."""
        return await self.directory.store(group, [group.record()], "the assignment")

    def _safe_persist(self, group: ClassicGroup) -> None:
        try:
            self._persist_group(group)
        except GroupError as exc:
            self.directory.refused(group.group_id, "the empty generation", exc.code)
        except OSError as exc:
            log.error("cannot store group %s: %s", group.group_id, exc)

    # --- what the offset store asks of a classic group ---

    def check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        group = self.directory.group(group_id)
        if generation < 0 and not member_id:
            # A commit from outside the group protocol (assign()-mode consumers, admin tools).
            return ErrorCode.NONE if group is None or group.state == EMPTY else ErrorCode.UNKNOWN_MEMBER_ID
        member = group.static_member(instance_id) if group and instance_id else (
            group.members.get(member_id) if group else None)
        if member is None or (instance_id and member.member_id != member_id):
            return ErrorCode.FENCED_INSTANCE_ID if instance_id and member is not None else ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        # A member told to rejoin may still commit what it consumed (as consumers do on revocation);
        # only between the join and the assignment is its generation not yet one to commit in.
        if group.state == COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        self._arm_session(group, member)
        return ErrorCode.NONE

    def check_transactional_commit(self, group_id: str, generation: int, member_id: str,
                                   instance_id: str | None) -> ErrorCode:
        """Kafka's validateOffsetCommit for TxnOffsetCommit. A producer that names no generation,
        member or instance (TxnOffsetCommit v0-2 cannot) commits whatever the group's state; one
        that names them must be a member of the group's generation. Unlike a member's own commit it
        neither keeps the member's session alive nor waits out a rebalance."""
        group = self.directory.group(group_id)
        state = group.state if group else EMPTY
        if generation < 0 and (state == EMPTY or (not member_id and instance_id is None)):
            return ErrorCode.NONE
        members = group.members if group else {}
        if instance_id is not None:
            static = group.static_member(instance_id) if group else None
            if static is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if static.member_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.ILLEGAL_GENERATION if generation != group.generation else ErrorCode.NONE

    def subscribed_topics(self, group: ClassicGroup) -> set[str] | None:
        """Topics the members of a "consumer" group subscribe to; None when that cannot be read."""
        topics: set[str] = set()
        for member in group.members.values():
            if member.protocol_type != "consumer":
                return None
            try:
                topics.update(subscription_topics(member.metadata_for(group.protocol or "")))
            except (ValueError, struct.error, UnicodeDecodeError):
                return None
        return topics