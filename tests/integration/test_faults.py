"""Faults injected into live nodes: isolation, pauses, latency and one-shot errors."""
from __future__ import annotations

import os
import signal
import socket
import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from cluster.formats.config import BROKER_DEFAULTS
from cluster.launch import Cluster
from cluster.formats.records import encode_batch
from tests.integration.messages import read_partition
from tests.integration.wire import exchange, exchange_once, fetch_values, read_response, send_request

NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running


def partition_state(cluster, topic: str) -> dict:
    return next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"][0]


def wait_for_partition(cluster, topic: str, condition, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = partition_state(cluster, topic)
        if condition(state):
            return state
        assert time.monotonic() < deadline, f"{topic}-0 never reached the expected state; last {state}"
        time.sleep(0.05)


def address_of(cluster, node_id: int) -> tuple[str, int]:
    return cluster.host, cluster.nodes[node_id].port


def bootstrap_of(cluster, *node_ids: int) -> str:
    return ",".join(f"{cluster.host}:{cluster.nodes[n].port}" for n in node_ids)


def produce_acks_all(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [producer.send(topic, value, partition=0) for value in values]
        producer.flush()
        return [future.get(10).offset for future in futures]
    finally:
        producer.close()


def segment_bytes(cluster, node_id: int, topic: str) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def raw_produce(address, topic: str, value: bytes, acks: int = 1):
    T = ProduceRequest.TopicProduceData
    batch = encode_batch([(None, value)], timestamp=1_700_000_000_000)
    request = ProduceRequest[9](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    result = exchange_once(address, request, ProduceResponse, 9).responses[0].partition_responses[0]
    return result.error_code, result.base_offset


def new_topic(cluster, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_for_partition(cluster, topic, lambda p: sorted(p["isr"]) == [1, 2, 3])
    return topic


def topic_with_ten_messages(cluster, prefix: str) -> tuple[str, list[bytes], int, list[int]]:
    """(topic, its messages, its leader, the other nodes)."""
    topic = new_topic(cluster, prefix)
    first = [f"before-{i}".encode() for i in range(10)]
    assert produce_acks_all(cluster.bootstrap_servers, topic, first) == list(range(10))
    leader = partition_state(cluster, topic)["leader"]
    return topic, first, leader, [n for n in cluster.nodes if n != leader]


def test_an_isolated_leader_is_replaced_and_drops_its_unreplicated_tail_on_healing(cluster):
    topic, first, old_leader, others = topic_with_ten_messages(cluster, "isolated")

    cluster.isolate_node(old_leader)  # from the controller and its peers; clients still reach it
    # A client that still believes in the old leader gets acks=1 writes acknowledged there, as
    # with Kafka: they exist on that node only, above its high watermark.
    stranded = [raw_produce(address_of(cluster, old_leader), topic, f"stranded-{i}".encode()) for i in range(3)]
    assert stranded == [(0, 10), (0, 11), (0, 12)]
    assert fetch_values(address_of(cluster, old_leader), topic) == first  # never visible

    started = time.monotonic()
    state = wait_for_partition(cluster, topic, lambda p: p["leader"] in others)
    print(f"\nisolated leader {old_leader} replaced by {state['leader']} after {time.monotonic() - started:.2f}s")
    assert old_leader not in state["isr"]
    after = [f"after-{i}".encode() for i in range(5)]
    assert produce_acks_all(bootstrap_of(cluster, *others), topic, after) == list(range(10, 15))

    cluster.heal_node(old_leader)
    wait_for_partition(cluster, topic, lambda p: old_leader in p["isr"])
    assert read_partition(cluster.bootstrap_servers, topic) == first + after
    copies = {n: segment_bytes(cluster, n, topic) for n in cluster.nodes}
    assert copies[old_leader] == copies[state["leader"]], "the healed node kept a diverged tail"
    assert len(set(copies.values())) == 1


def test_a_paused_leader_is_fenced_replaced_and_catches_up_after_resuming(cluster):
    topic, first, old_leader, others = topic_with_ten_messages(cluster, "paused")

    cluster.pause_node(old_leader)
    try:
        state = wait_for_partition(cluster, topic, lambda p: p["leader"] in others)
        assert old_leader not in state["isr"]
        after = [f"after-{i}".encode() for i in range(5)]
        assert produce_acks_all(bootstrap_of(cluster, *others), topic, after) == list(range(10, 15))
    finally:
        cluster.resume_node(old_leader)
    wait_for_partition(cluster, topic, lambda p: old_leader in p["isr"])
    assert read_partition(cluster.bootstrap_servers, topic) == first + after
    assert len({segment_bytes(cluster, n, topic) for n in cluster.nodes}) == 1


def test_kill_node_returns_once_the_killed_leader_is_fenced(cluster):
    topic = new_topic(cluster, "killed")
    old_leader = partition_state(cluster, topic)["leader"]
    cluster.kill_node(old_leader)
    try:
        state = partition_state(cluster, topic)  # no waiting: kill_node returns after the fence
        assert state["leader"] != old_leader and old_leader not in state["isr"]
        assert produce_acks_all(cluster.bootstrap_servers, topic, [b"after the crash"]) == [0]
    finally:
        cluster.restart_node(old_leader)
    wait_for_partition(cluster, topic, lambda p: old_leader in p["isr"])
    assert read_partition(cluster.bootstrap_servers, topic) == [b"after the crash"]


def test_a_crash_nobody_reports_is_fenced_by_the_controllers_watch_not_the_heartbeat_timeout(tmp_path):
    # With a one-minute session timeout, only the controller's watch on the node's pid can move
    # the leadership within the wait below: nothing reports the SIGKILL sent here.
    with Cluster(nodes=2, data_dir=tmp_path / "cluster", node_config={"broker.session.timeout.ms": "60000"}) as small:
        topic = f"unreported-{uuid.uuid4().hex[:6]}"
        small.create_topic(topic, partitions=1, replication_factor=2)
        state = wait_for_partition(small, topic, lambda p: sorted(p["isr"]) == [1, 2])
        leader = state["leader"]
        assert produce_acks_all(small.bootstrap_servers, topic, [b"before the crash"]) == [0]
        started = time.monotonic()
        os.kill(small.nodes[leader].pid, signal.SIGKILL)
        state = wait_for_partition(small, topic, lambda p: p["leader"] != leader, timeout=30)
        print(f"\nleader {leader} killed behind the launcher's back: replaced after {time.monotonic() - started:.2f}s")
        assert state["isr"] == [state["leader"]]
        survivor = state["leader"]
        assert produce_acks_all(bootstrap_of(small, survivor), topic, [b"after the crash"]) == [1]
        assert read_partition(bootstrap_of(small, survivor), topic) == [b"before the crash", b"after the crash"]


def test_a_node_isolated_from_clients_answers_nothing_until_healed(cluster):
    node_id = 2
    cluster.isolate_node(node_id, ["clients"])
    try:
        with socket.create_connection(address_of(cluster, node_id), timeout=1.0) as sock:
            send_request(sock, MetadataRequest[1](topics=[]), 1)
            with pytest.raises(socket.timeout):
                read_response(sock, MetadataResponse, 1)
            sock.settimeout(10)
            cluster.heal_node(node_id)
            _, response = read_response(sock, MetadataResponse, 1)  # held, then answered: TCP after a partition
            assert sorted(b.node_id for b in response.brokers) == [1, 2, 3]
    finally:
        cluster.heal_node(node_id)
    assert cluster.node_faults(node_id)["isolated_from"] == []


def test_delay_adds_latency_to_every_response(cluster):
    node_id = 3
    with socket.create_connection(address_of(cluster, node_id), timeout=10) as sock:
        def round_trip() -> float:
            started = time.monotonic()
            exchange(sock, MetadataRequest[1](topics=[]), MetadataResponse, 1)
            return time.monotonic() - started

        plain = round_trip()
        cluster.delay_node(node_id, 300)
        try:
            delayed = round_trip()
        finally:
            cluster.delay_node(node_id, 0)
        restored = round_trip()
    print(f"\nmetadata round trip: {plain * 1000:.1f} ms, with 300 ms delay {delayed * 1000:.1f} ms, "
          f"after removing it {restored * 1000:.1f} ms")
    assert delayed >= 0.3


def test_an_injected_error_answers_once_without_executing_the_request(cluster):
    topic = new_topic(cluster, "injected")
    leader = partition_state(cluster, topic)["leader"]
    cluster.inject_error(leader, "Produce", "NOT_LEADER_OR_FOLLOWER")
    assert raw_produce(address_of(cluster, leader), topic, b"refused", acks=-1)[0] == NOT_LEADER_OR_FOLLOWER
    assert raw_produce(address_of(cluster, leader), topic, b"accepted", acks=-1) == (0, 0)

    # A real client retries an injected retriable error, and the refused attempt wrote nothing.
    cluster.inject_error(leader, "produce", NOT_ENOUGH_REPLICAS, count=2)
    assert produce_acks_all(cluster.bootstrap_servers, topic, [b"retried"]) == [1]
    assert read_partition(cluster.bootstrap_servers, topic) == [b"accepted", b"retried"]
    assert cluster.node_faults(leader)["injected_errors"] == []


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_after_the_lag_time(tmp_path):
    # The follower keeps heartbeating (it is not fenced): only ISR shrink can take it out.
    with Cluster(nodes=3, data_dir=tmp_path / "cluster", node_config={"replica.lag.time.max.ms": "1500"}) as cluster:
        topic = new_topic(cluster, "lagging")
        leader = partition_state(cluster, topic)["leader"]
        follower = next(n for n in cluster.nodes if n != leader)
        cluster.isolate_node(follower, [leader])
        started = time.monotonic()
        # Parked until the ISR shrinks; then on two copies, which min.insync.replicas=2 allows.
        assert produce_acks_all(cluster.bootstrap_servers, topic, [b"while cut off"]) == [0]
        print(f"\nacks=all answered {time.monotonic() - started:.2f}s after the follower was cut off")
        state = partition_state(cluster, topic)
        assert follower not in state["isr"] and len(state["isr"]) == 2
        assert cluster.status()["brokers"][follower - 1]["fenced"] is False

        # With min.insync.replicas=3 the shrink leaves the ISR under it: the high watermark stops
        # (Kafka 3.7+), so a parked write times out, unseen by consumers, until the ISR is whole again.
        strict = f"{topic}-strict"
        cluster.create_topic(strict, partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        wait_for_partition(cluster, strict, lambda p: sorted(p["isr"]) == [1, 2, 3])
        strict_leader = partition_state(cluster, strict)["leader"]
        cut_off = next(n for n in cluster.nodes if n not in (strict_leader, follower))
        cluster.isolate_node(cut_off, [strict_leader])
        error, _ = raw_produce(address_of(cluster, strict_leader), strict, b"appended", acks=-1)
        assert error == REQUEST_TIMED_OUT
        assert cut_off not in partition_state(cluster, strict)["isr"]
        assert fetch_values(address_of(cluster, strict_leader), strict) == []

        cluster.heal_node(follower)
        cluster.heal_node(cut_off)
        wait_for_partition(cluster, topic, lambda p: sorted(p["isr"]) == [1, 2, 3])
        wait_for_partition(cluster, strict, lambda p: sorted(p["isr"]) == [1, 2, 3])
        assert read_partition(cluster.bootstrap_servers, topic) == [b"while cut off"]
        assert fetch_values(address_of(cluster, strict_leader), strict, wait_ms=5000) == [b"appended"]


def test_a_follower_back_from_a_cut_rejoins_the_isr_with_nothing_new_to_fetch(tmp_path):
    # Nothing is written while it is away: it lacks nothing, and its fetch session with the leader
    # goes on where it stopped, so only the leader reading the partition for it again lets it back.
    with Cluster(nodes=3, data_dir=tmp_path / "cluster", node_config={"replica.lag.time.max.ms": "1500"}) as cluster:
        topic = new_topic(cluster, "quiet")
        assert produce_acks_all(cluster.bootstrap_servers, topic, [b"before the cut"]) == [0]
        leader = partition_state(cluster, topic)["leader"]
        follower = next(n for n in cluster.nodes if n != leader)
        cluster.isolate_node(follower, [leader])
        wait_for_partition(cluster, topic, lambda p: follower not in p["isr"])
        cluster.heal_node(follower)
        state = wait_for_partition(cluster, topic, lambda p: sorted(p["isr"]) == [1, 2, 3])
        assert state["leader"] == leader
        assert read_partition(cluster.bootstrap_servers, topic) == [b"before the cut"]


def offsets_partition_state(cluster, group: str) -> dict:
    from node.groups.placement import OFFSETS_TOPIC, partition_for_group

    return next(p for t in cluster.status()["topics"] if t["name"] == OFFSETS_TOPIC
                for p in t["partitions"] if p["partition"] == partition_for_group(group, 50))


def group_coordinator(cluster, group: str) -> tuple[int, list[int]]:
    """(the coordinator of group, the followers of its __consumer_offsets partition), once all are in sync."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
    from node.groups.placement import OFFSETS_TOPIC

    # Finding the coordinator creates __consumer_offsets; until it has leaders the answer is 15.
    find = FindCoordinatorRequest[3](key=group, key_type=0)
    deadline = time.monotonic() + 20
    while exchange_once(address_of(cluster, 1), find, FindCoordinatorResponse, 3).error_code:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.1)
    assert cluster.wait_in_sync(OFFSETS_TOPIC)
    state = offsets_partition_state(cluster, group)
    return state["leader"], [r for r in state["replicas"] if r != state["leader"]]


def wait_until_followers_have_everything(cluster, coordinator: int, followers: list[int], group: str) -> None:
    """Until the followers of the group's __consumer_offsets partition end where the coordinator does."""
    from node.groups.placement import OFFSETS_TOPIC

    key = (OFFSETS_TOPIC, offsets_partition_state(cluster, group)["partition"])
    deadline = time.monotonic() + 20
    while True:
        ends = {node: next(p["log_end_offset"] for p in state["partitions"] if (p["topic"], p["partition"]) == key)
                for node, state in cluster.replica_states().items() if node in [coordinator, *followers]}
        if len(set(ends.values())) == 1 and len(ends) == 1 + len(followers):
            return
        assert time.monotonic() < deadline, f"the followers never caught up: {ends}"
        time.sleep(0.05)


# Followers that cannot fetch, but stay in the ISR while the coordinator waits for them.
UNREPLICATED_GROUP_WRITES = {"offsets.commit.timeout.ms": "1500", "replica.lag.time.max.ms": "60000"}


def test_offset_commits_are_acknowledged_only_once_every_in_sync_replica_has_them(tmp_path):
    from kafka.protocol.consumer import (
        OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    )
    from node.groups.placement import OFFSETS_TOPIC

    with Cluster(nodes=3, data_dir=tmp_path / "cluster", node_config=UNREPLICATED_GROUP_WRITES) as cluster:
        topic, group = new_topic(cluster, "committed"), "acks-all-group"
        coordinator, followers = group_coordinator(cluster, group)

        def commit(offset: int) -> int:
            T = OffsetCommitRequest.OffsetCommitRequestTopic
            request = OffsetCommitRequest[8](
                group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                retention_time_ms=-1, topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])])
            response = exchange_once(address_of(cluster, coordinator), request, OffsetCommitResponse, 8)
            return response.topics[0].partitions[0].error_code

        def committed() -> int:
            T = OffsetFetchRequest.OffsetFetchRequestTopic
            request = OffsetFetchRequest[7](group_id=group, require_stable=False,
                                            topics=[T(name=topic, partition_indexes=[0])])
            response = exchange_once(address_of(cluster, coordinator), request, OffsetFetchResponse, 7)
            return response.topics[0].partitions[0].committed_offset

        assert commit(5) == 0 and committed() == 5
        for follower in followers:
            cluster.isolate_node(follower, [coordinator])
        try:
            # Written on the coordinator only: not acknowledged, and not what OffsetFetch answers.
            assert commit(9) == COORDINATOR_NOT_AVAILABLE
            assert committed() == 5
        finally:
            for follower in followers:
                cluster.heal_node(follower)
        assert cluster.wait_in_sync(OFFSETS_TOPIC)
        assert commit(9) == 0 and committed() == 9

        # With its followers dead the coordinator is the whole ISR: its own write is the commit.
        for follower in followers:
            cluster.kill_node(follower)
        offsets_partition = offsets_partition_state(cluster, group)["partition"]
        deadline = time.monotonic() + 20
        while next(p["isr"] for p in cluster.replica_states()[coordinator]["partitions"]
                   if (p["topic"], p["partition"]) == (OFFSETS_TOPIC, offsets_partition)) != [coordinator]:
            assert time.monotonic() < deadline, "the coordinator never saw its followers leave the ISR"
            time.sleep(0.05)
        # Fetches the followers had parked on the coordinator expire: nothing of theirs moves it now.
        time.sleep(2 * int(BROKER_DEFAULTS["replica.fetch.wait.max.ms"]) / 1000)
        assert commit(12) == 0 and committed() == 12


def join_request(group: str, member_id: str = ""):
    from kafka.protocol.consumer import JoinGroupRequest

    P = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest[3](group_id=group, session_timeout_ms=60000, rebalance_timeout_ms=60000,
                               member_id=member_id, protocol_type="consumer",
                               protocols=[P(name="range", metadata=b"subscription")])


def join_group(address, group: str, member_id: str = "") -> tuple[str, int]:
    """(member id, generation) of a JoinGroup v3 that completes at once."""
    from kafka.protocol.consumer import JoinGroupResponse

    response = exchange_once(address, join_request(group, member_id), JoinGroupResponse, 3)
    assert response.error_code == 0
    return response.member_id, response.generation_id


def sync_group(address, group: str, member_id: str, generation: int, assignment: bytes) -> tuple[int, bytes]:
    """(error code, assignment) of the group leader's SyncGroup v3 assigning to itself."""
    from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

    A = SyncGroupRequest.SyncGroupRequestAssignment
    request = SyncGroupRequest[3](group_id=group, generation_id=generation, member_id=member_id,
                                  group_instance_id=None, assignments=[A(member_id=member_id, assignment=assignment)])
    response = exchange_once(address, request, SyncGroupResponse, 3)
    return response.error_code, response.assignment


def test_a_group_assignment_is_answered_only_once_every_in_sync_replica_has_it(tmp_path):
    from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

    with Cluster(nodes=3, data_dir=tmp_path / "cluster", node_config=UNREPLICATED_GROUP_WRITES) as cluster:
        group = "replicated-assignment"
        coordinator, followers = group_coordinator(cluster, group)
        address = address_of(cluster, coordinator)

        for follower in followers:
            cluster.isolate_node(follower, [coordinator])
        try:
            member, generation = join_group(address, group)
            # Stored on the coordinator only: the member is not told its assignment.
            assert sync_group(address, group, member, generation, b"first") == (COORDINATOR_NOT_AVAILABLE, b"")
        finally:
            for follower in followers:
                cluster.heal_node(follower)
        wait_until_followers_have_everything(cluster, coordinator, followers, group)
        member, generation = join_group(address, group, member)  # the failed store began a new rebalance
        assert sync_group(address, group, member, generation, b"second") == (0, b"second")

        # The coordinator that takes over after a crash knows the acknowledged assignment.
        cluster.kill_node(coordinator)
        new_coordinator = offsets_partition_state(cluster, group)["leader"]
        assert new_coordinator != coordinator
        describe = DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False)
        deadline = time.monotonic() + 20
        while (described := exchange_once(address_of(cluster, new_coordinator), describe,
                                          DescribeGroupsResponse, 5).groups[0]).error_code:
            assert time.monotonic() < deadline, f"group never loaded: error {described.error_code}"
            time.sleep(0.1)
        assert described.group_state == "Stable"
        assert [(m.member_id, m.member_assignment) for m in described.members] == [(member, b"second")]


def test_a_member_waiting_on_a_coordinator_that_loses_the_group_is_sent_to_find_the_new_one(tmp_path):
    from kafka.protocol.consumer import JoinGroupResponse

    with Cluster(nodes=3, data_dir=tmp_path / "cluster",
                 node_config={"leader.imbalance.check.interval.seconds": "1"}) as cluster:
        group = "moving-coordinator"
        preferred, _ = group_coordinator(cluster, group)
        assert offsets_partition_state(cluster, group)["replicas"][0] == preferred
        cluster.stop_node(preferred)
        interim = offsets_partition_state(cluster, group)["leader"]
        address = address_of(cluster, interim)
        first, generation = join_group(address, group)
        assert sync_group(address, group, first, generation, b"first") == (0, b"first")
        with socket.create_connection(address, timeout=30) as sock:
            # A second member starts a rebalance and waits in JoinGroup for the first to rejoin,
            # which it never does: only the coordinator's resignation answers it.
            send_request(sock, join_request(group), 3)
            cluster.restart_node(preferred)  # once back in sync it leads the partition again
            _, response = read_response(sock, JoinGroupResponse, 3)
        assert response.error_code == NOT_COORDINATOR
        assert offsets_partition_state(cluster, group)["leader"] == preferred
