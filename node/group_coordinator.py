"""The classic consumer group protocol, as Kafka's GroupCoordinator runs it.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable. Joins park on
futures until every known member has rejoined (or the rebalance timeout drops the ones that
did not); the leader's SyncGroup hands every member its assignment. Session expiry and
rebalance deadlines are loop timers. Offsets and group metadata are written to the
coordinator's `__consumer_offsets` partition before they are acknowledged, and a node that
leads such a partition loads its groups from the log.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field

from cluster.formats.errors import ErrorCode
from cluster.formats.records import encode_batch, iter_batch_headers, iter_records
from node.groups import placement, records
from node.groups.records import CommittedOffset, StoredGroup, StoredMember

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


# What a failed __consumer_offsets append means to a group client (Kafka's GroupMetadataManager).
APPEND_ERRORS_FOR_GROUPS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
}


class GroupError(Exception):
    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


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
class Member:
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
class Group:
    group_id: str
    partition: int
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline: asyncio.TimerHandle | None = None
    initial_delay: bool = False
    state_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))

    def transition(self, state: str) -> None:
        self.state = state
        self.state_timestamp = int(time.time() * 1000)

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.group_instance_id == instance_id), None)

    def all_rejoined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.groups: dict[str, Group] = {}
        self.loaded_partitions: set[int] = set()
        config = broker.config
        self.initial_delay_ms = config.get_int("group.initial.rebalance.delay.ms")
        self.min_session_ms = config.get_int("group.min.session.timeout.ms")
        self.max_session_ms = config.get_int("group.max.session.timeout.ms")

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

    def group(self, group_id: str, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.partition_of(group_id))
        return group

    # --- loading from __consumer_offsets ---

    def load_partition(self, partition: int, partition_log) -> None:
        """Rebuild the groups and offsets of one partition from its log (on becoming its leader)."""
        offset = partition_log.log_start_offset
        while offset < partition_log.log_end_offset:
            data = partition_log.read(offset, 8 << 20, max_offset=partition_log.log_end_offset).records
            if not data:
                break
            for position, header in iter_batch_headers(data):
                offset = header.next_offset
                if header.is_control or header.compression:
                    continue
                for record in iter_records(memoryview(data)[position:position + header.size]):
                    self._apply_record(partition, record.key, record.value)
        self.loaded_partitions.add(partition)
        log.info("loaded %d groups from %s-%d", sum(g.partition == partition for g in self.groups.values()),
                 placement.OFFSETS_TOPIC, partition)

    def _apply_record(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        decoded = records.decode_key(key) if key else None
        if decoded is None:
            return
        group = self.groups.get(decoded[1])
        if group is None:
            if value is None:
                return
            group = self.groups[decoded[1]] = Group(decoded[1], partition)
        if decoded[0] == "offset":
            position = (decoded[2], decoded[3])
            if value is None:
                group.offsets.pop(position, None)
            else:
                group.offsets[position] = records.decode_offset_value(value)
        elif value is None:
            self._cancel_timers(self.groups.pop(decoded[1]))
        else:
            self._restore(group, records.decode_group_value(value))

    def _restore(self, group: Group, stored: StoredGroup) -> None:
        # A partition's log holds a record per generation: the sessions an earlier one armed must not
        # expire the members of the last one.
        self._cancel_timers(group)
        group.generation, group.protocol_type = stored.generation, stored.protocol_type
        group.protocol, group.leader = stored.protocol, stored.leader
        group.members = {m.member_id: Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                             m.session_timeout_ms, m.rebalance_timeout_ms, stored.protocol_type,
                                             [(stored.protocol or "", m.subscription)], m.assignment)
                         for m in stored.members}
        group.transition(STABLE if group.members else EMPTY)
        for member in group.members.values():
            self._arm_session(group, member)

    def unload_partition(self, partition: int) -> None:
        self.loaded_partitions.discard(partition)
        for group_id in [g.group_id for g in self.groups.values() if g.partition == partition]:
            group = self.groups.pop(group_id)
            self._cancel_timers(group)
            self._resign(group)

    @staticmethod
    def _resign(group: Group) -> None:
        """Members waiting on a group coordinated elsewhere now go and find the new coordinator
        (Kafka's onGroupUnloaded)."""
        group.transition(DEAD)
        for member in group.members.values():
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result((ErrorCode.NOT_COORDINATOR, b""))

    # --- writing to __consumer_offsets ---

    def _append(self, group: Group, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append to the group's __consumer_offsets partition; returns the offset after the batch."""
        key = (placement.OFFSETS_TOPIC, group.partition)
        partition_log = self.broker.replicas.get_log(*key)
        info = self.broker.partition(*key)
        if partition_log is None or info is None or info.leader != self.broker.node_id:
            raise GroupError(ErrorCode.NOT_COORDINATOR)
        partition_log.append(encode_batch(records, timestamp=int(time.time() * 1000)), leader_epoch=info.leader_epoch)
        self.broker.replicas.appended_as_leader(key)
        return partition_log.log_end_offset

    async def _append_replicated(self, group: Group, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append with acks=all, as Kafka writes offsets: answered once every in-sync replica has it."""
        key = (placement.OFFSETS_TOPIC, group.partition)
        info = self.broker.partition(*key)
        if info is not None and len(info.isr) < self.broker.replicas.effective_min_isr(key):
            raise GroupError(APPEND_ERRORS_FOR_GROUPS[ErrorCode.NOT_ENOUGH_REPLICAS])
        next_offset = self._append(group, records)
        error = await self.broker.replicas.wait_until_committed(
            key, next_offset, self.broker.config.get_int("offsets.commit.timeout.ms") / 1000)
        if error:
            raise GroupError(APPEND_ERRORS_FOR_GROUPS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR))

    def _group_record(self, group: Group) -> tuple[bytes, bytes]:
        stored = StoredGroup(group.protocol_type or "", group.generation, group.protocol, group.leader,
                             group.state_timestamp, [
                                 StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                              m.rebalance_timeout_ms, m.session_timeout_ms,
                                              m.metadata_for(group.protocol or ""), m.assignment)
                                 for m in group.members.values()])
        return records.group_key(group.group_id), records.group_value(stored)

    def _persist_group(self, group: Group) -> None:
        self._append(group, [self._group_record(group)])

    async def _store_assignment(self, group: Group) -> ErrorCode:
        """The leader's assignment, written with acks=all before any member is answered (Kafka's
        storeGroup): a coordinator that takes over after a crash then knows this generation."""
        try:
            await self._append_replicated(group, [self._group_record(group)])
        except GroupError as exc:
            log.error("cannot store group %s: error %d", group.group_id, exc.code)
            return exc.code
        except OSError as exc:
            log.error("cannot store group %s: %s", group.group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # --- JoinGroup ---

    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.group(group_id, create=True)
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
            member = group.members[member_id] = Member(member_id, instance_id, client_id, client_host,
                                                       session_timeout_ms, rebalance_timeout_ms, protocol_type,
                                                       protocols)
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

    def _protocols_compatible(self, group: Group, protocol_type: str, protocols) -> bool:
        if not protocols or not protocol_type:
            return False
        if not group.members:
            return True
        if group.protocol_type != protocol_type:
            return False
        offered = {name for name, _ in protocols}
        return any(all(name in {n for n, _ in m.protocols} for m in group.members.values()) for name in offered)

    def _replace_static_member(self, group: Group, old: Member, client_id: str) -> str:
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

    def _prepare_rebalance(self, group: Group) -> None:
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
            group.initial_delay = True
            group.join_deadline = loop.call_later(self.initial_delay_ms / 1000, self._end_initial_delay, group)
        else:
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            group.join_deadline = loop.call_later(timeout / 1000, self._complete_join, group)

    def _end_initial_delay(self, group: Group) -> None:
        group.initial_delay = False
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline = asyncio.get_running_loop().call_later(timeout / 1000, self._complete_join, group)
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING and not group.initial_delay and group.all_rejoined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
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
        group.protocol_type = next(iter(group.members.values())).protocol_type
        group.protocol = self._select_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(COMPLETING)
        for member in group.members.values():
            future, member.join_future = member.join_future, None
            if not future.done():
                future.set_result(self._join_result(group, member))
            self._arm_session(group, member)

    def _select_protocol(self, group: Group) -> str:
        members = list(group.members.values())
        candidates = [name for name, _ in members[0].protocols
                      if all(name in {n for n, _ in m.protocols} for m in members)]
        votes = {name: 0 for name in candidates}
        for member in members:
            choice = next(name for name, _ in member.protocols if name in votes)
            votes[choice] += 1
        return max(candidates, key=lambda name: votes[name])

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol)) for m in group.members.values()]
        return JoinResult(ErrorCode.NONE, group.generation, group.protocol_type, group.protocol, group.leader,
                          member.member_id, members)

    # --- SyncGroup ---

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        group = self.groups.get(group_id)
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
        if self.groups.get(group_id) is group and group.members.get(member_id) is member:
            self._arm_session(group, member)  # unless it left, or the group moved away, meanwhile
        return await future

    @staticmethod
    def _answer_syncs(group: Group, error: ErrorCode) -> None:
        for target in group.members.values():
            if target.sync_future is not None and not target.sync_future.done():
                target.sync_future.set_result((error, target.assignment))
            target.sync_future = None

    # --- Heartbeat, sessions, LeaveGroup ---

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        self._arm_session(group, member)
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state == PREPARING else ErrorCode.NONE

    def _arm_session(self, group: Group, member: Member) -> None:
        if member.expiry:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire_member, group, member.member_id)

    def _expire_member(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or member.join_future is not None:
            return  # a member waiting in JoinGroup is not expired, as in Kafka
        log.info("member %s of group %s missed its session timeout", member_id, group.group_id)
        self._remove_and_rebalance(group, [member_id])

    def _expire_pending(self, group: Group, member_id: str) -> None:
        group.pending.pop(member_id, None)
        self._maybe_complete_join(group)

    def leave(self, group_id: str, members: list[tuple[str | None, str | None]]) -> list[ErrorCode]:
        group = self.groups.get(group_id)
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

    def _remove_and_rebalance(self, group: Group, member_ids: list[str]) -> None:
        for member_id in member_ids:
            self._remove_member(group, member_id)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.expiry:
            member.expiry.cancel()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result((ErrorCode.UNKNOWN_MEMBER_ID, b""))

    def force_rebalance(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        """Start a rebalance of a group with members, exactly as a member joining it would: each member
        is answered REBALANCE_IN_PROGRESS on its next heartbeat (or pending SyncGroup) and rejoins, and
        one that does not rejoin within its rebalance timeout leaves the group. A group already
        preparing a rebalance is left as it is; an empty one has nobody to rebalance."""
        error = self.owns(group_id)
        group = self.groups.get(group_id)
        if error or group is None or group.state == DEAD:
            return error or ErrorCode.GROUP_ID_NOT_FOUND, None
        if group.state in (STABLE, COMPLETING):
            log.info("rebalance of group %s (generation %d) started on request", group_id, group.generation)
            self._prepare_rebalance(group)
        return ErrorCode.NONE, group

    def _safe_persist(self, group: Group) -> None:
        try:
            self._persist_group(group)
        except (GroupError, OSError) as exc:
            log.error("cannot store group %s: %s", group.group_id, exc)

    def _cancel_timers(self, group: Group) -> None:
        for handle in [group.join_deadline, *group.pending.values(), *(m.expiry for m in group.members.values())]:
            if handle:
                handle.cancel()

    # --- offsets ---

    def check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        group = self.groups.get(group_id)
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

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Offsets become visible to OffsetFetch only once they are on every in-sync replica."""
        group = self.group(group_id, create=True)
        batch = [(records.offset_key(group_id, topic, partition), records.offset_value(committed))
                 for (topic, partition), committed in offsets.items()]
        if batch:
            await self._append_replicated(group, batch)
        group.offsets.update(offsets)

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return group.offsets if group else {}

    def delete_offsets(self, group_id: str, positions: list[tuple[str, int]]) -> None:
        group = self.groups[group_id]
        batch = [(records.offset_key(group_id, t, p), None) for t, p in positions if (t, p) in group.offsets]
        if batch:
            self._append(group, batch)
        for position in positions:
            group.offsets.pop(position, None)

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state != EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        batch = [(records.offset_key(group_id, t, p), None) for t, p in group.offsets]
        batch.append((records.group_key(group_id), None))
        self._append(group, batch)
        self._cancel_timers(group)
        group.transition(DEAD)
        del self.groups[group_id]
        return ErrorCode.NONE

    def forget_deleted_topics(self, deleted: set[str]) -> None:
        """Tombstone the offsets of deleted topics, as Kafka does on topic deletion."""
        for group in list(self.groups.values()):
            if group.partition not in self.loaded_partitions:
                continue
            gone = [position for position in group.offsets if position[0] in deleted]
            if gone:
                try:
                    self.delete_offsets(group.group_id, gone)
                except GroupError:
                    pass  # no longer the coordinator: the new one cleans up

    def expire_offsets(self, retention_ms: int, now_ms: int | None = None) -> int:
        """Drop offsets of empty groups not committed for offsets.retention.minutes; then the group."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        expired = 0
        for group in list(self.groups.values()):
            if group.state != EMPTY or group.partition not in self.loaded_partitions:
                continue
            stale = [p for p, c in group.offsets.items() if now - c.commit_timestamp > retention_ms]
            try:
                self.delete_offsets(group.group_id, stale)
                expired += len(stale)
                if not group.offsets:
                    self.delete_group(group.group_id)
            except GroupError:
                continue
        return expired

    async def run_offset_expiry(self, interval_ms: int, retention_ms: int) -> None:
        """offsets.retention.check.interval.ms timer, as Kafka's offset expiration task."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            self.expire_offsets(retention_ms)

    def subscribed_topics(self, group: Group) -> set[str] | None:
        """Topics the members of a "consumer" group subscribe to; None when that cannot be read."""
        topics: set[str] = set()
        for member in group.members.values():
            if member.protocol_type != "consumer":
                return None
            try:
                topics.update(records.subscription_topics(member.metadata_for(group.protocol or "")))
            except (ValueError, struct.error, UnicodeDecodeError):
                return None
        return topics
