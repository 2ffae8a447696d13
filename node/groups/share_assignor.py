"""The share-group assignor, as Kafka 4.1's SimpleAssignor ("simple") spreads partitions over members.

Each partition is given to `sharing = ceil(members / partitions)` members, and each member is given
its share of the `sharing * partitions` places, the shares differing by at most one. It is sticky:
a member keeps what it had, within its share and the partition's sharing, and only the places left
are handed out, partitions in order and members round-robin. When every member subscribes to the
same topics, all their partitions form one pool; otherwise each topic is spread over its own
subscribers.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable

ASSIGNOR_NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]
Assignment = dict[uuid.UUID, set[int]]


def assign(subscriptions: dict[str, set[uuid.UUID]], partition_counts: dict[uuid.UUID, int],
           current: dict[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment of every member. subscriptions: member id -> the ids of the existing
    topics it subscribes to (in the group's member order); partition_counts: topic id -> partitions;
    current: each member's target assignment so far."""
    target: dict[str, Assignment] = {member_id: {} for member_id in subscriptions}
    topics = set().union(*subscriptions.values()) if subscriptions else set()
    if len({frozenset(s) for s in subscriptions.values()}) == 1:
        pools = [(list(subscriptions), sorted(topics, key=str))]
    else:
        pools = [([m for m, s in subscriptions.items() if topic in s], [topic]) for topic in sorted(topics, key=str)]
    for members, pool_topics in pools:
        partitions = [(topic, p) for topic in pool_topics for p in range(partition_counts.get(topic, 0))]
        held = {member: _held(current.get(member, {}), pool_topics) for member in members}
        for member, places in _spread(members, partitions, held).items():
            for topic, partition in places:
                target[member].setdefault(topic, set()).add(partition)
    return target


def _held(assignment: Assignment, topics: Iterable[uuid.UUID]) -> list[TopicPartition]:
    return [(topic, p) for topic in topics for p in sorted(assignment.get(topic, ()))]


def _spread(members: list[str], partitions: list[TopicPartition],
            held: dict[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    if not members or not partitions:
        return {member: [] for member in members}
    sharing = _ceil_div(len(members), len(partitions))
    quota = _quotas(len(members), sharing * len(partitions))
    existing = set(partitions)
    given: dict[str, list[TopicPartition]] = {}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    for index, member in enumerate(members):
        # Keep what is still assignable, up to the member's quota and the partition's sharing.
        kept = []
        for tp in held[member]:
            if tp in existing and len(kept) < quota[index] and len(holders[tp]) < sharing:
                kept.append(tp)
                holders[tp].append(member)
        given[member] = kept
    unfilled = [m for i, m in enumerate(members) if len(given[m]) < quota[i]]
    quota_of = dict(zip(members, quota))
    turn = 0
    for tp in partitions:
        while len(holders[tp]) < sharing and unfilled:
            candidates = [m for m in unfilled if m not in holders[tp]]
            if not candidates:
                break
            member = _next_turn(unfilled, candidates, turn)
            turn = unfilled.index(member) + 1
            given[member].append(tp)
            holders[tp].append(member)
            if len(given[member]) >= quota_of[member]:
                unfilled.remove(member)
                turn -= 1
    return given


def _quotas(members: int, places: int) -> list[int]:
    """Each member's number of places: ceil(places * (i+1) / members) - ceil(places * i / members)."""
    return [_ceil_div(places * (i + 1), members) - _ceil_div(places * i, members) for i in range(members)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _next_turn(unfilled: list[str], candidates: list[str], turn: int) -> str:
    """Round-robin over the unfilled members, from where the last place was given."""
    start = turn % len(unfilled)
    return next(m for m in unfilled[start:] + unfilled[:start] if m in candidates)
