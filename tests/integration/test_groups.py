"""Consumer groups with real clients: every message once, offsets committed and resumed,
partitions split and taken over, offsets surviving restarts."""
from __future__ import annotations

import asyncio
import json
import select
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.structs import OffsetAndMetadata

from cluster.launch import Cluster
from node.groups.placement import partition_for_group
from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.observe import committed
from tests.integration.wire import exchange, exchange_once

PARTITIONS = 6
MESSAGES = 600
FIRST_SESSION = 250
# Kafka's group.min.session.timeout.ms; consumers that die are noticed after their session timeout.
SESSION_TIMEOUT_MS = 6000


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running


def fill_topic(cluster, messages: int = MESSAGES) -> str:
    topic = f"grouped-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    for i in range(messages):
        producer.send(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode())
    producer.flush()
    producer.close()
    return topic


def all_positions(cluster, topic: str) -> set[tuple[int, int]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    return {(tp.partition, offset) for tp, end in ends.items() for offset in range(end)}


def assert_two_sessions_read_everything_once(cluster, topic, group, first, second):
    """The second session starts exactly where the first committed; together they read all."""
    assert len(first) == FIRST_SESSION
    resumed_at = {}
    for partition, offset in first:
        resumed_at[partition] = max(resumed_at.get(partition, 0), offset + 1)
    for partition in range(PARTITIONS):
        starts = [o for p, o in second if p == partition]
        assert not starts or min(starts) == resumed_at.get(partition, 0), partition
    assert len(first) + len(second) == MESSAGES
    assert set(first) | set(second) == all_positions(cluster, topic)
    assert committed(cluster, group) == {p: max(o for q, o in first + second if q == p) + 1 for p in range(PARTITIONS)}


# --- one session per client library ---

def kafka_python_session(cluster, topic, group, count):
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
    read = []
    try:
        for record in consumer:
            read.append((record.partition, record.offset))
            consumer.commit({TopicPartition(topic, record.partition): OffsetAndMetadata(record.offset + 1, "", -1)})
            if len(read) == count:
                break
    finally:
        consumer.close()
    return read


def confluent_session(cluster, topic, group, count):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = []
    try:
        deadline = time.monotonic() + 30
        while len(read) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            read.append((message.partition(), message.offset()))
            consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, message.partition(), message.offset() + 1)],
                            asynchronous=False)
    finally:
        consumer.close()
    return read


def aiokafka_session(cluster, topic, group, count):
    aiokafka = pytest.importorskip("aiokafka")

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                             auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        read = []
        try:
            while len(read) < count:
                record = await asyncio.wait_for(consumer.getone(), 30)
                read.append((record.partition, record.offset))
                await consumer.commit({aiokafka.TopicPartition(topic, record.partition): record.offset + 1})
        finally:
            await consumer.stop()
        return read

    return asyncio.run(run())


def kafkajs_session(cluster, topic, group, count):
    reason = kafkajs_missing()
    if reason:
        pytest.skip(reason)
    result = subprocess.run(["node", str(JS_DIR / "group.js"), cluster.bootstrap_servers, topic, group, str(count)],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return [(m["partition"], m["offset"]) for m in json.loads(result.stdout)]


@pytest.mark.parametrize("session", [kafka_python_session, confluent_session, aiokafka_session, kafkajs_session],
                         ids=["kafka-python", "confluent-kafka", "aiokafka", "kafkajs"])
def test_group_consumer_resumes_at_committed_offsets(cluster, session):
    topic = fill_topic(cluster)
    group = f"group-{uuid.uuid4().hex[:8]}"
    first = session(cluster, topic, group, FIRST_SESSION)
    second = session(cluster, topic, group, MESSAGES - FIRST_SESSION)
    assert_two_sessions_read_everything_once(cluster, topic, group, first, second)


# --- membership changes ---

def group_members(cluster, group: str) -> dict[str, int]:
    """member id -> number of partitions assigned, as DescribeGroups reports it."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = admin.describe_groups([group])[group]
    finally:
        admin.close()
    assert described["group_state"] == "Stable", described
    return {m["member_id"]: len(m["member_assignment"]["assigned_partitions"][0]["partitions"])
            for m in described["members"]} if described["members"] else {}


def poll_until(consumers, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
        if condition():
            return
    raise AssertionError("the group did not settle in time")


def test_members_split_partitions_and_take_over_from_leavers_and_the_dead(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = fill_topic(cluster, messages=60)
    group = f"split-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
              "heartbeat.interval.ms": 500, "session.timeout.ms": SESSION_TIMEOUT_MS,
              "partition.assignment.strategy": "range"}

    def new_consumer():
        consumer = confluent_kafka.Consumer(config)
        consumer.subscribe([topic])
        return consumer

    def sizes(consumers):
        return sorted(len(c.assignment()) for c in consumers)

    first = new_consumer()
    poll_until([first], lambda: sizes([first]) == [6])
    second = new_consumer()
    poll_until([first, second], lambda: sizes([first, second]) == [3, 3])
    third = new_consumer()
    members = [first, second, third]
    poll_until(members, lambda: sizes(members) == [2, 2, 2])

    third.close()  # LeaveGroup: the others rebalance at once
    poll_until([first, second], lambda: sizes([first, second]) == [3, 3])

    dying = subprocess.Popen([sys.executable, "-c", DYING_CONSUMER, cluster.bootstrap_servers, topic, group,
                              str(SESSION_TIMEOUT_MS)], stdout=subprocess.PIPE)
    try:
        # The survivors must keep polling so that they rejoin the rebalance the newcomer causes.
        poll_until([first, second], lambda: select.select([dying.stdout], [], [], 0)[0]
                   and sum(sizes([first, second])) == 4)
        assert dying.stdout.readline().strip() == b"assigned"
        dying.send_signal(signal.SIGKILL)
        dying.wait()
        # The coordinator notices the missed session and the survivors share its partitions.
        poll_until([first, second], lambda: sizes([first, second]) == [3, 3], timeout=SESSION_TIMEOUT_MS / 1000 + 30)
    finally:
        if dying.poll() is None:
            dying.kill()
            dying.wait()
    assert sorted(group_members(cluster, group).values()) == [3, 3]
    for consumer in (first, second):
        consumer.close()


DYING_CONSUMER = """
import sys, confluent_kafka
bootstrap, topic, group, session = sys.argv[1:]
consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "heartbeat.interval.ms": 500,
                                     "session.timeout.ms": int(session), "partition.assignment.strategy": "range"})
consumer.subscribe([topic])
announced = False
while True:
    consumer.poll(0.1)
    if consumer.assignment() and not announced:
        print("assigned", flush=True)
        announced = True
"""


# --- durability of offsets ---

def commit_offsets(bootstrap: str, topic: str, group: str, offsets: dict[int, int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, f"meta-{p}", -1) for p, o in offsets.items()})
    finally:
        consumer.close()


def test_committed_offsets_survive_down_up_and_a_coordinator_restart(tmp_path):
    data_dir = tmp_path / "cluster"
    group = "durable-group"
    wanted = {p: 10 * (p + 1) for p in range(PARTITIONS)}
    with Cluster(nodes=3, data_dir=data_dir) as running:
        topic = fill_topic(running)
        commit_offsets(running.bootstrap_servers, topic, group, wanted)
        assert committed(running, group) == wanted
    with Cluster(nodes=3, data_dir=data_dir) as running:
        assert committed(running, group) == wanted
        offsets_partition = partition_for_group(group, 50)
        status = running.status()
        coordinator = next(p["leader"] for t in status["topics"] if t["name"] == "__consumer_offsets"
                           for p in t["partitions"] if p["partition"] == offsets_partition)
        running.kill_node(coordinator)
        running.restart_node(coordinator)
        assert committed(running, group) == wanted
        consumer = KafkaConsumer(topic, bootstrap_servers=running.bootstrap_servers, group_id=group,
                                 enable_auto_commit=False, consumer_timeout_ms=10000)
        try:
            first_read = {}
            for record in consumer:
                first_read.setdefault(record.partition, record.offset)
                if len(first_read) == PARTITIONS:
                    break
        finally:
            consumer.close()
        assert first_read == wanted


def test_offsets_of_deleted_topics_are_removed():
    with Cluster(nodes=1) as running:
        deleted = fill_topic(running, messages=6)
        commit_offsets(running.bootstrap_servers, deleted, "cleaned", {0: 1})
        assert committed(running, "cleaned") == {0: 1}
        admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
        try:
            admin.delete_topics([deleted])
        finally:
            admin.close()
        assert committed(running, "cleaned") == {}


def test_offsets_of_empty_groups_expire():
    # Retention 0: offsets of an empty group go at the next check, so this cluster cannot also
    # show offsets that stay.
    config = {"offsets.retention.minutes": "0", "offsets.retention.check.interval.ms": "300"}
    with Cluster(nodes=1, node_config=config) as running:
        kept = fill_topic(running, messages=6)
        commit_offsets(running.bootstrap_servers, kept, "expiring", {0: 3})
        deadline = time.monotonic() + 10
        while committed(running, "expiring") and time.monotonic() < deadline:
            time.sleep(0.2)  # waiting on the broker's expiry timer, which the test cannot observe otherwise
        assert committed(running, "expiring") == {}
        admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
        try:
            assert "expiring" not in [g["group_id"] for g in admin.list_groups()]
        finally:
            admin.close()


def test_static_member_restarting_gets_its_partitions_back_without_a_rebalance(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = fill_topic(cluster, messages=12)
    group = f"static-{uuid.uuid4().hex[:8]}"
    revoked = []

    def member(instance: str, **callbacks):
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "group.instance.id": instance,
            "heartbeat.interval.ms": 500, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "partition.assignment.strategy": "range"})
        consumer.subscribe([topic], **callbacks)
        return consumer

    leader = member("a", on_revoke=lambda consumer, partitions: revoked.append(partitions))
    poll_until([leader], lambda: len(leader.assignment()) == 6)
    follower = member("b")
    poll_until([leader, follower], lambda: sorted([len(leader.assignment()), len(follower.assignment())]) == [3, 3])
    revoked.clear()
    before = sorted(p.partition for p in follower.assignment())
    follower.close()  # a static member leaves no LeaveGroup behind: its place is kept for its session
    restarted = member("b")
    poll_until([leader, restarted], lambda: len(restarted.assignment()) == 3)
    assert sorted(p.partition for p in restarted.assignment()) == before
    assert revoked == [] and len(leader.assignment()) == 3
    for consumer in (leader, restarted):
        consumer.close()


def coordinator_address(cluster, group: str) -> tuple[str, int]:
    node = cluster.nodes[min(cluster.nodes)]
    found = exchange_once((cluster.host, node.port), FindCoordinatorRequest[3](key=group, key_type=0),
                          FindCoordinatorResponse, 3)
    assert found.error_code == 0
    return found.host, found.port


def test_a_member_joining_again_before_its_sync_keeps_the_generation(cluster):
    # A member that sends JoinGroup again, unchanged, while the group waits for SyncGroup (it may have
    # missed the answer) gets the current generation back, as from Kafka: no new rebalance.
    group = f"rejoin-{uuid.uuid4().hex[:8]}"

    def join(member_id: str) -> JoinGroupResponse:
        request = JoinGroupRequest[3](group_id=group, session_timeout_ms=SESSION_TIMEOUT_MS,
                                      rebalance_timeout_ms=SESSION_TIMEOUT_MS, member_id=member_id,
                                      protocol_type="consumer", protocols=[("range", b"subscription")])
        return exchange(sock, request, JoinGroupResponse, 3)

    with socket.create_connection(coordinator_address(cluster, group), timeout=10) as sock:
        first = join("")
        assert (first.error_code, first.generation_id, first.leader) == (0, 1, first.member_id)
        again = join(first.member_id)
        assert (again.error_code, again.generation_id, again.leader, again.member_id) == \
            (0, 1, first.member_id, first.member_id)
        assert [(m.member_id, bytes(m.metadata)) for m in again.members] == [(first.member_id, b"subscription")]
        synced = exchange(sock, SyncGroupRequest[3](group_id=group, generation_id=1, member_id=first.member_id,
                                                    assignments=[(first.member_id, b"assignment")]),
                          SyncGroupResponse, 3)
        assert (synced.error_code, bytes(synced.assignment)) == (0, b"assignment")


def test_a_metadata_request_naming_the_offsets_topic_creates_it_as_a_group_would():
    # Burrow asks for `__consumer_offsets` before any group exists; Kafka's auto topic creation
    # then makes it with offsets.topic.num.partitions and .replication.factor, compacted.
    with Cluster(nodes=3) as fresh:
        host, port = fresh.bootstrap_servers.split(",")[0].rsplit(":", 1)
        request = MetadataRequest[5](topics=[MetadataRequest[5].MetadataRequestTopic(name="__consumer_offsets")],
                                     allow_auto_topic_creation=True)
        exchange_once((host, int(port)), request, MetadataResponse, 5)
        [topic] = [t for t in fresh.status()["topics"] if t["name"] == "__consumer_offsets"]
        assert len(topic["partitions"]) == 50
        assert {len(p["replicas"]) for p in topic["partitions"]} == {3}
        admin = KafkaAdminClient(bootstrap_servers=fresh.bootstrap_servers)
        try:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets")])
        finally:
            admin.close()
        assert described["topic"]["__consumer_offsets"]["cleanup.policy"]["value"] == "compact"
