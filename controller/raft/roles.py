"""What a replica is in its current epoch, and the timers and tallies that go with it.

One class per state of Kafka's QuorumState (UnattachedState, ProspectiveState from KIP-996,
CandidateState, LeaderState, FollowerState, ResignedState); `RaftReplica` (controller/raft/
replica.py) owns exactly one of them at a time and replaces it on every transition, so nothing of a
past epoch leaks into the next one.

Differs from Kafka: these are plain records of deadlines (absolute milliseconds) rather than
Timer objects; the leader's fetch purgatory is a dict of parked Fetch envelopes here, and the
leader tracks voters by id (no directory ids).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from controller.raft.election_state import NO_ID
from controller.raft.messages import Envelope


class Role(enum.Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass
class Ballot:
    """The votes a prospective voter or candidate has collected in its epoch (Kafka's EpochElection)."""
    voters: frozenset[int]
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def record(self, voter: int, granted: bool) -> None:
        if voter in self.voters:
            (self.granted if granted else self.rejected).add(voter)

    @property
    def won(self) -> bool:
        return len(self.granted) >= self.majority

    @property
    def lost(self) -> bool:
        """Too many rejections for the rest to make a majority."""
        return len(self.voters) - len(self.rejected) < self.majority

    def unrecorded(self) -> frozenset[int]:
        return self.voters - self.granted - self.rejected


@dataclass
class Unattached:
    """Epoch known, leader not: waiting for a leader to announce itself, or for the election
    timeout (a voter), having voted for `voted_id` in this epoch or not yet."""
    epoch: int
    election_deadline: int
    voted_id: int = NO_ID
    role = Role.UNATTACHED
    leader_id = NO_ID


@dataclass
class Prospective:
    """KIP-996: asking the voters whether they would vote for this replica before it bumps the
    epoch, so a replica cut off from the quorum cannot disturb a healthy one when it returns."""
    epoch: int
    election_deadline: int
    ballot: Ballot
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    role = Role.PROSPECTIVE


@dataclass
class Candidate:
    """Campaigning in `epoch`, having voted for itself; after a lost or timed-out election it backs
    off (Kafka's binary exponential backoff) and becomes prospective again."""
    epoch: int
    election_deadline: int
    ballot: Ballot
    backoff_until: int | None = None
    role = Role.CANDIDATE
    leader_id = NO_ID


@dataclass
class Follower:
    """Fetching from `leader_id`. `last_leader_contact_ms` is when the leader last answered a fetch
    (or announced itself); a follower grants pre-votes only once that is a fetch timeout old."""
    epoch: int
    leader_id: int
    fetch_deadline: int
    voted_id: int = NO_ID
    last_leader_contact_ms: int | None = None
    role = Role.FOLLOWER


@dataclass
class Resigned:
    """A leader that gave up its epoch (lost its majority, or restarted): it tells the other voters
    with EndQuorumEpoch and waits an election timeout before campaigning."""
    epoch: int
    leader_id: int
    election_deadline: int
    unacknowledged: set[int]
    preferred_successors: tuple[int, ...] = ()
    role = Role.RESIGNED


@dataclass
class Leader:
    """Leading `epoch` since `epoch_start_offset` (the offset of its LeaderChange entry).

    `fetch_offsets` holds each other voter's last valid fetch offset (its log end offset, which the
    high watermark counts); `fetched_since_check` the voters that fetched since the check-quorum
    timer was last reset; `parked` the fetches waiting for new entries (Kafka's fetch purgatory).
    """
    epoch: int
    leader_id: int
    epoch_start_offset: int
    check_quorum_deadline: int
    unacknowledged: set[int]
    fetch_offsets: dict[int, int] = field(default_factory=dict)
    fetched_since_check: set[int] = field(default_factory=set)
    parked: dict[int, tuple[Envelope, int]] = field(default_factory=dict)
    role = Role.LEADER


State = Unattached | Prospective | Candidate | Follower | Resigned | Leader
