"""The durable part of a replica's quorum state: epoch, the vote it cast, the leader it knows.

Kafka's ElectionState and QuorumStateStore (raft/src/main/java/org/apache/kafka/raft/): a replica
writes its election state before it answers a vote or acts on a new epoch, so that after a crash it
never votes twice in one epoch nor forgets an epoch it has seen. `FileQuorumStateStore`
(controller/raft/quorum_state_file.py) keeps it in Kafka's `quorum-state` file;
`InMemoryQuorumStateStore` keeps it in memory for tests and the simulation, where it outlives the
replica as a file outlives a crashed process.

Differs from Kafka: no directory ids (KIP-853's voter keys); a vote is for a replica id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

NO_ID = -1


@dataclass(frozen=True)
class ElectionState:
    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voters: frozenset[int] = frozenset()

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_ID

    @property
    def has_voted(self) -> bool:
        return self.voted_id != NO_ID


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last state written, None when none ever was."""

    def write(self, state: ElectionState) -> None:
        """Writes durably: when this returns, a crash cannot lose `state`."""


class InMemoryQuorumStateStore:
    def __init__(self, state: ElectionState | None = None) -> None:
        self.state = state
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1
