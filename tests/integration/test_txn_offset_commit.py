"""TxnOffsetCommit over the wire on a real cluster: Kafka's error codes, offsets pending and invisible
to OffsetFetch until their transaction ends, UNSTABLE_OFFSET_COMMIT with require_stable, and pending
offsets that survive a move of the group's coordinator. The requests are kafka-python's codecs sent
on raw sockets, as a transactional producer sends them; the transaction's end (the marker's
commit) is the transaction coordinator's and is tested with it."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from kafka.protocol.consumer import (
    JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from cluster.launch import Cluster
from tests.integration.wire import exchange, exchange_once

NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 16, 14, 22, 25
UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, INVALID_PRODUCER_EPOCH = 3, 12, 47
FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 82, 88
PARTITIONS = 2
WAIT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn-offsets") / "cluster") as running:
        yield running


@pytest.fixture(scope="module")
def topic(cluster) -> str:
    name = f"consumed-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    return name


def new_group() -> str:
    return f"txn-group-{uuid.uuid4().hex[:8]}"


def coordinator(cluster, group: str) -> tuple[str, int]:
    """The group's coordinator, as a client finds it (which creates __consumer_offsets on first use)."""
    node = cluster.nodes[min(cluster.nodes)]
    deadline = time.monotonic() + WAIT_S
    while True:
        found = exchange_once((cluster.host, node.port), FindCoordinatorRequest[3](key=group, key_type=0),
                              FindCoordinatorResponse, 3)
        if found.error_code == 0:
            return found.host, found.port
        assert time.monotonic() < deadline, f"no coordinator for {group}: error {found.error_code}"
        time.sleep(0.1)


def txn_commit(address, group: str, topic: str, offsets: dict[int, int], version: int = 5,
               producer: tuple[int, int] = (4000, 0), generation: int = -1, member: str = "",
               instance: str | None = None, metadata: str = "") -> dict[int, int]:
    """{partition: error code} of one TxnOffsetCommit."""
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    request = TxnOffsetCommitRequest[version](
        transactional_id=f"txn-{group}", group_id=group, producer_id=producer[0], producer_epoch=producer[1],
        generation_id=generation, member_id=member, group_instance_id=instance, topics=[T(name=topic, partitions=[
            T.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                              committed_metadata=metadata) for p, o in offsets.items()])])
    answer = exchange_once(address, request, TxnOffsetCommitResponse, version)
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def plain_commit(address, group: str, topic: str, offsets: dict[int, int]) -> None:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest[8](group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                     group_instance_id=None, topics=[T(name=topic, partitions=[
                                         T.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                                        committed_leader_epoch=-1,
                                                                        committed_metadata="")
                                         for p, o in offsets.items()])])
    answer = exchange_once(address, request, OffsetCommitResponse, 8)
    assert {p.error_code for t in answer.topics for p in t.partitions} == {0}


def fetch_offsets(address, group: str, topic: str, require_stable: bool, version: int = 8):
    """{partition: (offset, error code)} as OffsetFetch answers them, and the group's error."""
    if version < 8:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest[version](group_id=group, require_stable=require_stable,
                                              topics=[T(name=topic, partition_indexes=list(range(PARTITIONS)))])
        answer = exchange_once(address, request, OffsetFetchResponse, version)
        error, topics = answer.error_code, answer.topics
    else:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest[version](require_stable=require_stable, groups=[G(
            group_id=group, member_id=None, member_epoch=-1,
            topics=[G.OffsetFetchRequestTopics(name=topic, partition_indexes=list(range(PARTITIONS)))])])
        answered = exchange_once(address, request, OffsetFetchResponse, version).groups[0]
        error, topics = answered.error_code, answered.topics
    return {p.partition_index: (p.committed_offset, p.error_code) for t in topics for p in t.partitions}, error


def test_only_the_coordinator_takes_transactional_offsets(cluster, topic):
    group = new_group()
    host, port = coordinator(cluster, group)
    elsewhere = next(node for node in cluster.nodes.values() if node.port != port)
    assert txn_commit((cluster.host, elsewhere.port), group, topic, {0: 5, 1: 6}) == {0: NOT_COORDINATOR,
                                                                                        1: NOT_COORDINATOR}
    assert txn_commit((host, port), group, topic, {0: 5}) == {0: 0}


def test_unknown_partitions_and_large_metadata_are_refused_per_partition(cluster, topic):
    group = new_group()
    address = coordinator(cluster, group)
    assert txn_commit(address, group, "no-such-topic", {0: 1}) == {0: UNKNOWN_TOPIC_OR_PARTITION}
    assert txn_commit(address, group, topic, {0: 1, 7: 1}) == {0: 0, 7: UNKNOWN_TOPIC_OR_PARTITION}
    assert txn_commit(address, group, topic, {1: 1}, metadata="m" * 4097) == {1: OFFSET_METADATA_TOO_LARGE}


def join_group(address, group: str, instance: str | None = None) -> tuple[str, int]:
    """(member id, generation) of the only member of a classic group, once its assignment is stored."""
    with socket.create_connection(address, timeout=10) as sock:
        joined = exchange(sock, JoinGroupRequest[5](
            group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000, member_id="",
            group_instance_id=instance, protocol_type="consumer", protocols=[("range", b"")]), JoinGroupResponse, 5)
        assert joined.error_code == 0
        synced = exchange(sock, SyncGroupRequest[3](
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=instance, assignments=[(joined.member_id, b"")]), SyncGroupResponse, 3)
        assert synced.error_code == 0
    return joined.member_id, joined.generation_id


def test_a_consumer_group_member_is_checked_from_v3(cluster, topic):
    group = new_group()
    address = coordinator(cluster, group)
    member, generation = join_group(address, group, instance="static-1")
    commit = {0: 3}
    assert txn_commit(address, group, topic, commit, generation=generation + 1, member=member,
                      instance="static-1") == {0: ILLEGAL_GENERATION}
    assert txn_commit(address, group, topic, commit, generation=generation, member="ghost") == {0: UNKNOWN_MEMBER_ID}
    assert txn_commit(address, group, topic, commit, generation=generation, member="ghost",
                      instance="static-1") == {0: FENCED_INSTANCE_ID}
    assert txn_commit(address, group, topic, commit, generation=generation, member=member,
                      instance="static-1") == {0: 0}
    # Versions 0-2 name no member, and a producer outside the group may commit for it, as in Kafka.
    assert txn_commit(address, group, topic, commit, version=2) == {0: 0}
    assert txn_commit(address, group, topic, commit, version=3) == {0: 0}


def test_pending_offsets_are_invisible_and_unstable_until_their_transaction_ends(cluster, topic):
    group = new_group()
    address = coordinator(cluster, group)
    plain_commit(address, group, topic, {0: 10, 1: 20})
    assert txn_commit(address, group, topic, {0: 15}, producer=(5000, 2)) == {0: 0}
    for version in (7, 8, 9):
        assert fetch_offsets(address, group, topic, require_stable=False, version=version) == (
            {0: (10, 0), 1: (20, 0)}, 0)
        assert fetch_offsets(address, group, topic, require_stable=True, version=version) == (
            {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (20, 0)}, 0)
    # A zombie of the producer, with the epoch before, is fenced.
    assert txn_commit(address, group, topic, {1: 99}, producer=(5000, 1)) == {1: INVALID_PRODUCER_EPOCH}
    assert fetch_offsets(address, group, topic, require_stable=True)[0][1] == (20, 0)


def test_pending_offsets_move_with_the_coordinator(cluster, topic):
    group = new_group()
    address = coordinator(cluster, group)
    plain_commit(address, group, topic, {0: 10})
    assert txn_commit(address, group, topic, {0: 15, 1: 25}, producer=(6000, 0)) == {0: 0, 1: 0}
    moved = cluster.move_group_coordinator(group)
    assert moved["to"] != moved["from"]
    successor = coordinator(cluster, group)
    assert successor != address
    deadline = time.monotonic() + WAIT_S
    while (answer := fetch_offsets(successor, group, topic, require_stable=True))[1] == COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline, "the new coordinator never finished loading"
        time.sleep(0.1)
    assert answer == ({0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, UNSTABLE_OFFSET_COMMIT)}, 0)
    assert fetch_offsets(successor, group, topic, require_stable=False) == ({0: (10, 0), 1: (-1, 0)}, 0)
