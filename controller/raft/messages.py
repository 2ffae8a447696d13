"""The quorum's RPCs as plain values: Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch.

Each dataclass carries the fields of Kafka's message of the same name (VoteRequest.json,
BeginQuorumEpochRequest.json, EndQuorumEpochRequest.json, FetchRequest.json and their responses)
with Kafka's meanings, for the one partition a quorum replicates (`__cluster_metadata-0`), so the
topic and partition levels of Kafka's messages are left out. -1 means "none" where Kafka uses it
(no leader, unknown epoch, unknown high watermark).

Differs from Kafka: an `Envelope` names the sender and the receiver and carries a correlation id
that a response echoes; the transport around the state machine maps ids to connections, and Kafka's
request header (api key, version, correlation id) and listener endpoints are the transport's
business. Fetch records are `LogEntry` values (offset, epoch, payload) rather than record batches;
the on-disk adapter turns them into batches. FetchSnapshot is not here: a Fetch answer's
`snapshot_id` is where the leader says a follower must fetch a snapshot instead of records, and this
leader never says so yet because its log keeps everything from offset 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from cluster.formats.errors import ErrorCode
from controller.raft.log import LogEntry

NO_LEADER = -1
NO_EPOCH = -1
UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class VoteRequest:
    """A candidate (or, with `pre_vote`, a prospective voter, KIP-996) asking for a vote.

    `candidate_epoch` is the epoch the candidate campaigns in; a pre-vote carries the sender's
    current epoch unchanged (Kafka 4.0's ReplicaEpoch), so asking never bumps anyone's epoch.
    `last_offset_epoch` and `last_offset` describe the end of the candidate's log, which a voter
    compares with its own (epoch first, then offset) before granting.
    """
    cluster_id: str
    candidate_id: int
    candidate_epoch: int
    last_offset_epoch: int
    last_offset: int
    voter_id: int
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH
    vote_granted: bool = False


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    """A new leader telling a voter that it leads `leader_epoch`."""
    cluster_id: str
    leader_id: int
    leader_epoch: int
    voter_id: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    """A leader resigning `leader_epoch`; `preferred_successors` lists the other voters by how far
    they had fetched, furthest first, so the most caught-up one campaigns first."""
    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True)
class FetchRequest:
    """A follower (voter or observer) fetching from `fetch_offset`; `last_fetched_epoch` is the
    epoch of the entry before it, which the leader checks for divergence."""
    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 0


@dataclass(frozen=True)
class EpochEndOffset:
    """Where the leader's log for `epoch` ends: the follower truncates to at most `end_offset`."""
    epoch: int
    end_offset: int


@dataclass(frozen=True)
class SnapshotId:
    end_offset: int
    epoch: int


@dataclass(frozen=True)
class FetchResponse:
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH
    high_watermark: int = UNKNOWN_OFFSET
    records: tuple[LogEntry, ...] = ()
    diverging_epoch: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None


Request = Union[VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest]
Response = Union[VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse]
REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest)


@dataclass(frozen=True)
class Envelope:
    """One message between two replicas; a response echoes its request's `correlation_id`."""
    source: int
    destination: int
    correlation_id: int
    body: Request | Response

    @property
    def is_request(self) -> bool:
        return isinstance(self.body, REQUEST_TYPES)
