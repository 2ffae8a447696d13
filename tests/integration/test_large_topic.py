"""A node applying a large metadata batch keeps heartbeating and serving.

A 2,000-partition topic with three replicas puts 2,000 new partitions on each of three nodes in
one metadata batch (5,000, the size `python -m benchmarks.large_topic` measures, takes too long
on a busy 2-core machine for a test). Creating a partition's files takes a few milliseconds, so a
node doing it all at once would hold its event loop for many seconds; each node decodes and
applies the batch in slices and creates the logs in worker threads, so its heartbeats keep
reaching the controller within a 2 s session timeout (Kafka's is 9 s): no node is fenced, no
leadership moves, and the topic is usable at once.
"""
from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from cluster.launch import Cluster

PARTITIONS = 2000
SESSION_TIMEOUT_MS = 2000
TOPIC = "large"
USED_PARTITIONS = (0, 1, PARTITIONS // 2, PARTITIONS - 1)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, node_config={"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}) as running:
        yield running


@pytest.fixture(scope="module")
def large_topic(cluster):
    leaders_before = cluster.status()["brokers"]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=120_000)
    try:
        response = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], timeout_ms=120_000, raise_errors=False)
    finally:
        admin.close()
    assert [(t["name"], t["error_code"]) for t in response["topics"]] == [(TOPIC, 0)]
    return leaders_before


def controller_log_lines(cluster, containing: str) -> list[str]:
    log_text = (cluster.data_dir / "logs" / "controller.log").read_text(errors="replace")
    return [line for line in log_text.splitlines() if containing in line]


def test_no_node_is_fenced_while_the_topic_is_applied(cluster, large_topic):
    status = cluster.status()
    assert controller_log_lines(cluster, "fencing") == []
    assert len(controller_log_lines(cluster, " unfenced")) == 3  # each node once, when the cluster started
    brokers = {b["node_id"]: (b["fenced"], b["broker_epoch"]) for b in status["brokers"]}
    assert brokers == {b["node_id"]: (False, b["broker_epoch"]) for b in large_topic}
    topic = next(t for t in status["topics"] if t["name"] == TOPIC)
    assert len(topic["partitions"]) == PARTITIONS
    # Leaders stay where the controller first placed them (spread evenly), none moved by a fence.
    assert all(p["leader"] == p["replicas"][0] and p["leader_epoch"] == 0 for p in topic["partitions"])


def test_every_node_opened_the_log_of_every_replica_it_hosts(cluster, large_topic):
    cluster.wait_ready()  # every node has reported the topic's records applied, its logs opened
    states = cluster.replica_states(timeout=30)
    assert {node_id: sum(p["topic"] == TOPIC for p in state["partitions"]) for node_id, state in states.items()} \
        == {1: PARTITIONS, 2: PARTITIONS, 3: PARTITIONS}


def test_produce_and_consume_on_its_partitions(cluster, large_topic):
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    sent = {(p, i): producer.send(TOPIC, f"{p}:{i}".encode(), key=b"k", partition=p).get(timeout=60)
            for p in USED_PARTITIONS for i in range(3)}
    producer.close()
    assert {key: (m.partition, m.offset) for key, m in sent.items()} == {(p, i): (p, i) for p, i in sent}

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=30_000)
    consumer.assign([TopicPartition(TOPIC, p) for p in USED_PARTITIONS])
    received = []
    for message in consumer:
        received.append((message.partition, message.offset, message.value))
        if len(received) == len(sent):
            break
    consumer.close()
    assert sorted(received) == sorted((p, i, f"{p}:{i}".encode()) for p in USED_PARTITIONS for i in range(3))
