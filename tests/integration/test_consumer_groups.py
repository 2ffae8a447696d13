"""KIP-848 consumer groups with confluent-kafka (group.protocol=consumer) on a 3-node cluster.

Members run as processes of their own (tests/integration/kip848_member.py), so that one can be
killed; each reports its rebalance callbacks and what it read. Every test checks the exact
messages read and that no partition was owned by two members at once (a partition's revocation
callback at its old owner comes before its assignment callback at the new one).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaConsumer
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from cluster.formats.errors import ErrorCode
from cluster.launch import Cluster
from node.apis.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from tests.integration.observe import committed, logged_errors
from tests.integration.wire import exchange_once

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_MS = 10000  # group.consumer.session.timeout.ms of the cluster (cluster/formats/config.py)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running
        # Joins, rebalances, leaves, sessions that end, refusals: all normal use, none worth an ERROR.
        assert {name: lines for name, lines in logged_errors(running).items() if lines} == {}


@pytest.fixture
def members():
    started: list[MemberProcess] = []
    yield started
    for member in started:
        member.kill()


class MemberProcess:
    def __init__(self, cluster, group: str, subscription: str, instance_id: str | None = None,
                 protocol: str = "consumer"):
        args = [sys.executable, "-m", "tests.integration.kip848_member", cluster.bootstrap_servers, group,
                subscription] + ([instance_id] if instance_id else [])
        env = {**os.environ, "PYTHONPATH": str(REPO), "GROUP_PROTOCOL": protocol}
        self.process = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def records(self) -> list[tuple[str, int, int, str]]:
        return [(e["topic"], e["partition"], e["offset"], e["value"]) for e in list(self.events)
                if e["event"] == "record"]

    def owned(self) -> set[tuple[str, int]]:
        owned: set[tuple[str, int]] = set()
        for event in list(self.events):
            parts = {tuple(p) for p in event.get("partitions", ())}
            if event["event"] == "assigned":
                owned |= parts
            elif event["event"] in ("revoked", "lost"):
                owned -= parts
        return owned

    def ownership(self) -> list[tuple[tuple[str, int], float, float]]:
        """(partition, from, until) for every stretch of time the member owned a partition."""
        since: dict[tuple[str, int], float] = {}
        spans = []
        for event in list(self.events):
            for p in map(tuple, event.get("partitions", ())):
                if event["event"] == "assigned":
                    since[p] = event["t"]
                elif event["event"] in ("revoked", "lost") and p in since:
                    spans.append((p, since.pop(p), event["t"]))
        spans.extend((p, t, float("inf")) for p, t in since.items())
        return spans

    def errors(self) -> list[str]:
        return [e["error"] for e in list(self.events) if e["event"] == "error"]

    def stop(self) -> None:
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        self.process.wait(timeout=30)
        self._reader.join(timeout=5)
        assert self.events[-1]["event"] == "closed"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def start(members: list, cluster, group: str, subscription: str, instance_id: str | None = None) -> MemberProcess:
    member = MemberProcess(cluster, group, subscription, instance_id)
    members.append(member)
    return member


def wait_until(condition, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce(cluster, topic: str, partitions, per_partition: int, start_at: int = 0) -> set[tuple]:
    """Writes per_partition messages to each partition (a count, or which ones) from offset start_at;
    returns (topic, partition, offset, value) of each."""
    partitions = range(partitions) if isinstance(partitions, int) else partitions
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in partitions:
        for i in range(start_at, start_at + per_partition):
            producer.produce(topic, value=f"{topic}-{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    return {(topic, p, i, f"{topic}-{p}-{i}") for p in partitions for i in range(start_at, start_at + per_partition)}


def new_topic(cluster, partitions: int, prefix: str = "kip848") -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    return topic


def read_by(group: list[MemberProcess]) -> list[tuple]:
    return [r for m in group for r in m.records()]


def assert_never_owned_twice(group: list[MemberProcess]) -> None:
    spans = [(m, *span) for m in group for span in m.ownership()]
    for i, (m1, p1, a1, b1) in enumerate(spans):
        for m2, p2, a2, b2 in spans[i + 1:]:
            if m1 is not m2 and p1 == p2:
                assert b1 <= a2 or b2 <= a1, f"{p1} owned by two members at once"


def all_assigned(group: list[MemberProcess], topic: str, partitions: int) -> bool:
    owned = [m.owned() for m in group]
    return sorted(p for o in owned for t, p in o if t == topic) == list(range(partitions))


def test_one_member_gets_every_partition_and_reads_exact_messages(cluster, members):
    topic = new_topic(cluster, 4)
    written = produce(cluster, topic, 4, 10)
    member = start(members, cluster, f"g-{uuid.uuid4().hex[:8]}", topic)
    wait_until(lambda: len(member.records()) >= len(written), what="every message")
    assert sorted(member.records()) == sorted(written)
    assert member.owned() == {(topic, p) for p in range(4)}
    assert member.errors() == []
    member.stop()


def test_members_joining_split_the_partitions_and_read_everything_once(cluster, members):
    topic, group = new_topic(cluster, 6), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 6, 20)
    first = start(members, cluster, group, topic)
    wait_until(lambda: len(first.owned()) == 6, what="the first member's assignment")
    second = start(members, cluster, group, topic)
    third = start(members, cluster, group, topic)
    trio = [first, second, third]
    wait_until(lambda: [len(m.owned()) for m in trio] == [2, 2, 2] and all_assigned(trio, topic, 6),
               what="two partitions each")
    written |= produce(cluster, topic, 6, 20, start_at=20)
    wait_until(lambda: len(read_by(trio)) >= len(written), what="every message")
    time.sleep(1)
    assert sorted(read_by(trio)) == sorted(written)
    assert_never_owned_twice(trio)
    # A member that closes hands its partitions over; the others read what comes next.
    third.stop()
    wait_until(lambda: [len(m.owned()) for m in trio[:2]] == [3, 3] and all_assigned(trio[:2], topic, 6),
               what="three partitions each")
    written |= produce(cluster, topic, 6, 5, start_at=40)
    wait_until(lambda: len(read_by(trio)) >= len(written), what="every message after the leave")
    time.sleep(1)
    assert sorted(read_by(trio)) == sorted(written)
    assert_never_owned_twice(trio)
    assert [m.errors() for m in trio] == [[], [], []]


def test_a_killed_member_loses_its_partitions_after_its_session(cluster, members):
    topic, group = new_topic(cluster, 4), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 4, 10)
    survivor = start(members, cluster, group, topic)
    doomed = start(members, cluster, group, topic)
    wait_until(lambda: [len(survivor.owned()), len(doomed.owned())] == [2, 2], what="two partitions each")
    wait_until(lambda: len(read_by([survivor, doomed])) >= len(written), what="every message")
    time.sleep(1)  # the periodic commit
    doomed.kill()
    killed_at = time.monotonic()
    wait_until(lambda: len(survivor.owned()) == 4, timeout=SESSION_TIMEOUT_MS / 1000 + 20,
               what="the survivor taking every partition")
    assert time.monotonic() - killed_at >= SESSION_TIMEOUT_MS / 1000 - 2
    written |= produce(cluster, topic, 4, 5, start_at=10)
    wait_until(lambda: {r for r in survivor.records() if r[2] >= 10} == {w for w in written if w[2] >= 10},
               what="the new messages at the survivor")
    assert survivor.errors() == []


def test_a_static_member_comes_back_to_its_partitions(cluster, members):
    topic, group = new_topic(cluster, 4), f"g-{uuid.uuid4().hex[:8]}"
    a = start(members, cluster, group, topic, instance_id="static-a")
    b = start(members, cluster, group, topic, instance_id="static-b")
    wait_until(lambda: [len(a.owned()), len(b.owned())] == [2, 2], what="two partitions each")
    before = b.owned()
    b.stop()  # a static member's close is a temporary leave: its partitions wait for it
    time.sleep(2)
    assert len(a.owned()) == 2
    again = start(members, cluster, group, topic, instance_id="static-b")
    wait_until(lambda: again.owned() == before, what="the same partitions back")
    assert len(a.owned()) == 2
    assert a.errors() == [] and again.errors() == []


def test_a_regex_subscription_picks_up_topics_created_later(cluster, members):
    prefix = f"orders{uuid.uuid4().hex[:6]}"
    first = new_topic(cluster, 2, prefix)
    written = produce(cluster, first, 2, 5)
    member = start(members, cluster, f"g-{uuid.uuid4().hex[:8]}", f"^{prefix}-.*")
    wait_until(lambda: len(member.records()) >= len(written), what="the first topic's messages")
    later = new_topic(cluster, 3, prefix)
    new_topic(cluster, 1, f"other{uuid.uuid4().hex[:6]}")
    written |= produce(cluster, later, 3, 5)
    wait_until(lambda: len(member.records()) >= len(written), what="the later topic's messages")
    assert sorted(member.records()) == sorted(written)
    assert member.owned() == {(first, 0), (first, 1), (later, 0), (later, 1), (later, 2)}


def test_partitions_added_to_a_subscribed_topic_are_consumed(cluster, members):
    topic, group = new_topic(cluster, 2), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 2, 5)
    member = start(members, cluster, group, topic)
    wait_until(lambda: len(member.records()) >= len(written), what="the first messages")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    wait_until(lambda: len(member.owned()) == 4, what="the new partitions")
    written |= produce(cluster, topic, 2, 5, start_at=5) | produce(cluster, topic, (2, 3), 5)
    wait_until(lambda: len(member.records()) >= len(written), what="every message")
    assert sorted(member.records()) == sorted(written)


def test_offsets_committed_are_where_the_next_member_resumes(cluster, members):
    topic, group = new_topic(cluster, 3), f"g-{uuid.uuid4().hex[:8]}"
    written = produce(cluster, topic, 3, 10)
    member = start(members, cluster, group, topic)
    wait_until(lambda: len(member.records()) >= len(written), what="every message")
    member.stop()
    assert committed(cluster, group) == {0: 10, 1: 10, 2: 10}
    later = produce(cluster, topic, 3, 4, start_at=10)
    resumed = start(members, cluster, group, topic)
    wait_until(lambda: len(resumed.records()) >= len(later), what="the messages after the commit")
    time.sleep(1)
    assert sorted(resumed.records()) == sorted(later)


def test_classic_consumers_keep_working_beside_consumer_groups(cluster, members):
    topic = new_topic(cluster, 2)
    written = produce(cluster, topic, 2, 5)
    member = start(members, cluster, f"g-{uuid.uuid4().hex[:8]}", topic)
    classic = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=f"c-{uuid.uuid4().hex[:8]}",
                            auto_offset_reset="earliest", consumer_timeout_ms=15000)
    try:
        read = set()
        for message in classic:
            read.add((message.topic, message.partition, message.offset, message.value.decode()))
            if len(read) == len(written):
                break
    finally:
        classic.close()
    assert read == written
    wait_until(lambda: len(member.records()) >= len(written), what="the consumer group member's messages")
    assert sorted(member.records()) == sorted(written)


# --- the wire ---

def coordinator(cluster, group: str, via: int | None = None) -> tuple[tuple[str, int], int]:
    node = cluster.nodes[min(cluster.nodes) if via is None else via]
    found = exchange_once((cluster.host, node.port), FindCoordinatorRequest[3](key=group, key_type=0),
                          FindCoordinatorResponse, 3)
    assert found.error_code == 0
    return (found.host, found.port), found.node_id


def heartbeat(address, version: int = 1, **fields) -> ConsumerGroupHeartbeatResponse:
    request = ConsumerGroupHeartbeatRequest[version](**fields)
    return exchange_once(address, request, ConsumerGroupHeartbeatResponse, version)


def join_fields(group: str, member_id: str, topic: str, **more) -> dict:
    return {"group_id": group, "member_id": member_id, "member_epoch": 0, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [topic], "topic_partitions": [], **more}


def test_heartbeats_that_kafka_refuses_are_answered_with_its_codes(cluster):
    topic, group = new_topic(cluster, 2), f"g-{uuid.uuid4().hex[:8]}"
    address, _ = coordinator(cluster, group)
    member_id = uuid.uuid4().hex
    joined = heartbeat(address, **join_fields(group, member_id, topic))
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, member_id, 1)
    assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
    assert joined.heartbeat_interval_ms == 500

    def code(**fields) -> int:
        return heartbeat(address, **{"group_id": group, "member_id": member_id, "member_epoch": 1, **fields}).error_code

    assert code(member_epoch=2) == ErrorCode.FENCED_MEMBER_EPOCH
    assert code(member_id="nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(server_assignor="sticky") == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert code(subscribed_topic_regex="orders-[") == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert code(member_epoch=-3) == ErrorCode.INVALID_REQUEST
    assert code(member_id="") == ErrorCode.INVALID_REQUEST
    bad_join = heartbeat(address, **{**join_fields(group, uuid.uuid4().hex, topic), "rebalance_timeout_ms": -1})
    assert (bad_join.error_code, bad_join.error_message) == (
        ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
    assert code() == ErrorCode.NONE  # none of the refusals changed the member
    # v0: the coordinator makes up the member id of a member joining without one.
    joined_v0 = heartbeat(address, version=0, **join_fields(group, "", topic))
    assert joined_v0.error_code == 0 and joined_v0.member_id
    # Static members: an instance id in use cannot join under another member id.
    assert heartbeat(address, **join_fields(group, "s1", topic, instance_id="i")).error_code == 0
    assert heartbeat(address, **join_fields(group, "s2", topic, instance_id="i")).error_code == \
        ErrorCode.UNRELEASED_INSTANCE_ID
    left = heartbeat(address, group_id=group, member_id=member_id, member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert code() == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_classic_apis_do_not_serve_a_consumer_protocol_member(cluster):
    from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse
    topic, group = new_topic(cluster, 1), f"g-{uuid.uuid4().hex[:8]}"
    address, _ = coordinator(cluster, group)
    assert heartbeat(address, **join_fields(group, "m", topic)).error_code == 0
    join = exchange_once(address, JoinGroupRequest[5](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
        JoinGroupResponse, 5)
    # A classic member may join (tests/integration/test_group_migration.py): first it learns its id.
    assert join.error_code == ErrorCode.MEMBER_ID_REQUIRED
    beat = exchange_once(address, HeartbeatRequest[3](group_id=group, generation_id=1, member_id="m",
                                                      group_instance_id=None), HeartbeatResponse, 3)
    assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
    listed = exchange_once(address, ListGroupsRequest[5](states_filter=[], types_filter=["consumer"]),
                           ListGroupsResponse, 5)
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups
            if g.group_id == group] == [(group, "consumer", "Stable", "consumer")]


def test_members_carry_on_when_their_coordinator_dies(members):
    with Cluster(nodes=3) as own:
        topic, group = new_topic(own, 4), f"g-{uuid.uuid4().hex[:8]}"
        written = produce(own, topic, 4, 10)
        pair = [start(members, own, group, topic), start(members, own, group, topic)]
        wait_until(lambda: [len(m.owned()) for m in pair] == [2, 2] and all_assigned(pair, topic, 4),
                   what="two partitions each")
        wait_until(lambda: len(read_by(pair)) >= len(written), what="every message")
        wait_until(lambda: committed(own, group) == {p: 10 for p in range(4)}, what="the commits")
        _, coordinator_id = coordinator(own, group)
        owned_before = [m.owned() for m in pair]
        own.kill_node(coordinator_id)
        written |= produce(own, topic, 4, 10, start_at=10)
        wait_until(lambda: len(read_by(pair)) >= len(written), timeout=60, what="every message after the failover")
        wait_until(lambda: committed(own, group) == {p: 20 for p in range(4)}, timeout=30,
                   what="the commits at the new coordinator")
        assert sorted(read_by(pair)) == sorted(written)
        assert_never_owned_twice(pair)
        survivor = next(node_id for node_id in own.nodes if node_id != coordinator_id)
        assert coordinator(own, group, via=survivor)[1] != coordinator_id
        # The new coordinator replayed the group: its members kept their partitions and epochs.
        assert [m.owned() for m in pair] == owned_before
        # Only the lost connections to the dead node: no group error reached the application.
        assert [[e for e in m.errors() if "_TRANSPORT" not in e] for m in pair] == [[], []]
        for member in pair:
            member.stop()


def owned_field(response) -> list:
    return [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t.topic_id, partitions=sorted(t.partitions))
            for t in response.assignment.topic_partitions]


def test_a_partition_moves_only_once_its_owner_revoked_it(cluster):
    topic, group = new_topic(cluster, 2), f"g-{uuid.uuid4().hex[:8]}"
    address, _ = coordinator(cluster, group)
    first = heartbeat(address, **join_fields(group, "a", topic))
    assert (first.member_epoch, sorted(first.assignment.topic_partitions[0].partitions)) == (1, [0, 1])
    topic_id = first.assignment.topic_partitions[0].topic_id
    second = heartbeat(address, **join_fields(group, "b", topic))
    # b is at the new epoch, but its partition is not released yet.
    assert (second.member_epoch, second.assignment.topic_partitions) == (2, [])

    def beat(member_id: str, epoch: int, owned: list[int]) -> ConsumerGroupHeartbeatResponse:
        return heartbeat(address, group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=[
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id, partitions=owned)] if owned else [])

    told = beat("a", 1, [0, 1])  # a must give one up: it keeps the other, at its old epoch
    assert told.member_epoch == 1
    kept = told.assignment.topic_partitions[0].partitions
    assert len(kept) == 1
    assert beat("b", 2, []).assignment is None  # still owned by a
    revoked = beat("a", 1, kept)
    assert revoked.member_epoch == 2
    given = beat("b", 2, [])
    assert [t.partitions for t in given.assignment.topic_partitions] == [[1 - kept[0]]]


def test_a_member_that_does_not_revoke_in_time_is_fenced(cluster):
    topic, group = new_topic(cluster, 2), f"g-{uuid.uuid4().hex[:8]}"
    address, _ = coordinator(cluster, group)
    first = heartbeat(address, **join_fields(group, "slow", topic, rebalance_timeout_ms=1000))
    topic_id = first.assignment.topic_partitions[0].topic_id
    heartbeat(address, **join_fields(group, "quick", topic))
    owned = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id, partitions=[0, 1])]
    assert heartbeat(address, group_id=group, member_id="slow", member_epoch=1,
                     topic_partitions=owned).member_epoch == 1
    time.sleep(1.5)
    late = heartbeat(address, group_id=group, member_id="slow", member_epoch=1, topic_partitions=owned)
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    quick = heartbeat(address, group_id=group, member_id="quick", member_epoch=2, topic_partitions=[])
    assert sorted(quick.assignment.topic_partitions[0].partitions) == [0, 1]


def test_a_full_group_takes_no_new_member():
    with Cluster(nodes=1, node_config={"group.consumer.max.size": "1"}) as small:
        topic, group = f"kip848-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        small.create_topic(topic, partitions=1)
        address, _ = coordinator(small, group)
        assert heartbeat(address, **join_fields(group, "one", topic)).error_code == 0
        refused = heartbeat(address, **join_fields(group, "two", topic))
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of 1 members.")


def test_a_classic_group_with_members_is_not_a_consumer_group(cluster):
    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
    topic, group = new_topic(cluster, 1), f"g-{uuid.uuid4().hex[:8]}"
    address, _ = coordinator(cluster, group)
    join = exchange_once(address, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
        JoinGroupResponse, 3)
    assert join.error_code == 0
    # Its member's subscription is not the consumer protocol's: the group cannot be upgraded
    # (tests/integration/test_group_migration.py upgrades one that can).
    refused = heartbeat(address, **join_fields(group, "m", topic))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Cannot upgrade classic group {group} to consumer group because the embedded consumer protocol is "
        "malformed.")
