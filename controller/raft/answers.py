"""How a replica answers the quorum's requests: Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch.

Kafka's KafkaRaftClient handleVoteRequest, handleBeginQuorumEpochRequest,
handleEndQuorumEpochRequest and handleFetchRequest are the model, checks in Kafka's order and with
Kafka's error codes: INCONSISTENT_CLUSTER_ID for another cluster's id; INVALID_REQUEST for
impossible offsets or epochs; FENCED_LEADER_EPOCH for an epoch older than the replica's;
UNKNOWN_LEADER_EPOCH for a Fetch in an epoch the replica has not reached; NOT_LEADER_OR_FOLLOWER
for a Fetch to a replica that does not lead. Every answer carries the replica's epoch and the
leader it knows, which is how peers learn of a new epoch or leader. Every function here takes the
answering `RaftReplica` (controller/raft/replica.py, which imports this module, hence no import back).

Differs from Kafka: requests from outside the voter set (a Vote from an observer, a Begin- or
EndQuorumEpoch from a replica that is no voter, or any of them sent to an observer) get Kafka 3.x's
INCONSISTENT_VOTER_SET (Kafka 3.8+ checks voter keys with INVALID_VOTER_KEY instead); a request
naming a different leader for an epoch whose leader the replica knows gets INVALID_REQUEST (Kafka
throws IllegalStateException and stops its Raft thread). A follower grants a pre-vote only when its
leader has not answered it for a fetch timeout (KIP-996's rule).
"""
from __future__ import annotations

from cluster.formats.errors import ErrorCode
from controller.raft.election_state import NO_ID
from controller.raft.log import OffsetAndEpoch, validate_fetch_position
from controller.raft.messages import (
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    EpochEndOffset, Envelope, FetchRequest, FetchResponse, Response, VoteRequest, VoteResponse,
)
from controller.raft.roles import Follower, Leader, Prospective, Resigned, Unattached


def answer(replica, envelope: Envelope, now_ms: int) -> Response | None:
    """The response to send back now, or None when a fetch waits at the leader for new entries."""
    request = envelope.body
    if isinstance(request, VoteRequest):
        return _answer_vote(replica, request, now_ms)
    if isinstance(request, BeginQuorumEpochRequest):
        return _answer_begin_quorum_epoch(replica, request, now_ms)
    if isinstance(request, EndQuorumEpochRequest):
        return _answer_end_quorum_epoch(replica, request, now_ms)
    return _answer_fetch(replica, envelope, now_ms)


def _answer_vote(replica, request: VoteRequest, now_ms: int) -> VoteResponse:
    if request.cluster_id != replica.cluster_id:
        return VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID)
    last_epoch = request.last_offset_epoch
    if (request.last_offset < 0 or last_epoch < 0 or last_epoch > request.candidate_epoch
            or (not request.pre_vote and last_epoch == request.candidate_epoch)):
        return _vote_response(replica, ErrorCode.INVALID_REQUEST)
    if request.candidate_epoch < replica.epoch:
        return _vote_response(replica, ErrorCode.FENCED_LEADER_EPOCH)
    if not replica.is_voter or request.candidate_id not in replica.voters or request.voter_id != replica.node_id:
        return _vote_response(replica, ErrorCode.INCONSISTENT_VOTER_SET)
    if not request.pre_vote and request.candidate_epoch > replica.epoch:
        replica.become_unattached(request.candidate_epoch, now_ms)
    candidate_end = OffsetAndEpoch(request.last_offset, last_epoch)
    up_to_date = candidate_end >= OffsetAndEpoch(replica.log.end_offset(), replica.log.last_epoch())
    granted = _can_grant(replica, request.candidate_id, up_to_date, request.pre_vote, now_ms)
    if granted and not request.pre_vote and replica.voted_id == NO_ID:
        replica.become_unattached(replica.epoch, now_ms, voted_id=request.candidate_id)
    return _vote_response(replica, ErrorCode.NONE, granted)


def _can_grant(replica, candidate_id: int, up_to_date: bool, pre_vote: bool, now_ms: int) -> bool:
    """Kafka's canGrantVote of each state."""
    state = replica.state
    if isinstance(state, (Leader, Resigned)):
        return False
    if pre_vote:
        if isinstance(state, Follower):
            contact = state.last_leader_contact_ms
            heard_lately = contact is not None and now_ms - contact < replica.config.fetch_timeout_ms
            return up_to_date and not heard_lately
        return up_to_date
    if isinstance(state, (Unattached, Prospective)):
        if state.voted_id != NO_ID:
            return state.voted_id == candidate_id
        return state.leader_id == NO_ID and up_to_date
    return False


def _vote_response(replica, error: ErrorCode, granted: bool = False) -> VoteResponse:
    return VoteResponse(error, replica.leader_id, replica.epoch, granted)


def _answer_begin_quorum_epoch(replica, request: BeginQuorumEpochRequest,
                               now_ms: int) -> BeginQuorumEpochResponse:
    if request.cluster_id != replica.cluster_id:
        return BeginQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID)
    error = _leadership_request_error(replica, request.leader_id, request.leader_epoch)
    if error is None and request.voter_id != replica.node_id:
        error = ErrorCode.INCONSISTENT_VOTER_SET
    if error is not None:
        return BeginQuorumEpochResponse(error, replica.leader_id, replica.epoch)
    replica.maybe_transition(request.leader_id, request.leader_epoch, now_ms)
    state = replica.state
    if isinstance(state, Follower) and state.leader_id == request.leader_id:
        state.last_leader_contact_ms = now_ms
    return BeginQuorumEpochResponse(ErrorCode.NONE, replica.leader_id, replica.epoch)


def _answer_end_quorum_epoch(replica, request: EndQuorumEpochRequest,
                             now_ms: int) -> EndQuorumEpochResponse:
    if request.cluster_id != replica.cluster_id:
        return EndQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID)
    error = _leadership_request_error(replica, request.leader_id, request.leader_epoch)
    if error is not None:
        return EndQuorumEpochResponse(error, replica.leader_id, replica.epoch)
    replica.maybe_transition(request.leader_id, request.leader_epoch, now_ms)
    state = replica.state
    if isinstance(state, Follower) and state.leader_id == request.leader_id:
        # The leader is gone: stop rejecting pre-votes, and campaign after a backoff that is
        # shortest for the successor the leader preferred.
        state.last_leader_contact_ms = None
        state.fetch_deadline = now_ms + _successor_backoff(replica, request.preferred_successors)
    return EndQuorumEpochResponse(ErrorCode.NONE, replica.leader_id, replica.epoch)


def _leadership_request_error(replica, leader_id: int, epoch: int) -> ErrorCode | None:
    """Kafka's validateVoterOnlyRequest, and the leader consistency its maybeTransition asserts."""
    if epoch < replica.epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if leader_id < 0:
        return ErrorCode.INVALID_REQUEST
    if not replica.is_voter or leader_id not in replica.voters:
        return ErrorCode.INCONSISTENT_VOTER_SET
    if not replica.consistent_leader(leader_id, epoch):
        return ErrorCode.INVALID_REQUEST
    return None


def _successor_backoff(replica, successors: tuple[int, ...]) -> int:
    """Kafka's strictExponentialElectionBackoffMs: 0 for the first preferred successor, doubling
    down the list, the maximum for a voter not on it."""
    maximum = replica.config.election_backoff_max_ms
    if replica.node_id not in successors:
        return maximum
    position = successors.index(replica.node_id)
    if position == 0:
        return 0
    return min(maximum, (maximum >> (len(successors) - 1)) << (position - 1))


def _answer_fetch(replica, envelope: Envelope, now_ms: int) -> FetchResponse | None:
    request: FetchRequest = envelope.body
    if request.cluster_id != replica.cluster_id:
        return FetchResponse(ErrorCode.INCONSISTENT_CLUSTER_ID)
    if (request.fetch_offset < 0 or request.last_fetched_epoch < 0 or request.max_wait_ms < 0
            or request.last_fetched_epoch > request.current_leader_epoch):
        return FetchResponse(ErrorCode.INVALID_REQUEST, replica.leader_id, replica.epoch)
    error = _leader_only_error(replica, request.current_leader_epoch)
    if error is not None:
        return FetchResponse(error, replica.leader_id, replica.epoch)
    state: Leader = replica.state
    if validate_fetch_position(replica.log, request.fetch_offset, request.last_fetched_epoch) is None:
        replica.record_fetch(state, request.replica_id, request.fetch_offset, now_ms)
        if request.max_wait_ms > 0 and request.fetch_offset >= replica.log.end_offset():
            state.parked[request.replica_id] = (envelope, now_ms + request.max_wait_ms)
            return None
    return complete_fetch(replica, request)


def _leader_only_error(replica, epoch: int) -> ErrorCode | None:
    """Kafka's validateLeaderOnlyRequest."""
    if epoch < replica.epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if epoch > replica.epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if not isinstance(replica.state, Leader):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return None


def complete_fetch(replica, request: FetchRequest) -> FetchResponse:
    """The leader's answer to a valid fetch: its entries from the fetch offset, or where the
    follower's log stops agreeing with the leader's (the diverging epoch it truncates to)."""
    if not isinstance(replica.state, Leader) or request.current_leader_epoch != replica.epoch:
        return FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, replica.leader_id, replica.epoch)
    diverging = validate_fetch_position(replica.log, request.fetch_offset, request.last_fetched_epoch)
    if diverging is not None:
        return FetchResponse(ErrorCode.NONE, replica.node_id, replica.epoch, replica.high_watermark,
                             diverging_epoch=EpochEndOffset(diverging.epoch, diverging.offset))
    records = tuple(replica.log.read(request.fetch_offset, replica.config.fetch_max_entries))
    return FetchResponse(ErrorCode.NONE, replica.node_id, replica.epoch, replica.high_watermark, records)

