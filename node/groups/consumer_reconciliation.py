"""How a consumer group member moves towards its target assignment (Kafka's CurrentAssignmentBuilder).

A partition is revoked from its owner before another member receives it: the owner sees it in its
pending revocations (state UNREVOKED_PARTITIONS) and keeps its epoch until it reports, in a
heartbeat's owned partitions, that it no longer has them; the receiver waits for the release
(UNRELEASED_PARTITIONS) and takes the partition on a later heartbeat. A member's epoch advances to
the target assignment's epoch only once it has revoked what it must.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from node.groups.consumer import (
    MEMBER_STABLE, MEMBER_UNKNOWN, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, Assignment,
)

Owned = dict[uuid.UUID, set[int]] | None  # what a heartbeat says the member owns; None: not said


class FencedMember(Exception):
    """The member must abandon its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


@dataclass
class Reconciled:
    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: Assignment
    pending_revocation: Assignment


class PartitionEpochs:
    """Kafka's currentPartitionEpoch: the epoch of the member (other than `exclude`) that holds a
    partition, assigned or still to revoke; -1 when none does. The map of every held partition is
    built on the first question only: a member at its target assignment asks none."""

    def __init__(self, group, exclude: str):
        self._group, self._exclude = group, exclude
        self._epochs: dict[tuple[uuid.UUID, int], int] | None = None

    def __call__(self, topic_id: uuid.UUID, partition: int) -> int:
        if self._epochs is None:
            self._epochs = {}
            for member_id, member in self._group.members.items():
                if member_id == self._exclude:
                    continue
                for held in (member.assigned, member.pending_revocation):
                    for held_topic, partitions in held.items():
                        for p in partitions:
                            self._epochs[(held_topic, p)] = member.member_epoch
        return self._epochs.get((topic_id, partition), -1)


def reconcile(current: Reconciled, target_epoch: int, target: Assignment, owned: Owned,
              partition_epoch: Callable[[uuid.UUID, int], int]) -> Reconciled:
    """The member's next state. partition_epoch(topic, partition) is the epoch of the member that
    holds the partition (assigned or pending revocation), -1 when no member does."""
    if current.state == MEMBER_STABLE:
        if current.member_epoch != target_epoch:
            return _next(current, current.member_epoch, target_epoch, target, owned, partition_epoch)
        return current
    if current.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.pending_revocation):
            return current
        return _next(current, current.member_epoch + 1, target_epoch, target, owned, partition_epoch)
    if current.state == UNRELEASED_PARTITIONS:
        return _next(current, current.member_epoch, target_epoch, target, owned, partition_epoch)
    if current.state == MEMBER_UNKNOWN:
        if owned is None or any(owned.values()):
            raise FencedMember("The consumer group member is in a unknown state. "
                               "The member must abandon all its partitions and rejoin.")
        return _next(current, target_epoch, target_epoch, target, owned, partition_epoch)
    return current


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(partitions.get(topic_id, set()) & ps for topic_id, ps in owned.items())


def _next(current: Reconciled, member_epoch: int, target_epoch: int, target: Assignment, owned: Owned,
          partition_epoch: Callable[[uuid.UUID, int], int]) -> Reconciled:
    unreleased = False
    assigned: Assignment = {}
    revoking: Assignment = {}
    receiving: Assignment = {}
    for topic_id in set(target) | set(current.assigned):
        wanted = target.get(topic_id, set())
        have = current.assigned.get(topic_id, set())
        kept = have & wanted
        to_receive = wanted - kept
        free = {p for p in to_receive if partition_epoch(topic_id, p) == -1}
        unreleased = unreleased or free != to_receive
        if kept:
            assigned[topic_id] = kept
        if have - kept:
            revoking[topic_id] = have - kept
        if free:
            receiving[topic_id] = free
    if revoking and _owns_any(owned, revoking):
        return Reconciled(member_epoch, current.member_epoch, UNREVOKED_PARTITIONS, assigned, revoking)
    for topic_id, ps in receiving.items():
        assigned.setdefault(topic_id, set()).update(ps)
    state = UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE
    return Reconciled(target_epoch, current.member_epoch, state, assigned, {})

