"""Transactions stay all-or-nothing to read_committed readers across a coordinator's or a leader's death.

A confluent-kafka transactional producer writes three transactions to a topic of three partitions:
one before the fault, one the fault falls into, one after everything is healed. Its transaction
coordinator (the leader of the id's `__transaction_state` partition) is killed, stopped, paused or
isolated at each step of the second transaction:

- "open": its records are written (AddPartitionsToTxn done), EndTxn not sent yet;
- "prepared": EndTxn answered (PrepareCommit on the coordinator's replicas), no marker written: the
  partitions' leader is isolated from the coordinator, so no marker can be delivered;
- "marking": the marker of one partition written, the other two held the same way.

A new coordinator must replay `__transaction_state` and finish what was prepared while the old one is
still down, paused or cut off; the producer either commits or is told to abort (never a silent
loss); a read_committed reader then sees every transaction wholly or not at all, each committed one
exactly once and in order. The same holds when a partition's leader dies in the middle of a
transaction, or while the coordinator's markers are on their way to it (they must then reach the
new leader promptly).

Layout (4 nodes): C leads the transactional id's state partition, whose replicas are C, Y and Z; X is
the fourth node. Partitions 0 and 1 are led by X (replicas X, Y, Z: C holds none of them, X none of
the state partition), partition 2 by Y. Isolating X from C alone holds the markers to partitions 0
and 1 and touches nothing else.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from cluster.launch import Cluster

TRANSACTION_STATE_TOPIC = "__transaction_state"
STATE_PARTITIONS = 4
RECORDS_PER_PARTITION = 3
# Kafka's default socket and request timeouts are 60 s and 30 s: a request held by a paused or
# isolated node is given up sooner here, so that the client looks for the new coordinator or leader.
CLIENT_TIMEOUT_MS = 5000
DEADLINE_S = 60
# A marker whose leader died is written to the new leader within this (far less than the 30 s a
# request to a silent peer may take).
MARKER_RETRY_S = 15
POLL_S = 0.1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Leaders stay where the faults put them: the layout a test computes must hold all through it.
    with Cluster(nodes=4, data_dir=tmp_path_factory.mktemp("txn-faults") / "kraftwerk",
                 node_config={"transaction.state.log.num.partitions": str(STATE_PARTITIONS),
                              "auto.leader.rebalance.enable": "false"}) as running:
        first = transactional_producer(running, f"warm-up-{uuid.uuid4().hex[:6]}")  # creates __transaction_state
        del first
        yield running


# --- the cluster ---

def wait_for(condition, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(POLL_S)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")


def partition_state(cluster, topic: str, partition: int) -> dict:
    found = next(t for t in cluster.status()["topics"] if t["name"] == topic)
    return next(p for p in found["partitions"] if p["partition"] == partition)


def state_partition(cluster, transactional_id: str) -> int:
    return cluster.transaction_coordinator(transactional_id)["partition"]


def layout(cluster, transactional_id: str) -> tuple[int, int, int, int]:
    """(C, X, Y, Z) for this transactional id, as the module docstring names them."""
    state = partition_state(cluster, TRANSACTION_STATE_TOPIC, state_partition(cluster, transactional_id))
    coordinator = state["leader"]
    others = [n for n in state["replicas"] if n != coordinator]
    outside = [n for n in cluster.nodes if n not in state["replicas"]]
    assert coordinator >= 0 and len(others) == 2 and len(outside) == 1, state
    return coordinator, outside[0], *others


def create_topic(cluster, x: int, y: int, z: int) -> str:
    topic = f"txf-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [x, y, z], 1: [x, z, y], 2: [y, z, x]},
                                      topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    assert cluster.wait_in_sync(topic, 30)
    return topic


def heal_all(cluster) -> None:
    """Every node running again, and none paused, isolated or delayed."""
    for node_id, node in cluster.nodes.items():
        if not node.alive():
            cluster.restart_node(node_id)
        else:
            cluster.resume_node(node_id)
            cluster.heal_node(node_id)


@pytest.fixture
def healed(cluster):
    """Heals whatever a test left faulted, pass or fail, so that the next test meets a whole cluster;
    and no process may have logged at ERROR meanwhile."""
    logs = sorted((cluster.data_dir / "logs").glob("*.log"))
    sizes = {path: path.stat().st_size for path in logs}
    yield cluster
    heal_all(cluster)
    assert cluster.wait_in_sync(TRANSACTION_STATE_TOPIC, 60)
    errors = []
    for path in sorted((cluster.data_dir / "logs").glob("*.log")):
        with open(path, "rb") as log_file:
            log_file.seek(sizes.get(path, 0))
            errors += [f"{path.stem}: {line}" for line in log_file.read().decode(errors="replace").splitlines()
                       if " ERROR " in line]
    assert errors == [], "\n".join(errors[:20])


# --- faults on one node, and their end ---

def inject(cluster, node_id: int, fault: str) -> None:
    {"kill": cluster.kill_node, "stop": cluster.stop_node, "pause": cluster.pause_node,
     "isolate": cluster.isolate_node}[fault](node_id)


def end_fault(cluster, node_id: int, fault: str) -> None:
    if fault in ("kill", "stop"):
        cluster.restart_node(node_id)
    elif fault == "pause":
        cluster.resume_node(node_id)
    else:
        cluster.heal_node(node_id)


def wait_led_elsewhere(cluster, topic: str, partition: int, node_id: int) -> int:
    """The new leader once the controller has moved the partition off node_id (a paused or isolated
    node is fenced when its heartbeats stop)."""
    return wait_for(lambda: (leader := partition_state(cluster, topic, partition)["leader"]) not in (node_id, -1)
                    and leader, f"{topic}-{partition} to be led by another node than {node_id}")


# --- the clients ---

def transactional_producer(cluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id,
                         "linger.ms": 5, "socket.timeout.ms": CLIENT_TIMEOUT_MS,
                         "request.timeout.ms": CLIENT_TIMEOUT_MS, "transaction.timeout.ms": 60_000})
    producer.init_transactions(DEADLINE_S)
    return producer


def write(producer: Producer, topic: str, name: str, partitions, start: int = 0, flush: bool = True) -> None:
    """Records "<name>:<partition>:<position>" to each partition; flushed (so written, AddPartitions
    done) unless told otherwise."""
    for partition in partitions:
        for position in range(start, start + RECORDS_PER_PARTITION):
            producer.produce(topic, value=f"{name}:{partition}:{position}".encode(), partition=partition)
    if flush:
        assert producer.flush(DEADLINE_S) == 0


def finish(producer: Producer, commit: bool = True) -> bool:
    """Commit (or abort) the open transaction, retrying what the client calls retriable: True if it
    committed, False if it was aborted (the client said the transaction must be aborted). A fatal
    error, or any other, fails the test: it would leave the application not knowing the outcome."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        remaining = max(1.0, deadline - time.monotonic())
        try:
            if commit:
                producer.commit_transaction(remaining)
            else:
                producer.abort_transaction(remaining)
            return commit
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort() and commit:
                commit = False
            elif not error.retriable() or time.monotonic() > deadline:
                raise


def watermarks(cluster, topic: str, isolation: str, partitions: int = 3) -> list[int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"w-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def stable(cluster, topic: str, partitions=range(3)) -> bool:
    """Every transaction in these partitions decided: the last stable offset is the high watermark."""
    try:
        committed = watermarks(cluster, topic, "read_committed")
        written = watermarks(cluster, topic, "read_uncommitted")
    except KafkaException:
        return False
    return all(committed[p] == written[p] for p in partitions)


def read_committed(cluster, topic: str, partitions: int = 3) -> dict[int, list[str]]:
    """Each partition's values as a read_committed consumer reads them, from the start to the end."""
    wait_for(lambda: stable(cluster, topic), f"every transaction in {topic} to be decided")
    ends = watermarks(cluster, topic, "read_committed")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    positions = [0] * partitions
    deadline = time.monotonic() + DEADLINE_S
    try:
        while any(positions[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"read only up to {positions} of {ends}"
            message = consumer.poll(0.2)
            if message is None:
                positions = [tp.offset for tp in consumer.position(
                    [TopicPartition(topic, p) for p in range(partitions)])]
                continue
            if message.error():
                raise KafkaException(message.error())
            found[message.partition()].append((message.offset(), message.value().decode()))
            positions[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    return {p: [value for _, value in sorted(records)] for p, records in found.items()}


def expected(name: str, partitions) -> dict[int, list[str]]:
    return {p: [f"{name}:{p}:{i}" for i in range(RECORDS_PER_PARTITION)] for p in partitions}


def assert_all_or_nothing(log: dict[int, list[str]], transactions: list[tuple[str, object, bool]]) -> None:
    """transactions: (name, partitions written, committed) in the order they were written. Each
    committed one is in every partition it wrote, whole, once and in order; an aborted one nowhere."""
    wanted: dict[int, list[str]] = {p: [] for p in log}
    for name, partitions, committed in transactions:
        if committed:
            for partition, values in expected(name, partitions).items():
                wanted[partition] += values
    assert log == wanted


# --- the tests ---

@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["kill", "stop", "pause", "isolate"])
@pytest.mark.parametrize("step", ["open", "prepared", "marking"])
def test_a_new_coordinator_completes_what_the_old_one_left(healed, step, fault):
    cluster = healed
    transactional_id = f"txf-{step}-{fault}-{uuid.uuid4().hex[:6]}"
    producer = transactional_producer(cluster, transactional_id)
    coordinator, x, y, z = layout(cluster, transactional_id)
    topic = create_topic(cluster, x, y, z)
    faulted = ("prepared", [0, 1]) if step == "prepared" else ("faulted", [0, 1, 2])
    name, partitions = faulted

    producer.begin_transaction()
    write(producer, topic, "before", range(3))
    assert finish(producer)

    producer.begin_transaction()
    write(producer, topic, name, partitions)
    if step == "open":
        inject(cluster, coordinator, fault)
        wait_led_elsewhere(cluster, TRANSACTION_STATE_TOPIC, state_partition(cluster, transactional_id), coordinator)
        committed = finish(producer)
        end_fault(cluster, coordinator, fault)
    else:
        # X takes nothing from the coordinator now: the markers of partitions 0 and 1 are held.
        cluster.isolate_node(x, [coordinator])
        assert finish(producer)  # EndTxn is answered once PrepareCommit is on the in-sync replicas
        committed = True
        if step == "marking":
            wait_for(lambda: stable(cluster, topic, [2]), "the marker of partition 2")
        assert not stable(cluster, topic, [0, 1]), "a marker reached X through its isolation"
        inject(cluster, coordinator, fault)
        # The new coordinator writes the held markers while the old one is still down, paused or cut off.
        wait_led_elsewhere(cluster, TRANSACTION_STATE_TOPIC, state_partition(cluster, transactional_id), coordinator)
        wait_for(lambda: stable(cluster, topic), "the new coordinator to write the markers")
        end_fault(cluster, coordinator, fault)
        cluster.heal_node(x)  # whatever the old coordinator still sends X is refused now

    heal_all(cluster)
    producer.begin_transaction()
    write(producer, topic, "after", range(3))
    assert finish(producer)
    assert_all_or_nothing(read_committed(cluster, topic),
                          [("before", range(3), True), (name, partitions, committed), ("after", range(3), True)])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["kill", "stop", "pause", "isolate"])
def test_a_partition_leader_dies_in_the_middle_of_a_transaction(healed, fault):
    cluster = healed
    transactional_id = f"txf-leader-{fault}-{uuid.uuid4().hex[:6]}"
    producer = transactional_producer(cluster, transactional_id)
    _, x, y, z = layout(cluster, transactional_id)
    topic = create_topic(cluster, x, y, z)

    producer.begin_transaction()
    write(producer, topic, "faulted", range(3))
    inject(cluster, x, fault)  # the leader of partitions 0 and 1
    wait_led_elsewhere(cluster, topic, 0, x)
    write(producer, topic, "faulted", range(3), start=RECORDS_PER_PARTITION, flush=False)
    # Clients still reach an isolated node, which holds their writes until it hears it was deposed.
    end_fault(cluster, x, fault)
    committed = finish(producer)

    heal_all(cluster)
    producer.begin_transaction()
    write(producer, topic, "after", range(3))
    assert finish(producer)
    log = read_committed(cluster, topic)
    faulted = {p: [f"faulted:{p}:{i}" for i in range(2 * RECORDS_PER_PARTITION)] for p in range(3)}
    assert log == {p: (faulted[p] if committed else []) + expected("after", [p])[p] for p in range(3)}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["kill", "stop", "pause", "isolate"])
def test_a_partition_leader_dies_while_its_marker_is_on_the_way(healed, fault):
    """The coordinator's WriteTxnMarkers is held by the leader of partitions 0 and 1 when that
    leader dies: the coordinator writes the markers to the new leaders, promptly."""
    cluster = healed
    transactional_id = f"txf-marker-{fault}-{uuid.uuid4().hex[:6]}"
    producer = transactional_producer(cluster, transactional_id)
    coordinator, x, y, z = layout(cluster, transactional_id)
    topic = create_topic(cluster, x, y, z)

    producer.begin_transaction()
    write(producer, topic, "held", [0, 1])
    cluster.isolate_node(x, [coordinator])
    assert finish(producer)
    assert not stable(cluster, topic, [0, 1]), "a marker reached X through its isolation"
    inject(cluster, x, fault)
    wait_led_elsewhere(cluster, topic, 0, x)
    wait_for(lambda: stable(cluster, topic), "the markers to reach the new leaders", timeout_s=MARKER_RETRY_S)
    end_fault(cluster, x, fault)

    heal_all(cluster)
    producer.begin_transaction()
    write(producer, topic, "after", range(3))
    assert finish(producer)
    assert_all_or_nothing(read_committed(cluster, topic), [("held", [0, 1], True), ("after", range(3), True)])
