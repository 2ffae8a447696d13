"""KIP-848 consumer groups: the model of a group whose members speak ConsumerGroupHeartbeat.

The coordinator owns the assignment (Kafka's ConsumerGroup, ConsumerGroupMember): every change
of membership or subscription bumps the group epoch; the target assignment is computed for that
epoch by the server-side assignor; each member reconciles towards its share of the target one
heartbeat at a time, revoking before another member receives (node.groups.consumer_reconciliation).
"""
from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from node.groups.consumer_records import ClassicMemberMetadata

EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"

# Kafka's MemberState names
MEMBER_STABLE = "STABLE"
UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"
MEMBER_UNKNOWN = "UNKNOWN"

Assignment = dict[uuid.UUID, set[int]]  # topic id -> partitions


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = MEMBER_STABLE
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # None for a member of the consumer protocol
    # Timers: the session (reset by every heartbeat) and the revocation deadline (rebalance timeout).
    session_timer: asyncio.TimerHandle | None = field(default=None, repr=False, compare=False)
    revocation_timer: asyncio.TimerHandle | None = field(default=None, repr=False, compare=False)
    revocation_epoch: int = field(default=-1, repr=False, compare=False)  # the epoch its revocation timer is for

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.revocation_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.revocation_timer = None


@dataclass
class ConsumerGroup:
    group_id: str
    partition: int
    group_type = "consumer"
    protocol_type = "consumer"  # what ListGroups names for it, as Kafka does
    state: str = EMPTY
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> its target assignment
    preferred_assignor: str | None = None
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Subscribed topic name -> (topic id, partition count) when the group epoch last moved: a change
    # of metadata that changes these bumps the epoch (Kafka's subscription metadata).
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    # The version of the topics' shapes (ConsumerMembership) subscription_metadata is known to hold
    # for; -1: not known (a group just loaded or converted).
    resolved_version: int = field(default=-1, repr=False, compare=False)

    def subscribed_topic_names(self) -> set[str]:
        return {name for member in self.members.values() for name in member.subscribed_topic_names}

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id else None
        return self.members.get(member_id) if member_id else None

    def update_state(self) -> None:
        """Kafka's ConsumerGroup.maybeUpdateGroupState."""
        if not self.members:
            self.state = EMPTY
        elif self.group_epoch > self.assignment_epoch:
            self.state = ASSIGNING
        elif any(m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE for m in self.members.values()):
            self.state = RECONCILING
        else:
            self.state = STABLE

    def cancel_timers(self) -> None:
        for member in self.members.values():
            member.cancel_timers()

    def resign(self) -> None:
        """Coordinated elsewhere now: members find the new coordinator on their next heartbeat."""
        self.cancel_timers()
        self.state = DEAD
