"""Consumer-group rebalances on demand with real clients: `group rebalance`, `group remove-member` and
`group move-coordinator` make kafka-python's ConsumerRebalanceListener and confluent-kafka's
on_revoke/on_assign run with exact partitions, and every message is still read exactly once."""
from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import traceback
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from cluster.tools.group_tools import coordinator_placement
from cluster.launch import Cluster, ClusterError
from tests.integration.test_cli import KRAFTWERK, kraftwerk
from tests.integration.test_groups import committed
from tests.integration.wire import exchange_once

PARTITIONS = 4
HALF = 100  # messages written before the group command, and as many after it
WAIT_S = 60
SHORT_SESSION_MS = 6000  # group.min.session.timeout.ms
KAFKA_PYTHON_POLL_MS = 5000
ALL_PARTITIONS = frozenset(range(PARTITIONS))


@pytest.fixture(scope="module", autouse=True)
def client_group_logs():
    """kafka-python's group coordinator logs at DEBUG here, so that a failing test's captured log tells
    each member's joins, syncs and heartbeats."""
    logger = logging.getLogger("kafka.coordinator")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield
    logger.setLevel(level)


def member_thread_stacks() -> str:
    """Where every member's thread, and each kafka-python member's IO thread, is right now."""
    frames = sys._current_frames()
    return "".join(f"\n--- thread {t.name}\n" + "".join(traceback.format_stack(frames[t.ident]))
                   for t in threading.enumerate()
                   if t.name.startswith(("kafka-python-", "kafka-io-kafka-python-", "confluent-kafka-"))
                   and t.ident in frames)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("group-tools") / "cluster") as running:
        yield running


def new_topic(cluster) -> str:
    topic = f"listened-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    return topic


def produce(cluster, topic: str, first: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(first, first + count):
        producer.send(topic, value=f"message-{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


# Shared by every member, so that a wait on the group as a whole wakes whichever member moves it on.
CHANGED = threading.Condition()


class Member:
    """One group member consuming in its own thread; it records each revoke/assign callback (with the
    generation the client reports, where it tells it) and every message it was given."""

    def __init__(self, name: str):
        self.name = name
        self.events: list[tuple[str, frozenset[int], int]] = []
        self.values: list[str] = []
        self.changed = CHANGED
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "Member":
        self._thread.start()
        return self

    def note(self, kind: str, partitions, generation: int) -> None:
        with self.changed:
            self.events.append((kind, frozenset(p.partition for p in partitions), generation))
            self.changed.notify_all()

    def received(self, values: list[str]) -> None:
        with self.changed:
            self.values.extend(values)
            self.changed.notify_all()

    def wait_until(self, predicate, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while not predicate():
                if not self.changed.wait(deadline - time.monotonic()):
                    raise AssertionError(f"{self.name}: {what} did not happen within {WAIT_S}s: {self.events}"
                                         f"{member_thread_stacks()}")

    def assignment(self) -> frozenset[int]:
        assigned = frozenset()
        for kind, partitions, _ in self.events:
            assigned = partitions if kind == "assigned" else assigned - partitions
        return assigned

    def settled(self) -> bool:
        """False while the client is about to rejoin on its own."""
        return True

    def stop(self) -> None:
        self.ask_to_stop()
        self.wait_stopped()

    def ask_to_stop(self) -> None:
        self._stop.set()  # seen once its poll returns

    def wait_stopped(self) -> None:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), f"{self.name} did not stop"

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll()
        finally:
            self.close()


class KafkaPythonMember(Member, ConsumerRebalanceListener):
    def __init__(self, cluster, topic: str, group: str, instance_id: str | None, session_timeout_ms: int):
        super().__init__(f"kafka-python-{instance_id or 'dynamic'}")
        self.consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                      group_instance_id=instance_id, client_id=self.name,
                                      auto_offset_reset="earliest", session_timeout_ms=session_timeout_ms,
                                      heartbeat_interval_ms=500)
        # Knowing the topic's partitions before the first join spares a rebalance with an empty assignment.
        assert self.consumer.partitions_for_topic(topic) == ALL_PARTITIONS
        self.topic = topic
        self.consumer.subscribe([topic], listener=self)

    def generation(self) -> int:
        return self.consumer._coordinator._generation.generation_id

    def coordinator_id(self):
        return self.consumer._coordinator.coordinator_id

    def on_partitions_revoked(self, revoked):
        self.note("revoked", revoked, self.generation())

    def on_partitions_assigned(self, assigned):
        self.note("assigned", assigned, self.generation())

    def on_partitions_lost(self, lost):
        self.note("lost", lost, self.generation())

    def member_id(self) -> str:
        return self.consumer._coordinator._generation.member_id

    def settled(self) -> bool:
        # A leader that assigned before its metadata listed the topic's partitions rejoins once it does.
        coordinator = self.consumer._coordinator
        return coordinator._metadata_snapshot.get(self.topic) == ALL_PARTITIONS and not coordinator.need_rejoin()

    def poll(self) -> None:
        # kafka-python 3.0.12 throws a join away when its SyncGroup answer comes just after poll()'s timeout
        # ran out, and joins once more: as leader, that starts one more rebalance of its own. So a join is
        # finished here without poll's timeout, and poll's timeout is long, so a join it starts itself (told
        # of a rebalance by a heartbeat) rarely outlives it.
        coordinator = self.consumer._coordinator
        if coordinator.need_rejoin():
            coordinator.ensure_active_group(timeout_ms=WAIT_S * 1000)
        batches = self.consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
        self.received([r.value.decode() for records in batches.values() for r in records])

    def close(self) -> None:
        self.consumer.close()  # commits what was consumed; a static member does not leave the group


class ConfluentMember(Member):
    """librdkafka does not tell its generation: its events carry -1, the coordinator tells it instead."""

    def __init__(self, cluster, topic: str, group: str, instance_id: str | None, session_timeout_ms: int):
        super().__init__(f"confluent-kafka-{instance_id or 'dynamic'}")
        config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "client.id": self.name,
                  "auto.offset.reset": "earliest", "session.timeout.ms": session_timeout_ms,
                  "heartbeat.interval.ms": 500}
        if instance_id:
            config["group.instance.id"] = instance_id
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions):
        self.note("assigned", partitions, -1)

    def _revoked(self, consumer, partitions):
        try:
            consumer.commit(asynchronous=False)  # what was read is not read again by the next owner
        except KafkaException:
            pass  # nothing consumed since the last commit
        self.note("revoked", partitions, -1)

    def poll(self) -> None:
        message = self.consumer.poll(0.2)
        if message is not None and not message.error():
            self.received([message.value().decode()])

    def close(self) -> None:
        self.consumer.close()


CLIENTS = {"kafka-python": KafkaPythonMember, "confluent-kafka": ConfluentMember}


def start_group(cluster, client: str, instance_ids=(None, None), session_timeout_ms: int = 30000
                ) -> tuple[str, str, list[Member]]:
    """A topic holding HALF messages and a group of two members that have read them all."""
    topic, group = new_topic(cluster), f"listeners-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, 0, HALF)
    members = []
    for instance_id in instance_ids:
        member = CLIENTS[client](cluster, topic, group, instance_id, session_timeout_ms).start()
        members.append(member)
        member.wait_until(lambda m=member: m.assignment(), "a first assignment")
    wait_settled(members)
    read_everything(members, HALF)
    return topic, group, members


def wait_settled(members: list[Member]) -> None:
    """Until the members hold the topic between them, each after an assignment, and none will rejoin."""
    def settled():
        assignments = [m.assignment() for m in members]
        return (sum(map(len, assignments)) == PARTITIONS and frozenset().union(*assignments) == ALL_PARTITIONS
                and all(m.events and m.events[-1][0] == "assigned" and m.settled() for m in members))
    for member in members:
        member.wait_until(settled, "the group settling")


def read_everything(members: list[Member], expected: int, running: list[Member] | None = None) -> None:
    """Until the members have read `expected` messages between them; waits on those still running."""
    def count():
        return sum(len(m.values) for m in members)
    for member in running or members:
        member.wait_until(lambda: count() >= expected, f"{expected} messages read")


def assert_read_exactly_once(members: list[Member], total: int) -> None:
    values = sorted(v for m in members for v in m.values)
    assert values == sorted(f"message-{i}" for i in range(total))


def assert_revoked_and_reassigned(members: list[Member], before: list[tuple[frozenset[int], int]]) -> None:
    """Each member's listener saw its partitions revoked, then the same partitions assigned again (the same
    members and assignor split the topic the same way)."""
    for member, (assigned, seen) in zip(members, before):
        member.wait_until(lambda m=member, n=seen: len(m.events) >= n + 2, "revoke and assign")
    for member, (assigned, seen) in zip(members, before):
        assert [(kind, parts) for kind, parts, _ in member.events[seen:]] == \
            [("revoked", assigned), ("assigned", assigned)]
    assert before[0][0] | before[1][0] == ALL_PARTITIONS


def snapshot(members: list[Member]) -> list[tuple[frozenset[int], int]]:
    return [(m.assignment(), len(m.events)) for m in members]


def find_coordinator(cluster, group: str) -> int:
    node = cluster.nodes[min(cluster.nodes)]
    response = exchange_once((cluster.host, node.port), FindCoordinatorRequest[3](key=group, key_type=0),
                             FindCoordinatorResponse, 3)
    assert response.error_code == 0
    return response.node_id


def stop_all(members: list[Member]) -> None:
    for member in members:
        member.ask_to_stop()
    for member in members:
        member.wait_stopped()


@pytest.mark.parametrize("client", CLIENTS)
def test_rebalance_revokes_and_reassigns_every_member(cluster, client):
    topic, group, members = start_group(cluster, client)
    try:
        before = snapshot(members)
        if client == "kafka-python":
            ran = kraftwerk("group", "rebalance", group, data_dir=cluster.data_dir)
            assert ran.stdout.startswith(f"consumer group {group}: rebalance started on coordinator node ")
            left = int(ran.stdout.split("leaving generation ")[1].split(",")[0])
        else:
            started = cluster.rebalance_group(group)
            assert started["state"] == "PreparingRebalance"
            assert len(started["members"]) == 2
            left = started["generation"]
        assert_revoked_and_reassigned(members, before)
        if client == "kafka-python":
            assert {m.events[-1][2] for m in members} == {left + 1}  # the generation the client joined
        # Once more: the coordinator says the group now leaves the next generation.
        before = snapshot(members)
        assert cluster.rebalance_group(group)["generation"] == left + 1
        assert_revoked_and_reassigned(members, before)
        produce(cluster, topic, HALF, HALF)
        read_everything(members, 2 * HALF)
    finally:
        stop_all(members)
    assert_read_exactly_once(members, 2 * HALF)


@pytest.mark.parametrize("client", CLIENTS)
def test_remove_static_member_hands_its_partitions_to_the_others(cluster, client):
    topic, group, members = start_group(cluster, client, instance_ids=("gone", "staying"))
    gone, staying = members
    kept = staying.assignment()
    try:
        gone.stop()  # a static member goes without leaving: the group waits for it until its session ends
        seen = len(staying.events)
        removed = cluster.remove_group_member(group, "gone")
        assert removed == {"group_id": group, "member_id": None, "group_instance_id": "gone"}
        staying.wait_until(lambda: len(staying.events) >= seen + 2, "revoke and assign")
        assert [(kind, parts) for kind, parts, _ in staying.events[seen:]] == \
            [("revoked", kept), ("assigned", ALL_PARTITIONS)]
        if client == "kafka-python":
            assert staying.events[-1][2] == staying.events[seen - 1][2] + 1
        produce(cluster, topic, HALF, HALF)
        read_everything(members, 2 * HALF, running=[staying])
    finally:
        stop_all([staying])
    assert_read_exactly_once(members, 2 * HALF)


def rejoined(member, events_before: int, old_member_id: str) -> bool:
    told = member.events[events_before:]
    return (len(told) >= 2 and told[-1][0] == "assigned" and bool(member.assignment())
            and member.member_id() not in ("", old_member_id))


def test_remove_a_running_member_by_member_id(cluster):
    """The member removed is told its partitions are lost (it may not commit them), rejoins as a new
    member, and the group splits the topic again; only what it read since its last commit is read twice."""
    topic, group, members = start_group(cluster, "kafka-python")
    removed, other = members
    kept, seen, member_id = removed.assignment(), len(removed.events), removed.member_id()
    read_before = set(removed.values)
    try:
        ran = kraftwerk("group", "remove-member", group, member_id, data_dir=cluster.data_dir)
        assert ran.stdout == f"consumer group {group}: removed member {member_id}\n"
        # The client forgets its member id (to "") as soon as a heartbeat is refused, before it tells the
        # listener; a rejoin is done once the listener has been told of the loss and of a new assignment.
        removed.wait_until(lambda: rejoined(removed, seen, member_id), "a rejoin")
        kind, partitions, _ = removed.events[seen]
        assert kind in ("lost", "revoked") and partitions == kept  # which one depends on when kafka-python learns it
        wait_settled(members)
        assert sorted(len(m.assignment()) for m in members) == [2, 2]
        produce(cluster, topic, HALF, HALF)
        read_everything(members, 2 * HALF)
    finally:
        stop_all(members)
    values = [v for m in members for v in m.values]
    assert set(values) == {f"message-{i}" for i in range(2 * HALF)}
    assert {v for v in values if values.count(v) > 1} <= read_before


@pytest.mark.parametrize("client", CLIENTS)
def test_members_follow_a_moved_coordinator(cluster, client):
    topic, group, members = start_group(cluster, client, session_timeout_ms=SHORT_SESSION_MS)
    try:
        events = [list(m.events) for m in members]
        old = find_coordinator(cluster, group)
        if client == "kafka-python":
            ran = kraftwerk("group", "move-coordinator", group, data_dir=cluster.data_dir)
            new = int(ran.stdout.split(" to node ")[1].split()[0])
        else:
            moved = cluster.move_group_coordinator(group)
            assert moved["from"] == old
            new = moved["to"]
        assert new != old
        assert find_coordinator(cluster, group) == new
        produce(cluster, topic, HALF, HALF)
        read_everything(members, 2 * HALF)
        # Offsets are committed only to the coordinator: the members found the new one.
        wait_for_commits(cluster, group, {p: 2 * HALF // PARTITIONS for p in ALL_PARTITIONS})
        if client == "kafka-python":
            assert {m.coordinator_id() for m in members} == {f"coordinator-{new}"}  # its name for the coordinator
        # Outlive a session on the new coordinator: it keeps every member it took over alive.
        time.sleep(SHORT_SESSION_MS / 1000 + 1)
        # The group moved as it was, as in Kafka: no rebalance, no listener called.
        assert [list(m.events) for m in members] == events
    finally:
        stop_all(members)
    assert_read_exactly_once(members, 2 * HALF)


def wait_for_commits(cluster, group: str, expected: dict[int, int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while (found := committed(cluster, group)) != expected:
        assert time.monotonic() < deadline, f"committed offsets stayed at {found}"
        time.sleep(0.5)  # the clients commit on their own auto-commit interval


def test_move_coordinator_to_a_chosen_node_and_back(cluster):
    topic, group, members = start_group(cluster, "kafka-python", instance_ids=(None,))
    try:
        old = find_coordinator(cluster, group)
        partition = f"__consumer_offsets-{coordinator_placement(cluster, group)['partition']}"
        target = next(n for n in sorted(cluster.nodes) if n != old)
        assert cluster.move_group_coordinator(group, to=target) == {
            "group_id": group, "partition": partition, "from": old, "to": target}
        assert find_coordinator(cluster, group) == target
        assert cluster.move_group_coordinator(group, to=old)["to"] == old
        assert find_coordinator(cluster, group) == old
        with pytest.raises(ClusterError, match=f"node {old} is not a live in-sync replica of {partition}"):
            cluster.move_group_coordinator(group, to=old)
    finally:
        stop_all(members)


def failing(cluster, *args: str) -> str:
    result = subprocess.run([*KRAFTWERK, *args, "--data-dir", str(cluster.data_dir)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def idle_group(cluster) -> str:
    """A group that has committed offsets and has no members."""
    topic, group = new_topic(cluster), f"idle-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, 0, PARTITIONS)
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    assert len(list(consumer)) == PARTITIONS
    consumer.close()
    return group


@pytest.mark.parametrize("args", [
    ["group", "rebalance", "nobody"],
    ["group", "remove-member", "nobody", "someone"],
    ["group", "move-coordinator", "nobody"],
])
def test_unknown_group_is_one_line(cluster, args):
    assert failing(cluster, *args) == "Error: consumer group 'nobody' does not exist."


def test_unknown_member_is_one_line(cluster, idle_group):
    assert failing(cluster, "group", "remove-member", idle_group, "ghost") == \
        f"Error: consumer group '{idle_group}' has no member 'ghost'."


def test_rebalance_of_an_empty_group_is_one_line(cluster, idle_group):
    assert failing(cluster, "group", "rebalance", idle_group) == \
        f"Error: consumer group '{idle_group}' has no active members: there is nothing to rebalance."
