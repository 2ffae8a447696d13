"""RaftReplica's rules one at a time: pre-vote, vote granting, divergence, fencing, cluster ids,
voter checks, check-quorum, the high watermark's epoch rule, durable votes."""
from __future__ import annotations

import random

import pytest

from cluster.formats.errors import ErrorCode
from controller.raft.config import RaftConfig
from controller.raft.election_state import ElectionState, InMemoryQuorumStateStore
from controller.raft.log import InMemoryRaftLog, LogEntry
from controller.raft.messages import (
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    EpochEndOffset, Envelope, FetchRequest, FetchResponse, VoteRequest, VoteResponse,
)
from controller.raft.replica import NotLeaderError, RaftReplica
from controller.raft.roles import Role

CLUSTER = "cluster-a"
VOTERS = (1, 2, 3)
CONFIG = RaftConfig()


def make_replica(node_id, log=None, store=None, now=0, voters=VOTERS):
    return RaftReplica(node_id, voters, CLUSTER, log if log is not None else InMemoryRaftLog(),
                       store if store is not None else InMemoryQuorumStateStore(), random.Random(node_id), now, CONFIG)


def log_of(*epochs):
    log = InMemoryRaftLog()
    for epoch in epochs:
        log.append_as_leader([f"e{epoch}-{log.end_offset()}".encode()], epoch)
    return log


class Network:
    """Replicas on a perfect network: every message arrives 1 ms after it is sent, unless its
    sender or receiver is cut off or absent."""

    def __init__(self, replicas):
        self.replicas = {replica.node_id: replica for replica in replicas}
        self.now = 0
        self.in_flight: list[Envelope] = []
        self.delivered: list[Envelope] = []
        self.cut_off: set[int] = set()
        for replica in replicas:
            self.in_flight.extend(replica.tick(0))

    def run(self, until):
        while self.now < until:
            self.now += 1
            arriving, self.in_flight = self.in_flight, []
            for envelope in arriving:
                if (envelope.source in self.cut_off or envelope.destination in self.cut_off
                        or envelope.destination not in self.replicas):
                    continue
                self.delivered.append(envelope)
                self.in_flight.extend(self.replicas[envelope.destination].handle(envelope, self.now))
            for replica in self.replicas.values():
                if replica.next_deadline_ms() <= self.now:
                    self.in_flight.extend(replica.tick(self.now))

    def leader(self):
        leaders = [replica for replica in self.replicas.values() if replica.role is Role.LEADER]
        assert len(leaders) == 1, [(replica.node_id, replica.role) for replica in self.replicas.values()]
        return leaders[0]


def request(replica, source, body, correlation_id=1):
    """Hands `replica` one request; returns its response body."""
    answers = [envelope for envelope in replica.handle(Envelope(source, replica.node_id, correlation_id, body), 0)
               if not envelope.is_request and envelope.destination == source
               and envelope.correlation_id == correlation_id]
    assert len(answers) == 1, answers
    return answers[0].body


def elected_network():
    network = Network([make_replica(node_id) for node_id in VOTERS])
    network.run(3000)
    return network


def test_three_voters_elect_one_leader_and_commit_its_records():
    network = elected_network()
    leader = network.leader()
    offset = leader.append([b"topic-created"], network.now)
    network.run(network.now + 600)
    assert leader.high_watermark == offset + 1
    for replica in network.replicas.values():
        assert replica.log.read(offset, 1) == [LogEntry(offset, leader.epoch, b"topic-created")]
        assert replica.high_watermark == offset + 1
        assert (replica.epoch, replica.leader_id) == (leader.epoch, leader.node_id)


def test_pre_vote_does_not_bump_the_epoch_of_a_healthy_quorum():
    network = elected_network()
    leader, epoch = network.leader(), network.leader().epoch
    isolated = next(node_id for node_id in VOTERS if node_id != leader.node_id)
    network.cut_off = {isolated}
    network.run(network.now + 5000)
    assert network.replicas[isolated].epoch == epoch  # it asked for pre-votes, never campaigned
    network.cut_off = set()
    network.run(network.now + 3000)
    assert network.leader() is leader
    assert {replica.epoch for replica in network.replicas.values()} == {epoch}
    assert network.replicas[isolated].role is Role.FOLLOWER
    assert not any(isinstance(envelope.body, VoteResponse) and envelope.body.vote_granted
                   and envelope.destination == isolated for envelope in network.delivered)


def test_a_follower_that_heard_from_its_leader_lately_refuses_a_pre_vote_without_changing_anything():
    network = elected_network()
    leader = network.leader()
    follower = next(replica for replica in network.replicas.values() if replica is not leader)
    other = (set(VOTERS) - {leader.node_id, follower.node_id}).pop()
    writes = follower.store.writes
    answer = request(follower, other, VoteRequest(CLUSTER, other, leader.epoch, leader.epoch,
                                                  leader.log.end_offset(), follower.node_id, pre_vote=True))
    assert answer == VoteResponse(ErrorCode.NONE, leader.node_id, leader.epoch, vote_granted=False)
    assert follower.store.writes == writes


def test_a_candidate_with_a_shorter_log_loses_and_a_later_epoch_beats_length():
    voter = make_replica(1, log=log_of(1, 1, 2))
    shorter = request(voter, 2, VoteRequest(CLUSTER, 2, 3, last_offset_epoch=2, last_offset=2, voter_id=1))
    assert shorter == VoteResponse(ErrorCode.NONE, -1, 3, vote_granted=False)
    assert voter.store.read() == ElectionState(3, voters=frozenset(VOTERS))
    later_epoch = request(voter, 3, VoteRequest(CLUSTER, 3, 3, last_offset_epoch=2, last_offset=3, voter_id=1), 2)
    assert later_epoch == VoteResponse(ErrorCode.NONE, -1, 3, vote_granted=True)
    older_but_longer = make_replica(1, log=log_of(1, 1, 2))
    assert not request(older_but_longer, 2, VoteRequest(CLUSTER, 2, 3, 1, 9, 1)).vote_granted


def test_a_vote_is_durable_before_it_is_answered_and_survives_a_restart():
    store, log = InMemoryQuorumStateStore(), InMemoryRaftLog()
    voter = make_replica(1, log=log, store=store)
    assert request(voter, 2, VoteRequest(CLUSTER, 2, 1, 0, 0, 1)).vote_granted
    assert store.read() == ElectionState(1, voted_id=2, voters=frozenset(VOTERS))
    restarted = make_replica(1, log=log, store=store)
    assert (restarted.role, restarted.epoch, restarted.voted_id) == (Role.UNATTACHED, 1, 2)
    assert request(restarted, 3, VoteRequest(CLUSTER, 3, 1, 0, 0, 1)) == VoteResponse(ErrorCode.NONE, -1, 1, False)
    assert request(restarted, 2, VoteRequest(CLUSTER, 2, 1, 0, 0, 1), 2).vote_granted  # the same vote again


def test_a_follower_truncates_where_the_leader_says_its_log_diverged():
    leader_log, follower_log = log_of(1, 1, 3, 3), log_of(1, 1, 2, 2, 2)
    leader_store = InMemoryQuorumStateStore(ElectionState(3, voters=frozenset(VOTERS)))
    follower_store = InMemoryQuorumStateStore(ElectionState(3, voters=frozenset(VOTERS)))
    network = Network([make_replica(1, leader_log, leader_store), make_replica(2, follower_log, follower_store),
                       make_replica(3)])
    network.run(4000)
    assert network.leader().node_id == 1  # 2's last epoch (2) is older than 1's (3); 3's log is empty
    diverging = [envelope.body.diverging_epoch for envelope in network.delivered
                 if envelope.destination == 2 and isinstance(envelope.body, FetchResponse)
                 and envelope.body.diverging_epoch]
    assert diverging[0] == EpochEndOffset(epoch=1, end_offset=2)
    assert follower_log.entries == leader_log.entries
    assert [entry.epoch for entry in follower_log.entries] == [1, 1, 3, 3, 4]


def test_stale_epochs_are_fenced():
    store = InMemoryQuorumStateStore(ElectionState(5, leader_id=1, voters=frozenset(VOTERS)))
    follower = make_replica(2, store=store)
    assert request(follower, 1, BeginQuorumEpochRequest(CLUSTER, 1, 4, 2)) == \
        BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 5)
    assert request(follower, 3, VoteRequest(CLUSTER, 3, 4, 3, 0, 2)) == \
        VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 5, False)
    assert request(follower, 1, EndQuorumEpochRequest(CLUSTER, 1, 4)) == \
        EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 5)
    network = elected_network()
    leader = network.leader()
    assert request(leader, 100, FetchRequest(CLUSTER, 100, leader.epoch - 1, 0, 0)) == \
        FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, leader.node_id, leader.epoch)
    assert request(leader, 100, FetchRequest(CLUSTER, 100, leader.epoch + 1, 0, 0), 2) == \
        FetchResponse(ErrorCode.UNKNOWN_LEADER_EPOCH, leader.node_id, leader.epoch)
    assert (follower.epoch, follower.leader_id, store.writes) == (5, 1, 0)


def test_a_fetch_from_a_replica_that_does_not_lead_is_refused_with_the_leader_it_knows():
    network = elected_network()
    leader = network.leader()
    follower = next(replica for replica in network.replicas.values() if replica is not leader)
    assert request(follower, 100, FetchRequest(CLUSTER, 100, leader.epoch, 0, 0)) == \
        FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, leader.node_id, leader.epoch)


@pytest.mark.parametrize("body", [
    VoteRequest("cluster-b", 2, 1, 0, 0, 1),
    BeginQuorumEpochRequest("cluster-b", 2, 1, 1),
    EndQuorumEpochRequest("cluster-b", 2, 1),
    FetchRequest("cluster-b", 2, 0, 0, 0),
], ids=lambda body: type(body).__name__)
def test_another_clusters_id_is_refused(body):
    voter = make_replica(1)
    answer = request(voter, 2, body)
    assert answer.error is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert (voter.role, voter.epoch, voter.store.writes) == (Role.UNATTACHED, 0, 1)


def test_requests_from_outside_the_voter_set_are_refused():
    voter = make_replica(1)
    assert request(voter, 9, VoteRequest(CLUSTER, 9, 4, 0, 0, 1)) == \
        VoteResponse(ErrorCode.INCONSISTENT_VOTER_SET, -1, 0, False)
    assert request(voter, 9, BeginQuorumEpochRequest(CLUSTER, 9, 4, 1), 2) == \
        BeginQuorumEpochResponse(ErrorCode.INCONSISTENT_VOTER_SET, -1, 0)
    assert (voter.epoch, voter.voted_id, voter.store.writes) == (0, -1, 1)
    observer = make_replica(100)
    assert request(observer, 2, VoteRequest(CLUSTER, 2, 1, 0, 0, 100)).error is ErrorCode.INCONSISTENT_VOTER_SET


@pytest.mark.parametrize("body", [
    VoteRequest(CLUSTER, 2, 1, last_offset_epoch=1, last_offset=0, voter_id=1),  # last epoch = its new epoch
    VoteRequest(CLUSTER, 2, 1, last_offset_epoch=0, last_offset=-1, voter_id=1),
    FetchRequest(CLUSTER, 2, current_leader_epoch=0, fetch_offset=-1, last_fetched_epoch=0),
    FetchRequest(CLUSTER, 2, current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=1),
], ids=["vote-last-epoch", "vote-negative-offset", "fetch-negative-offset", "fetch-epoch-ahead"])
def test_impossible_offsets_and_epochs_are_invalid_requests(body):
    assert request(make_replica(1), 2, body).error is ErrorCode.INVALID_REQUEST


def test_an_observer_follows_the_leader_but_never_votes_or_campaigns():
    replicas = [make_replica(node_id) for node_id in VOTERS] + [make_replica(100)]
    network = Network(replicas)
    network.run(3000)
    leader = network.leader()
    offset = leader.append([b"x"], network.now)
    network.run(network.now + 600)
    observer = network.replicas[100]
    assert (observer.role, observer.leader_id, observer.high_watermark) == (Role.FOLLOWER, leader.node_id, offset + 1)
    assert leader.state.fetch_offsets.keys() == set(VOTERS) - {leader.node_id}  # it does not count
    lonely = Network([make_replica(100)])
    lonely.run(5000)
    assert (lonely.replicas[100].role, lonely.replicas[100].epoch) == (Role.UNATTACHED, 0)


def test_a_leader_that_loses_its_majority_resigns_after_the_check_quorum_timeout():
    network = elected_network()
    leader = network.leader()
    network.cut_off = {leader.node_id}
    network.run(network.now + 1)
    deadline = leader.state.check_quorum_deadline  # a majority's last fetches plus 1.5 fetch timeouts
    assert network.now + CONFIG.fetch_timeout_ms < deadline
    network.run(deadline - 1)
    assert leader.role is Role.LEADER
    network.run(deadline)
    assert leader.role is Role.RESIGNED
    with pytest.raises(NotLeaderError):
        leader.append([b"late"], network.now)
    network.cut_off = set()
    old_epoch = leader.epoch
    network.run(network.now + 3000)
    new_leader = network.leader()
    assert new_leader.epoch > old_epoch
    assert {(replica.epoch, replica.leader_id) for replica in network.replicas.values()} == \
        {(new_leader.epoch, new_leader.node_id)}


def test_the_high_watermark_waits_for_an_entry_of_the_leaders_epoch():
    log = log_of(1, 1)
    store = InMemoryQuorumStateStore(ElectionState(2, voted_id=1, voters=frozenset(VOTERS)))
    leader = make_replica(1, log=log, store=store)  # restarts as a candidate of epoch 2
    outgoing = leader.tick(0)
    votes = {envelope.destination: envelope for envelope in outgoing if isinstance(envelope.body, VoteRequest)}
    leader.handle(Envelope(2, 1, votes[2].correlation_id, VoteResponse(ErrorCode.NONE, -1, 2, True)), 1)
    assert (leader.role, leader.epoch, log.entries[-1].epoch, log.entries[-1].control) == (Role.LEADER, 2, 2, True)
    # Voter 2 holds the epoch-1 entries, not the leader's own: a majority of old entries commits nothing.
    request(leader, 2, FetchRequest(CLUSTER, 2, 2, fetch_offset=2, last_fetched_epoch=1, max_wait_ms=0))
    assert leader.high_watermark == 0
    answer = request(leader, 2, FetchRequest(CLUSTER, 2, 2, fetch_offset=3, last_fetched_epoch=2, max_wait_ms=0), 2)
    assert (leader.high_watermark, answer.high_watermark) == (3, 3)


def test_a_leader_restarts_resigned_and_a_lone_voter_leads_at_once():
    store = InMemoryQuorumStateStore(ElectionState(4, leader_id=1, voted_id=1, voters=frozenset(VOTERS)))
    restarted = make_replica(1, log=log_of(4), store=store)
    assert (restarted.role, restarted.epoch) == (Role.RESIGNED, 4)
    lone = make_replica(1, voters=(1,))
    assert (lone.role, lone.epoch) == (Role.LEADER, 1)
    assert lone.append([b"a", b"b"], 5) == 2 and lone.high_watermark == 3
    with pytest.raises(NotLeaderError):
        make_replica(2).append([b"x"], 0)


def test_a_new_quorum_s_first_voter_campaigning_at_once_leads_before_any_election_timeout():
    replicas = [make_replica(node_id) for node_id in VOTERS]
    replicas[0].campaign_soon(0)
    network = Network(replicas)
    network.run(CONFIG.election_timeout_ms // 2)
    assert network.leader().node_id == 1 and network.leader().epoch == 1


def test_campaign_soon_changes_nothing_once_a_quorum_had_an_epoch():
    replica = make_replica(1, store=InMemoryQuorumStateStore(ElectionState(3, voters=frozenset(VOTERS))))
    deadline = replica.next_deadline_ms()
    replica.campaign_soon(0)
    assert replica.next_deadline_ms() == deadline > 0 and replica.role is Role.UNATTACHED
