"""One replica of the KRaft quorum as a pure state machine: messages and ticks in, messages and log
writes out.

Kafka's KafkaRaftClient and QuorumState (raft/src/main/java/org/apache/kafka/raft/) are the model:
the six states of controller/raft/roles.py, KIP-595's Vote, BeginQuorumEpoch, EndQuorumEpoch and
Fetch (controller/raft/messages.py) with Kafka's validation and error codes, KIP-996 pre-vote, the
leader's LeaderChange entry at the start of its epoch (the high watermark moves only once an entry
of the leader's own epoch is on a majority), diverging-epoch truncation, check-quorum (a leader
resigns when a majority has not fetched for 1.5 fetch timeouts) and election backoff. Observers
(replicas not in `voters`) fetch and follow but never vote or campaign.

The caller (an asyncio shell, or the simulation in tests/unit/test_raft_simulation.py) feeds it:

    replica = RaftReplica(node_id, voters, cluster_id, log, store, random.Random(), now_ms)
    outgoing = replica.handle(envelope, now_ms)   # a request or a response that arrived
    outgoing = replica.tick(now_ms)               # timers; call it again at next_deadline_ms()
    offset = replica.append([payload], now_ms)    # leader only, else NotLeaderError; then tick()

and sends every returned `Envelope` to its `destination`. Each call reads and writes the log and
the quorum-state store synchronously; the store is written before any message that depends on it
is returned (a vote, an answer in a new epoch). `high_watermark`, `role`, `epoch` and
`leader_id` can be read at any time.

Differs from Kafka: one partition and one thread of control with no I/O of its own; requests are
matched to responses by the envelope's correlation id (Kafka's RequestManager), and an answer with
an error backs off `retry_backoff_ms` before the next request to that peer. A restarted replica
that had voted for itself campaigns again in the same epoch (Kafka 3.7's CandidateState), one that
led restarts resigned (as Kafka's does). Pre-vote follows Kafka 4.0: a follower whose fetch
timeout expires, an unattached voter whose election timeout expires, a candidate after its backoff
and a resigned leader after an election timeout all become prospective first. A follower's fetch
timeout gets a little random jitter (see `_fetch_timeout`). Begin- and EndQuorumEpoch requests
naming another leader for an epoch whose leader the replica knows get INVALID_REQUEST, and such
responses are ignored, where Kafka throws IllegalStateException: bad input never stops a replica.
The methods without a leading underscore below the public ones (`become_*`, `maybe_transition`,
`record_fetch`, ...) are for controller/raft/answers.py, which validates and answers requests.
"""
from __future__ import annotations

import random
from typing import Sequence

from cluster.formats.errors import ErrorCode
from controller.raft import answers
from controller.raft.config import RaftConfig
from controller.raft.election_state import NO_ID, ElectionState, QuorumStateStore
from controller.raft.log import RaftLog, OffsetAndEpoch, truncate_to_leader_epoch_end
from controller.raft.messages import (
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    Envelope, FetchRequest, FetchResponse, Request, VoteRequest, VoteResponse,
)
from controller.raft.roles import (
    Ballot, Candidate, Follower, Leader, Prospective, Resigned, Role, State, Unattached,
)

LEADER_CHANGE_PAYLOAD = b""  # the on-disk adapter writes Kafka's LeaderChangeMessage for it
RETRY_BACKOFF_BASE_MS = 100  # Kafka's election backoff unit
ERRORS_WITHOUT_LEADER = (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INCONSISTENT_VOTER_SET,
                         ErrorCode.INVALID_REQUEST)


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader: leader {leader_id} in epoch {epoch}")
        self.leader_id = leader_id
        self.epoch = epoch


class RaftStateError(Exception):
    """The leader asked for something Raft forbids (truncating below the high watermark): a bug
    somewhere in the quorum, never bad input from one peer."""


class RaftReplica:
    def __init__(self, node_id: int, voters: Sequence[int], cluster_id: str, log: RaftLog,
                 store: QuorumStateStore, rng: random.Random, now_ms: int,
                 config: RaftConfig = RaftConfig()) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.cluster_id = cluster_id
        self.log = log
        self.store = store
        self.random = rng
        self.config = config
        self.high_watermark = 0
        self._outbox: list[Envelope] = []
        self._inflight: dict[int, tuple[int, int, Request]] = {}  # destination: (correlation, deadline, request)
        self._backoff_until: dict[int, int] = {}
        self._next_correlation = 0
        self._election_retries = 0
        self._now = now_ms
        self._state: State = self._initial_state(now_ms)
        if self.voters == {node_id}:
            self._become_candidate(now_ms)  # as Kafka: a lone voter needs nobody's vote
        self._advance(now_ms)  # what it sends goes out with the first tick(), due at once

    # ----- what the shell calls

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int:
        """The leader this replica knows for its epoch (itself while leading or resigned), else -1."""
        return self._state.leader_id

    @property
    def state(self) -> State:
        """The current state's record (roles.py); read it, never keep it across calls."""
        return self._state

    @property
    def voted_id(self) -> int:
        """Whom this replica voted for in its epoch, -1 for nobody."""
        return self._voted_id()

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    def handle(self, envelope: Envelope, now_ms: int) -> list[Envelope]:
        self._now = now_ms
        if envelope.destination != self.node_id:
            pass  # misrouted: nothing to answer
        elif envelope.is_request:
            answer = answers.answer(self, envelope, now_ms)
            if answer is not None:
                self._reply(envelope, answer)
        else:
            self._handle_response(envelope, now_ms)
        return self._poll(now_ms)

    def tick(self, now_ms: int) -> list[Envelope]:
        self._now = now_ms
        return self._poll(now_ms)

    def append(self, payloads: Sequence[bytes], now_ms: int) -> int:
        """Appends in the leader's epoch; returns the last entry's offset, committed once the high
        watermark passes it. The fetches this completes go out with the next tick()."""
        if self._state.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id if self._state.role is not Role.RESIGNED else NO_ID, self.epoch)
        self._now = now_ms
        self.log.append_as_leader(payloads, self.epoch)
        self._leader_progress(now_ms)
        return self.log.end_offset() - 1

    def campaign_soon(self, now_ms: int) -> None:
        """Campaign at the next tick rather than after an election timeout, if this voter is
        unattached in a quorum that never had a leader (epoch 0). When a voter campaigns matters to
        Raft's liveness only, never to its safety: the controllers of a new cluster start together,
        and one of them going first saves everyone the wait."""
        state = self._state
        if self.is_voter and isinstance(state, Unattached) and state.epoch == 0:
            state.election_deadline = now_ms

    def next_deadline_ms(self) -> int:
        """When tick() next has something to do (now, if messages wait to go out)."""
        if self._outbox:
            return self._now
        state = self._state
        deadlines = [deadline for _, deadline, _ in self._inflight.values()]
        deadlines.extend(self._backoff_until.values())
        if isinstance(state, (Prospective, Resigned)) or (isinstance(state, Unattached) and self.is_voter):
            deadlines.append(state.election_deadline)
        elif isinstance(state, Candidate):
            deadlines.append(state.backoff_until if state.backoff_until is not None else state.election_deadline)
        elif isinstance(state, Follower):
            deadlines.append(state.fetch_deadline)
        elif isinstance(state, Leader):
            if len(self.voters) > 1:
                deadlines.append(state.check_quorum_deadline)
            deadlines.extend(deadline for _, deadline in state.parked.values())
        # Whatever is due now has just been done by the call that returned: expired requests and
        # backoffs stay recorded until the next send, so only what lies ahead counts.
        return min((deadline for deadline in deadlines if deadline > self._now),
                   default=self._now + self.config.fetch_timeout_ms)

    # ----- the durable state and the transitions between states

    def _initial_state(self, now_ms: int) -> State:
        """Kafka's QuorumState.initialize: resume the stored election, never a leadership."""
        stored = self.store.read()
        if stored is None or stored.epoch < self.log.last_epoch():
            epoch = max(stored.epoch if stored else 0, self.log.last_epoch())
            self._write_election(ElectionState(epoch, voters=self.voters))
            return self._unattached(epoch, NO_ID, now_ms)
        if self.is_voter and stored.leader_id == self.node_id:
            return Resigned(stored.epoch, self.node_id, now_ms + self._election_timeout(),
                            set(self.voters - {self.node_id}))
        if stored.has_leader and stored.leader_id != self.node_id:
            return self._follower(stored.epoch, stored.leader_id, stored.voted_id, now_ms)
        if self.is_voter and stored.voted_id == self.node_id:
            return self._candidate(stored.epoch, now_ms)
        return self._unattached(stored.epoch, stored.voted_id if self.is_voter else NO_ID, now_ms)

    def _write_election(self, election: ElectionState) -> None:
        self.store.write(election)

    def _set_state(self, state: State) -> None:
        previous = self._state
        self._state = state
        self._inflight.clear()
        self._backoff_until.clear()
        if isinstance(previous, Leader):
            for envelope, _ in previous.parked.values():
                self._reply(envelope, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self.leader_id, self.epoch))

    def _election_timeout(self) -> int:
        return self.config.election_timeout_ms + self.random.randrange(self.config.election_timeout_ms)

    def _fetch_timeout(self) -> int:
        """The fetch timeout plus up to a quarter election timeout of jitter. The leader answers
        its followers' fetches together, so with Kafka's fixed timeout they all notice its death in
        the same millisecond, campaign together and split the vote about half the time; a split
        costs another election timeout."""
        return self.config.fetch_timeout_ms + self.random.randrange(self.config.election_timeout_ms // 4 + 1)

    def _unattached(self, epoch: int, voted_id: int, now_ms: int) -> Unattached:
        return Unattached(epoch, now_ms + self._election_timeout(), voted_id)

    def _follower(self, epoch: int, leader_id: int, voted_id: int, now_ms: int) -> Follower:
        return Follower(epoch, leader_id, now_ms + self._fetch_timeout(), voted_id)

    def _candidate(self, epoch: int, now_ms: int) -> Candidate:
        ballot = Ballot(self.voters)
        ballot.record(self.node_id, True)
        return Candidate(epoch, now_ms + self._election_timeout(), ballot)

    def become_unattached(self, epoch: int, now_ms: int, voted_id: int = NO_ID) -> None:
        self._write_election(ElectionState(epoch, NO_ID, voted_id, self.voters))
        self._set_state(self._unattached(epoch, voted_id, now_ms))

    def become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        voted_id = self._voted_id() if epoch == self.epoch else NO_ID
        self._write_election(ElectionState(epoch, leader_id, voted_id, self.voters))
        self._set_state(self._follower(epoch, leader_id, voted_id, now_ms))
        self._election_retries = 0

    def _become_prospective(self, now_ms: int) -> None:
        state = self._state
        ballot = Ballot(self.voters)
        ballot.record(self.node_id, True)
        leader_id = state.leader_id if isinstance(state, (Follower, Prospective)) else NO_ID
        self._set_state(Prospective(self.epoch, now_ms + self._election_timeout(), ballot, leader_id,
                                    self._voted_id()))
        if ballot.won:
            self._become_candidate(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        epoch = self.epoch + 1
        self._write_election(ElectionState(epoch, NO_ID, self.node_id, self.voters))
        self._election_retries += 1
        self._set_state(self._candidate(epoch, now_ms))
        if self._state.ballot.won:
            self._become_leader(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        epoch = self.epoch
        self._write_election(ElectionState(epoch, self.node_id, self.node_id, self.voters))
        others = set(self.voters - {self.node_id})
        start = self.log.append_as_leader([LEADER_CHANGE_PAYLOAD], epoch, control=True)
        self._set_state(Leader(epoch, self.node_id, start, now_ms + self.config.check_quorum_timeout_ms, others))
        self._election_retries = 0
        self._leader_progress(now_ms)

    def _become_resigned(self, now_ms: int) -> None:
        state = self._state
        successors = tuple(sorted(self.voters - {self.node_id},
                                  key=lambda voter: -state.fetch_offsets.get(voter, -1)))
        self._set_state(Resigned(self.epoch, self.node_id, now_ms + self._election_timeout(),
                                 set(successors), successors))

    def _voted_id(self) -> int:
        state = self._state
        if isinstance(state, (Unattached, Prospective, Follower)):
            return state.voted_id
        return self.node_id if isinstance(state, (Candidate, Leader, Resigned)) else NO_ID

    def knows_leader(self) -> bool:
        return self._state.leader_id != NO_ID

    def maybe_transition(self, leader_id: int, epoch: int, now_ms: int) -> None:
        """Kafka's maybeTransition: a higher epoch, or the leader of this one, learnt from a peer."""
        if epoch > self.epoch:
            if leader_id != NO_ID:
                self.become_follower(epoch, leader_id, now_ms)
            else:
                self.become_unattached(epoch, now_ms)
        elif epoch == self.epoch and leader_id != NO_ID and not self.knows_leader():
            self.become_follower(epoch, leader_id, now_ms)

    def consistent_leader(self, leader_id: int, epoch: int) -> bool:
        """False when a peer names another leader for the epoch whose leader this replica knows."""
        return not (epoch == self.epoch and leader_id != NO_ID and self.knows_leader()
                    and leader_id != self._state.leader_id)

    # ----- timers and the requests each state sends

    def _poll(self, now_ms: int) -> list[Envelope]:
        self._advance(now_ms)
        outgoing, self._outbox = self._outbox, []
        return outgoing

    def _advance(self, now_ms: int) -> None:
        for _ in range(4):  # a transition may lead straight to another (a lone voter elects itself)
            state = self._state
            self._poll_state(state, now_ms)
            if self._state is state:
                break

    def _poll_state(self, state: State, now_ms: int) -> None:
        if isinstance(state, Leader):
            self._poll_leader(state, now_ms)
        elif isinstance(state, Follower):
            self._poll_follower(state, now_ms)
        elif isinstance(state, Candidate):
            self._poll_candidate(state, now_ms)
        elif isinstance(state, Prospective):
            if now_ms >= state.election_deadline:
                self._prospective_failed(now_ms)
            else:
                self._request_votes(state.ballot, now_ms, pre_vote=True)
        elif isinstance(state, Unattached):
            if not self.is_voter:
                self._fetch_from_any_voter(now_ms)
            elif now_ms >= state.election_deadline:
                self._become_prospective(now_ms)
        elif isinstance(state, Resigned):
            if now_ms >= state.election_deadline:
                self._become_prospective(now_ms)
            else:
                for voter in sorted(state.unacknowledged):
                    self._send_if_ready(voter, EndQuorumEpochRequest(
                        self.cluster_id, self.node_id, state.epoch, state.preferred_successors), now_ms)

    def _poll_leader(self, state: Leader, now_ms: int) -> None:
        if len(self.voters) > 1 and now_ms >= state.check_quorum_deadline:
            self._become_resigned(now_ms)
            return
        for replica_id, (envelope, deadline) in list(state.parked.items()):
            if now_ms >= deadline:
                del state.parked[replica_id]
                self._reply(envelope, answers.complete_fetch(self, envelope.body))
        for voter in sorted(state.unacknowledged):
            self._send_if_ready(voter, BeginQuorumEpochRequest(self.cluster_id, self.node_id, state.epoch, voter),
                                now_ms)

    def _poll_follower(self, state: Follower, now_ms: int) -> None:
        if now_ms >= state.fetch_deadline:
            if self.is_voter:
                self._become_prospective(now_ms)
                return
            state.fetch_deadline = now_ms + self.config.fetch_timeout_ms
            self._fetch_from_any_voter(now_ms)
        elif not self._awaiting_answer(now_ms):
            self._send_if_ready(state.leader_id, self._fetch_request(), now_ms)

    def _poll_candidate(self, state: Candidate, now_ms: int) -> None:
        if state.backoff_until is None and now_ms >= state.election_deadline:
            self._start_backoff(state, now_ms)
        if state.backoff_until is None:
            self._request_votes(state.ballot, now_ms, pre_vote=False)
        elif now_ms >= state.backoff_until:
            self._become_prospective(now_ms)

    def _start_backoff(self, state: Candidate, now_ms: int) -> None:
        """Kafka's binaryExponentialElectionBackoffMs."""
        spread = 2 << min(20, max(self._election_retries, 1) - 1)
        backoff = min(RETRY_BACKOFF_BASE_MS * self.random.randrange(spread), self.config.election_backoff_max_ms)
        state.backoff_until = now_ms + backoff
        self._inflight.clear()

    def _prospective_failed(self, now_ms: int) -> None:
        """Back to following the leader it knew, or to waiting unattached (Kafka 4.0)."""
        state = self._state
        if state.leader_id != NO_ID:
            self._set_state(self._follower(state.epoch, state.leader_id, state.voted_id, now_ms))
        else:
            self._set_state(self._unattached(state.epoch, state.voted_id, now_ms))

    def _request_votes(self, ballot: Ballot, now_ms: int, pre_vote: bool) -> None:
        end = OffsetAndEpoch(self.log.end_offset(), self.log.last_epoch())
        for voter in sorted(ballot.unrecorded()):
            self._send_if_ready(voter, VoteRequest(self.cluster_id, self.node_id, self.epoch, end.epoch, end.offset,
                                                   voter, pre_vote), now_ms)

    def _fetch_from_any_voter(self, now_ms: int) -> None:
        """An observer that knows no live leader asks a random voter (Kafka's bootstrap servers)."""
        if not self._awaiting_answer(now_ms):
            voter = self.random.choice(sorted(self.voters))
            self._send_if_ready(voter, self._fetch_request(), now_ms)

    def _awaiting_answer(self, now_ms: int) -> bool:
        return any(deadline > now_ms for _, deadline, _ in self._inflight.values())

    def _fetch_request(self) -> FetchRequest:
        return FetchRequest(self.cluster_id, self.node_id, self.epoch, self.log.end_offset(), self.log.last_epoch(),
                            self.config.fetch_max_wait_ms)

    def _send_if_ready(self, destination: int, request: Request, now_ms: int) -> None:
        inflight = self._inflight.get(destination)
        if inflight is not None and inflight[1] > now_ms:
            return
        if self._backoff_until.get(destination, 0) > now_ms:
            return
        self._backoff_until.pop(destination, None)
        self._next_correlation += 1
        timeout = self.config.request_timeout_ms
        if isinstance(request, FetchRequest):
            timeout += request.max_wait_ms
        self._inflight[destination] = (self._next_correlation, now_ms + timeout, request)
        self._outbox.append(Envelope(self.node_id, destination, self._next_correlation, request))

    def _reply(self, request: Envelope, body) -> None:
        self._outbox.append(Envelope(self.node_id, request.source, request.correlation_id, body))

    # ----- the leader's progress: high watermark, check-quorum, parked fetches

    def record_fetch(self, state: Leader, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        if replica_id not in self.voters or replica_id == self.node_id:
            return
        state.fetch_offsets[replica_id] = fetch_offset
        state.unacknowledged.discard(replica_id)
        state.fetched_since_check.add(replica_id)
        if len(state.fetched_since_check) + 1 >= len(self.voters) // 2 + 1:
            state.check_quorum_deadline = now_ms + self.config.check_quorum_timeout_ms
            state.fetched_since_check.clear()
        self._leader_progress(now_ms)

    def _leader_progress(self, now_ms: int) -> None:
        """Raft's commit rule: the offset a majority of voters (the leader included) has reached
        becomes the high watermark once it covers an entry of the leader's own epoch."""
        state = self._state
        offsets = sorted((state.fetch_offsets.get(voter, 0) for voter in self.voters if voter != self.node_id),
                         reverse=True)
        offsets.insert(0, self.log.end_offset())
        majority_offset = offsets[len(self.voters) // 2]
        advanced = majority_offset > state.epoch_start_offset and majority_offset > self.high_watermark
        if advanced:
            self.high_watermark = majority_offset
        if advanced or self.log.end_offset() > min((e.body.fetch_offset for e, _ in state.parked.values()),
                                                   default=self.log.end_offset()):
            self._complete_parked_fetches()

    def _complete_parked_fetches(self) -> None:
        state = self._state
        parked, state.parked = state.parked, {}
        for envelope, _ in parked.values():
            self._reply(envelope, answers.complete_fetch(self, envelope.body))

    # ----- responses

    def _handle_response(self, envelope: Envelope, now_ms: int) -> None:
        inflight = self._inflight.get(envelope.source)
        if inflight is None or inflight[0] != envelope.correlation_id:
            return  # late, duplicated, or from before a transition: Kafka's RequestManager drops it too
        del self._inflight[envelope.source]
        request, response = inflight[2], envelope.body
        if response.error in ERRORS_WITHOUT_LEADER:
            self._backoff_until[envelope.source] = now_ms + self.config.retry_backoff_ms
            return
        if not self._common_response(response, envelope.source, now_ms):
            return
        if response.error is not ErrorCode.NONE:
            self._backoff_until[envelope.source] = now_ms + self.config.retry_backoff_ms
        elif isinstance(response, VoteResponse):
            self._vote_answered(request, response, envelope.source, now_ms)
        elif isinstance(response, FetchResponse):
            self._fetch_answered(response, now_ms)
        elif isinstance(response, BeginQuorumEpochResponse) and isinstance(self._state, Leader):
            self._state.unacknowledged.discard(envelope.source)
        elif isinstance(response, EndQuorumEpochResponse) and isinstance(self._state, Resigned):
            self._state.unacknowledged.discard(envelope.source)

    def _common_response(self, response, source: int, now_ms: int) -> bool:
        """Kafka's maybeHandleCommonResponse: True when the response is for this epoch and state
        and its own handler should read it."""
        error, leader_id, epoch = response.error, response.leader_id, response.leader_epoch
        if epoch < self.epoch or error is ErrorCode.UNKNOWN_LEADER_EPOCH:
            return False
        if not self.consistent_leader(leader_id, epoch):
            return False
        if epoch > self.epoch or error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            self.maybe_transition(leader_id, epoch, now_ms)
            if error is not ErrorCode.NONE:
                self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return False
        if leader_id != NO_ID and not self.knows_leader():
            self.become_follower(epoch, leader_id, now_ms)
            return error is ErrorCode.NONE and isinstance(response, FetchResponse)
        return True

    def _vote_answered(self, request: VoteRequest, response: VoteResponse, source: int, now_ms: int) -> None:
        state = self._state
        if request.pre_vote and isinstance(state, Prospective) and request.candidate_epoch == state.epoch:
            state.ballot.record(source, response.vote_granted)
            if state.ballot.won:
                self._become_candidate(now_ms)
            elif state.ballot.lost:
                self._prospective_failed(now_ms)
        elif not request.pre_vote and isinstance(state, Candidate) and request.candidate_epoch == state.epoch:
            state.ballot.record(source, response.vote_granted)
            if state.ballot.won:
                self._become_leader(now_ms)
            elif state.ballot.lost and state.backoff_until is None:
                self._start_backoff(state, now_ms)

    def _fetch_answered(self, response: FetchResponse, now_ms: int) -> None:
        state = self._state
        if not isinstance(state, Follower):
            return
        if response.diverging_epoch is not None:
            diverging = response.diverging_epoch
            if diverging.end_offset < self.high_watermark:
                raise RaftStateError(f"leader {state.leader_id} asked for truncation to {diverging.end_offset}, "
                                     f"below the high watermark {self.high_watermark}")
            truncate_to_leader_epoch_end(self.log, OffsetAndEpoch(diverging.end_offset, diverging.epoch))
        elif response.snapshot_id is not None:
            self._backoff_until[state.leader_id] = now_ms + self.config.retry_backoff_ms
            return
        else:
            end = self.log.end_offset()
            records = [entry for entry in response.records if entry.offset >= end]
            if records and records[0].offset == end:
                self.log.append_as_follower(records)
            high_watermark = min(response.high_watermark, self.log.end_offset())
            if high_watermark > self.high_watermark:
                self.high_watermark = high_watermark
        state.last_leader_contact_ms = now_ms
        state.fetch_deadline = now_ms + self._fetch_timeout()
