"""Several listeners per node, as Kafka configures them: each client is told the addresses of the
listener it came in on, and the nodes replicate over the inter-broker listener."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient


TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    "advertised.listeners": "EXTERNAL://localhost:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def _addresses(cluster, listener: str, host: str) -> dict[int, str]:
    return {node_id: f"{host}:{node.ports[listener]}" for node_id, node in cluster.nodes.items()}


@pytest.mark.kraftwerk(nodes=3, config=TWO_LISTENERS)
def test_metadata_names_the_brokers_on_the_listener_the_client_came_in_on(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    internal = _addresses(cluster, "INTERNAL", "127.0.0.1")
    external = _addresses(cluster, "EXTERNAL", "localhost")
    assert len(set(internal.values()) | set(external.values())) == 6
    for bootstrap, expected in ((internal[1], internal), (external[2], external)):
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()} == expected
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            brokers = admin.describe_cluster()["brokers"]
        finally:
            admin.close()
        assert {b["broker_id"]: f"{b['host']}:{b['port']}" for b in brokers} == expected


@pytest.mark.kraftwerk(nodes=3, config=TWO_LISTENERS)
def test_replication_over_the_inter_broker_listener_serves_clients_of_the_other(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    cluster.create_topic("orders", partitions=3, replication_factor=3)
    external = ",".join(_addresses(cluster, "EXTERNAL", "localhost").values())
    values = [f"order-{i}".encode() for i in range(300)]
    producer = Producer({"bootstrap.servers": external, "acks": "all"})
    failures = []
    for value in values:
        producer.produce("orders", value, on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0 and failures == []
    assert cluster.wait_in_sync("orders")
    consumer = Consumer({"bootstrap.servers": external, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    seen = []
    try:
        while len(seen) < len(values):
            message = consumer.poll(10)
            assert message is not None, f"only {len(seen)} of {len(values)} messages read"
            assert message.error() is None, message.error()
            seen.append(message.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(values)
