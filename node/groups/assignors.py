"""Server-side assignors of KIP-848 consumer groups: `uniform` and `range`, as Kafka names them.

Pure functions from the members' subscriptions, the subscribed topics' partition counts and the
current target assignment to the next target assignment (Kafka's ConsumerGroupPartitionAssignor).

- uniform: every partition goes to one member subscribed to its topic, the members' partition
  counts as even as their subscriptions allow, and partitions stay with the member that has them
  whenever balance permits (Kafka's UniformAssignor: OptimizedUniformAssignmentBuilder for equal
  subscriptions, GeneralUniformAssignmentBuilder otherwise; both reach this balance).
- range: per topic, the subscribed members take contiguous ranges of partitions, the first
  `partitions % members` of them one more (Kafka's RangeAssignor). Members are ordered as Kafka's
  sortMemberIds orders them: static members first, by instance id, then the others by member id,
  so that a static member rejoining under a new member id keeps its ranges.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, set[int]]


@dataclass
class MemberSubscription:
    topics: set[uuid.UUID]  # the topic ids the member is subscribed to (names and regex resolved)
    current: Assignment = field(default_factory=dict)  # its part of the current target assignment
    instance_id: str | None = None  # group.instance.id of a static member


def uniform(members: dict[str, MemberSubscription], partition_counts: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    owner: dict[tuple[uuid.UUID, int], str] = {}
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {member_id: [] for member_id in members}
    for member_id in sorted(members):  # keep what each member has, where it is still valid
        for topic_id, partitions in members[member_id].current.items():
            if topic_id not in members[member_id].topics:
                continue
            for p in sorted(partitions):
                if p < partition_counts.get(topic_id, 0) and (topic_id, p) not in owner:
                    owner[(topic_id, p)] = member_id
                    owned[member_id].append((topic_id, p))
    eligible = {topic_id: sorted(m for m, sub in members.items() if topic_id in sub.topics)
                for topic_id in partition_counts}
    for topic_id in sorted(partition_counts, key=str):
        for p in range(partition_counts[topic_id]):
            if (topic_id, p) not in owner and eligible[topic_id]:
                member_id = min(eligible[topic_id], key=lambda m: (len(owned[m]), m))
                owner[(topic_id, p)] = member_id
                owned[member_id].append((topic_id, p))
    _balance(owned, eligible)
    return {member_id: _as_assignment(tps) for member_id, tps in owned.items()}


def _balance(owned: dict[str, list[tuple[uuid.UUID, int]]], eligible: dict[uuid.UUID, list[str]]) -> None:
    """Move partitions from the fullest members to emptier ones that may take them, while one is
    at least two partitions ahead: the last-gained partitions move first, so old ones stay put."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in reversed(owned[giver]):
                takers = [m for m in eligible[tp[0]] if len(owned[m]) < len(owned[giver]) - 1]
                if takers:
                    taker = min(takers, key=lambda m: (len(owned[m]), m))
                    owned[giver].remove(tp)
                    owned[taker].append(tp)
                    moved = True
                    break
            if moved:
                break


def range_(members: dict[str, MemberSubscription], partition_counts: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    target: dict[str, Assignment] = {member_id: {} for member_id in members}
    for topic_id, count in partition_counts.items():
        subscribers = sorted((m for m, sub in members.items() if topic_id in sub.topics),
                             key=lambda m: _range_order(m, members[m]))
        if not subscribers:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = quota + (1 if index < extra else 0)
            if size:
                target[member_id][topic_id] = set(range(start, start + size))
            start += size
    return target


def _range_order(member_id: str, subscription: MemberSubscription) -> tuple[int, str]:
    if subscription.instance_id is not None:
        return 0, subscription.instance_id
    return 1, member_id


def _as_assignment(tps: list[tuple[uuid.UUID, int]]) -> Assignment:
    result: Assignment = {}
    for topic_id, p in tps:
        result.setdefault(topic_id, set()).add(p)
    return result


ASSIGNORS: dict[str, Callable[[dict[str, MemberSubscription], dict[uuid.UUID, int]], dict[str, Assignment]]] = {
    "uniform": uniform,
    "range": range_,
}
