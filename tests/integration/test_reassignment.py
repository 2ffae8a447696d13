"""Partition reassignment through kafka-python's admin client, as kafka-reassign-partitions.sh drives it:
moves that complete with exact replicas, ISR and leader, removed replicas' logs deleted, nothing
acknowledged lost; moves held in progress by a replication throttle; cancellation; Kafka's errors."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import admin as confluent_admin
from kafka.protocol.admin import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse
from kafka.errors import (
    InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError,
)

from cluster.launch import Cluster
from tests.integration.wire import exchange

# A follower.replication.throttled.rate low enough to hold a move of a few MB for as long as a test needs.
CRAWL = "1000"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=4, data_dir=tmp_path_factory.mktemp("reassignment"),
                 node_config={"follower.replication.throttled.rate": CRAWL}) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def partition_state(cluster, topic: str, index: int = 0) -> dict:
    partitions = next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"]
    return next(p for p in partitions if p["partition"] == index)


def produce(cluster, topic: str, count: int, size: int = 100) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    values = [b"%08d" % i + b"x" * (size - 8) for i in range(count)]
    for value in values:
        producer.send(topic, value, partition=0)
    producer.flush(60)
    producer.close()
    return values


def consume(cluster, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)
    consumer.assign([TopicPartition(topic, 0)])
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == expected:
            break
    consumer.close()
    return values


def partition_dirs(cluster, node_id: int, topic: str) -> list[str]:
    log_dir = cluster.nodes[node_id].data_dir
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith(f"{topic}-"))


def wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def completes(cluster, admin, topic: str, target: list[int], leader: int, dropped: int, values: list[bytes]) -> None:
    """Move partition 0 of topic to target; afterwards exactly target is in sync, led by leader,
    the dropped node's copy is deleted and every acknowledged message is still there."""
    assert admin.alter_partition_reassignments({TopicPartition(topic, 0): target}) == {TopicPartition(topic, 0): None}
    assert cluster.wait_reassigned([(topic, 0)], timeout=60)
    state = partition_state(cluster, topic)
    assert (state["replicas"], sorted(state["isr"]), state["leader"]) == (target, sorted(target), leader)
    assert (state["adding_replicas"], state["removing_replicas"]) == ([], [])
    assert admin.list_partition_reassignments() == {}
    wait_until(lambda: partition_dirs(cluster, dropped, topic) == [])
    assert partition_dirs(cluster, target[0], topic) == [f"{topic}-0"]
    assert consume(cluster, topic, len(values)) == values


def test_single_replica_moves_to_another_node(cluster, admin):
    cluster.create_topic("move-one", replication_factor=1)
    source = partition_state(cluster, "move-one")["leader"]
    target = source % 4 + 1
    completes(cluster, admin, "move-one", [target], target, source, produce(cluster, "move-one", 2000))


def set_configs(cluster, kind, name: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs through confluent-kafka: a value SETs, None DELETEs."""
    ops = confluent_admin.AlterConfigOpType
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = confluent_admin.ConfigResource(kind, name, incremental_configs=[
        confluent_admin.ConfigEntry(key, value, incremental_operation=ops.SET if value is not None else ops.DELETE)
        for key, value in changes.items()])
    list(client.incremental_alter_configs([resource]).values())[0].result(10)


def throttle(cluster, topic: str, replicas: str | None) -> None:
    set_configs(cluster, confluent_admin.ResourceType.TOPIC, topic,
                {"follower.replication.throttled.replicas": replicas})


def test_one_replica_of_three_is_replaced(cluster, admin):
    cluster.create_topic("replace-one", replication_factor=3)
    state = partition_state(cluster, "replace-one")
    spare = ({1, 2, 3, 4} - set(state["replicas"])).pop()
    dropped = state["replicas"][-1]
    target = [r if r != dropped else spare for r in state["replicas"]]
    completes(cluster, admin, "replace-one", target, state["leader"], dropped, produce(cluster, "replace-one", 1000))


def test_the_leader_is_moved_off(cluster, admin):
    cluster.create_topic("leader-off", replication_factor=3)
    state = partition_state(cluster, "leader-off")
    spare = ({1, 2, 3, 4} - set(state["replicas"])).pop()
    target = [spare] + [r for r in state["replicas"] if r != state["leader"]]
    # The first target replica in the ISR leads, as Kafka elects when the leader is removed.
    completes(cluster, admin, "leader-off", target, spare, state["leader"], produce(cluster, "leader-off", 1000))


def test_a_throttled_move_stays_in_progress_until_the_throttle_is_lifted(cluster, admin):
    cluster.create_topic("throttled", replication_factor=1)
    source = partition_state(cluster, "throttled")["leader"]
    target = source % 4 + 1
    values = produce(cluster, "throttled", 3000, size=1000)  # 3 MB: more than one fetch takes
    throttle(cluster, "throttled", f"0:{target}")
    admin.alter_partition_reassignments({TopicPartition("throttled", 0): [target]})
    ongoing = {"replicas": [target, source], "adding_replicas": [target], "removing_replicas": [source]}
    assert admin.list_partition_reassignments() == {TopicPartition("throttled", 0): ongoing}
    assert admin.list_partition_reassignments({"throttled": [0, 1]}) == {TopicPartition("throttled", 0): ongoing}
    state = partition_state(cluster, "throttled")
    assert (state["replicas"], state["isr"], state["leader"]) == ([target, source], [source], source)
    assert (state["adding_replicas"], state["removing_replicas"]) == ([target], [source])
    throttle(cluster, "throttled", None)
    assert cluster.wait_reassigned([("throttled", 0)], timeout=60)
    assert admin.list_partition_reassignments() == {}
    wait_until(lambda: partition_dirs(cluster, source, "throttled") == [])
    assert consume(cluster, "throttled", len(values)) == values


def test_a_move_is_cancelled(cluster, admin):
    cluster.create_topic("cancelled", replication_factor=2)
    original = partition_state(cluster, "cancelled")["replicas"]
    adding = sorted({1, 2, 3, 4} - set(original))
    values = produce(cluster, "cancelled", 3000, size=1000)
    throttle(cluster, "cancelled", ",".join(f"0:{node}" for node in adding))
    admin.alter_partition_reassignments({TopicPartition("cancelled", 0): adding})
    wait_until(lambda: all(partition_dirs(cluster, node, "cancelled") for node in adding))
    assert admin.alter_partition_reassignments({TopicPartition("cancelled", 0): None}) == {
        TopicPartition("cancelled", 0): None}
    state = partition_state(cluster, "cancelled")
    assert (state["replicas"], sorted(state["isr"]), state["adding_replicas"], state["removing_replicas"]) == (
        original, sorted(original), [], [])
    assert admin.list_partition_reassignments() == {}
    for node in adding:
        wait_until(lambda: partition_dirs(cluster, node, "cancelled") == [])
    assert consume(cluster, "cancelled", len(values)) == values


def test_errors_are_kafkas(cluster, admin):
    cluster.create_topic("refusals", replication_factor=1)
    tp = TopicPartition("refusals", 0)
    assert admin.alter_partition_reassignments({
        tp: [1, 1], TopicPartition("refusals", 1): [1], TopicPartition("no-such-topic", 0): [1]}) == {
        tp: InvalidReplicationAssignmentError, TopicPartition("refusals", 1): UnknownTopicOrPartitionError,
        TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}
    assert admin.alter_partition_reassignments({tp: [99]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    assert partition_state(cluster, "refusals")["replicas"] in ([1], [2], [3], [4])


def raw_reassignment(cluster, partitions: list[tuple[int, list[int] | None]], topic: str):
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    request = AlterPartitionReassignmentsRequest[0](timeout_ms=10000, topics=[T(name=topic, partitions=[
        T.ReassignablePartition(partition_index=index, replicas=replicas) for index, replicas in partitions])])
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    import socket
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        return exchange(sock, request, AlterPartitionReassignmentsResponse, 0)


def test_an_empty_replica_list_and_an_oversized_request_are_refused(cluster):
    cluster.create_topic("raw-refusals", replication_factor=1)
    response = raw_reassignment(cluster, [(0, [])], "raw-refusals")
    partition = response.responses[0].partitions[0]
    assert (response.error_code, partition.error_code, partition.error_message) == (
        0, 39, "The manual partition assignment includes an empty replica list.")
    response = raw_reassignment(cluster, [(i, [1]) for i in range(10_001)], "raw-refusals")
    assert response.error_code == 44
    assert response.error_message == "Unable to perform excessively large batch operation."
    assert {p.error_code for p in response.responses[0].partitions} == {44}


def test_an_idempotent_producer_loses_nothing_while_its_partition_moves(cluster, admin):
    cluster.create_topic("moving-writes", replication_factor=3)
    state = partition_state(cluster, "moving-writes")
    spare = ({1, 2, 3, 4} - set(state["replicas"])).pop()
    target = [spare] + [r for r in state["replicas"] if r != state["leader"]]
    acknowledged: dict[bytes, int] = {}
    failures = []

    def delivered(error, message):
        if error is None:
            acknowledged[message.value()] = message.offset()
        else:
            failures.append(error)

    producer = ConfluentProducer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5})
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            producer.produce("moving-writes", b"%08d" % sent, partition=0, on_delivery=delivered)
            sent += 1
            producer.poll(0.001)

    send(2000)
    admin.alter_partition_reassignments({TopicPartition("moving-writes", 0): target})
    while cluster.list_reassignments():
        send(50)
    send(2000)
    assert producer.flush(60) == 0
    assert failures == []
    assert len(acknowledged) == sent
    state = partition_state(cluster, "moving-writes")
    assert (state["replicas"], sorted(state["isr"]), state["leader"]) == (target, sorted(target), spare)
    values = consume(cluster, "moving-writes", sent)
    assert values == [b"%08d" % i for i in range(sent)]
    assert all(values[offset] == value for value, offset in acknowledged.items())


def kraftwerk(cluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cluster.cli", *args, "--data-dir", str(cluster.data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_cli_runs_a_kafka_plan_under_a_throttle(cluster, tmp_path):
    cluster.create_topic("planned", replication_factor=1)
    source = partition_state(cluster, "planned")["leader"]
    target = source % 4 + 1
    values = produce(cluster, "planned", 3000, size=1000)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "planned", "partition": 0, "replicas": [target], "log_dirs": ["any"]}]}))
    assert kraftwerk(cluster, "reassign", "--file", str(plan), "--throttle", "1000") == \
        "started the reassignment of 1 partitions\n"
    assert json.loads(kraftwerk(cluster, "reassign", "--status", "--json")) == [
        {"topic": "planned", "partition": 0, "replicas": [target, source], "adding_replicas": [target],
         "removing_replicas": [source]}]
    described = json.loads(kraftwerk(cluster, "status", "--json"))
    moving = next(t for t in described["topics"] if t["name"] == "planned")["partitions"][0]
    assert (moving["adding_replicas"], moving["removing_replicas"]) == ([target], [source])
    cluster.clear_throttles()
    assert cluster.wait_reassigned([("planned", 0)], timeout=60)
    assert partition_state(cluster, "planned")["replicas"] == [target]
    assert kraftwerk(cluster, "reassign", "--status") == "no partition reassignment is in progress\n"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "planned", "partition": 0,
                                                              "replicas": [source]}]}))
    output = kraftwerk(cluster, "reassign", "--file", str(plan), "--throttle", "100000000", "--wait")
    assert output.startswith("started the reassignment of 1 partitions\nreassignment complete in ")
    assert partition_state(cluster, "planned")["replicas"] == [source]
    assert consume(cluster, "planned", len(values)) == values


def test_a_node_rate_set_through_incremental_alter_configs_throttles_a_move(cluster):
    cluster.create_topic("node-rate", replication_factor=1)
    source = partition_state(cluster, "node-rate")["leader"]
    target = source % 4 + 1
    produce(cluster, "node-rate", 3000, size=1000)
    broker = confluent_admin.ResourceType.BROKER
    set_configs(cluster, broker, str(source), {"leader.replication.throttled.rate": "1000"})
    set_configs(cluster, confluent_admin.ResourceType.TOPIC, "node-rate",
                {"leader.replication.throttled.replicas": f"0:{source}"})
    assert cluster.reassign({("node-rate", 0): [target]}) == {("node-rate", 0): None}
    assert not cluster.wait_reassigned([("node-rate", 0)], timeout=2)
    assert cluster.list_reassignments() == {("node-rate", 0): {
        "replicas": [target, source], "adding_replicas": [target], "removing_replicas": [source]}}
    set_configs(cluster, broker, str(source), {"leader.replication.throttled.rate": None})
    assert cluster.wait_reassigned([("node-rate", 0)], timeout=60)
    with pytest.raises(Exception, match="Cannot update these configs dynamically: num.partitions"):
        set_configs(cluster, broker, str(source), {"num.partitions": "3"})


def test_a_move_to_a_fenced_node_completes_once_the_node_is_back(cluster, admin):
    """As in Kafka, a target need only be registered: the move waits for the node to come back."""
    cluster.create_topic("to-fenced", replication_factor=1)
    source = partition_state(cluster, "to-fenced")["leader"]
    target = source % 4 + 1
    values = produce(cluster, "to-fenced", 20)
    cluster.kill_node(target)
    try:
        assert cluster.reassign({("to-fenced", 0): [target]}) == {("to-fenced", 0): None}
        assert cluster.list_reassignments() == {("to-fenced", 0): {
            "replicas": [target, source], "adding_replicas": [target], "removing_replicas": [source]}}
        assert partition_state(cluster, "to-fenced")["leader"] == source
    finally:
        cluster.restart_node(target)
    assert cluster.wait_reassigned([("to-fenced", 0)], timeout=60)
    state = partition_state(cluster, "to-fenced")
    assert (state["replicas"], state["isr"], state["leader"]) == ([target], [target], target)
    assert consume(cluster, "to-fenced", len(values)) == values


def test_the_cli_refuses_a_bad_plan_and_names_refused_partitions(cluster, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "t", "replicas": [1]}]}')
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "reassign", "--file", str(plan),
                           "--data-dir", str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"Error: {plan} is not a reassignment plan: each partition needs a \"topic\" string "
                           f"and a \"partition\" number: {{'topic': 't', 'replicas': [1]}}\n")
    plan.write_text('{"version": 1, "partitions": [{"topic": "no-such-topic", "partition": 0, "replicas": [1]}]}')
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "reassign", "--file", str(plan),
                           "--data-dir", str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "no-such-topic-0: UNKNOWN_TOPIC_OR_PARTITION\nError: 1 of 1 partitions were refused\n"
