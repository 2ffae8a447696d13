"""Clusters launched secured, as `kraftwerk up --security-protocol ... --sasl-mechanism ...` and the
pytest marker launch them: clients connect with the fixture's client_config(user), the nodes
replicate over the same secured listener, and a node killed and restarted catches up over it."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition

from tests.integration.observe import logged_errors

SECURED = [
    pytest.param({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "users": ["alice"]},
                 id="SASL_SSL-SCRAM-SHA-512"),
    pytest.param({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "users": ["alice"]},
                 id="SASL_PLAINTEXT-PLAIN"),
    pytest.param({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, id="SASL_SSL-OAUTHBEARER"),
    pytest.param({"security_protocol": "SSL", "super_user": "admin"}, id="SSL-mTLS"),
]


def _topic(cluster, config: dict, partitions: int = 3, replication_factor: int = 3) -> str:
    name = f"secured-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(15)
    return name


def _produce(config: dict, topic: str, values: list[bytes]) -> None:
    failures = []
    producer = Producer({**config, "acks": "all"})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0 and failures == []


def _read_all(config: dict, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"readers-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = []
    try:
        while len(read) < count:
            message = consumer.poll(15)
            assert message is not None, f"read {len(read)} of {count}"
            assert message.error() is None, message.error()
            read.append(message.value())
    finally:
        consumer.close()
    return read


@pytest.fixture
def secured_cluster(request, tmp_path):
    from cluster.launch.cluster import Cluster
    from cluster.launch.security import Security

    security = Security.of(**request.param)
    with Cluster(nodes=3, data_dir=tmp_path / "kraftwerk", security=security) as cluster:
        yield cluster
    logged = logged_errors(cluster)
    assert logged == {name: [] for name in logged}


@pytest.mark.parametrize("secured_cluster", SECURED, indirect=True)
def test_clients_and_replication_on_the_secured_listener_survive_a_node_restart(secured_cluster):
    cluster = secured_cluster
    config = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()}
    topic = _topic(cluster, config)
    before = [f"before-{i}".encode() for i in range(200)]
    _produce(config, topic, before)
    assert cluster.wait_in_sync(topic)
    cluster.kill_node(2)
    during = [f"during-{i}".encode() for i in range(200)]
    _produce(config, topic, during)
    cluster.restart_node(2)
    assert cluster.wait_in_sync(topic), "the restarted node did not catch up over the secured listener"
    assert sorted(_read_all(config, topic, 400)) == sorted(before + during)
    # what the nodes hold is what was acknowledged: read each partition from the restarted node's copy
    cluster.kill_node(1)
    cluster.kill_node(3)
    consumer = KafkaConsumer(bootstrap_servers=cluster.address(cluster.nodes[2]), **cluster.kafka_python_config()) \
        if cluster.security.mechanism != "OAUTHBEARER" else None
    if consumer is not None:
        try:
            partitions = [TopicPartition(topic, p) for p in range(3)]
            assert sum(consumer.end_offsets(partitions).values()) == 400
        finally:
            consumer.close()


@pytest.mark.kraftwerk(nodes=1, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", users=["alice"])
def test_the_marker_hands_out_each_users_client_config_and_cluster_json_the_super_users(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    alice = cluster.client_config("alice")
    assert {key: alice[key] for key in ("security.protocol", "sasl.mechanism", "sasl.username")} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice"}
    assert alice["ssl.ca.location"] == str(cluster.data_dir / "ca.pem")
    recorded = json.loads((cluster.data_dir / "cluster.json").read_text())["client_config"]
    assert recorded == cluster.client_config() and recorded["sasl.username"] == "admin"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **alice})
    metadata = admin.list_topics(timeout=10)
    assert set(metadata.brokers) == {1}


@pytest.mark.kraftwerk(nodes=1, security_protocol="SSL")
def test_a_fetch_answer_sent_from_the_segment_file_is_encrypted_too(kraftwerk_cluster):
    # Answers of 256 KB and more are sent from the segment file with sendfile on PLAINTEXT listeners,
    # which would bypass TLS.
    cluster = kraftwerk_cluster
    config = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()}
    topic = _topic(cluster, config, partitions=1, replication_factor=1)
    values = [bytes([i % 251]) * 4096 for i in range(1000)]
    _produce(config, topic, values)
    assert _read_all(config, topic, len(values)) == values
