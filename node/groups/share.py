"""Share groups (KIP-932): membership and assignment of ShareGroupHeartbeat.

A share group's members heartbeat with ids they chose themselves; the coordinator answers with a
member epoch and the partitions the member is to fetch from. Unlike a consumer group there is no
revocation phase: a member is given its target assignment at once, and a partition may be assigned
to several members (the partition leader hands each record to one of them).
"""
from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = 0
    subscribed_topic_names: list[str] = field(default_factory=list)
    assigned: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False, compare=False)


@dataclass
class ShareGroup:
    group_id: str
    partition: int
    group_type = "share"
    state: str = EMPTY
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, dict[uuid.UUID, set[int]]] = field(default_factory=dict)


class ShareMembership:
    """ShareGroupHeartbeat and ShareGroupDescribe on the share groups of the coordinator's group map."""

    def __init__(self, broker, directory, group_log):
        self.broker = broker
        self.directory = directory
        self.group_log = group_log

    def remove_member(self, group: ShareGroup, member_id: str) -> None:
        raise NotImplementedError

    def tombstones(self, group: ShareGroup) -> list[tuple[bytes, None]]:
        raise NotImplementedError

    def replay(self, group_id: str, partition: int, key_type: int, key, value: bytes | None) -> None:
        raise NotImplementedError
