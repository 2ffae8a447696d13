"""A cluster keeps the ports it first got: clients that know only the original bootstrap list,
or cached a node's address, reach every node after any restart."""
from __future__ import annotations

import json
import socket
import threading

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from cluster.launch import Cluster, ClusterError

MESSAGES_BETWEEN_FAULTS = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("kept-ports") / "cluster") as running:
        yield running


class KafkaPythonWriter:
    def __init__(self, bootstrap: str, topic: str):
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=1_000_000,
                                      retry_backoff_ms=50, request_timeout_ms=10_000)
        self.topic = topic

    def send(self, value: bytes, acked: list[bytes]) -> None:
        self.producer.send(self.topic, value).add_callback(lambda _: acked.append(value))

    def flush(self) -> None:
        self.producer.flush(60)

    def close(self) -> None:
        self.producer.close(10)


class ConfluentWriter:
    def __init__(self, bootstrap: str, topic: str):
        import confluent_kafka

        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                                  "log_level": 0})
        self.topic = topic

    def send(self, value: bytes, acked: list[bytes]) -> None:
        def delivered(error, message):
            if error is None:
                acked.append(message.value())
        self.producer.produce(self.topic, value, on_delivery=delivered)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0

    def close(self) -> None:
        self.producer.flush(10)


class SteadyWriter:
    """Writes numbered messages from a thread until stopped; `acked` is what the cluster acknowledged."""

    def __init__(self, writer):
        self.writer = writer
        self.acked: list[bytes] = []
        self.sent = 0
        self._progress = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.writer.send(b"m%06d" % self.sent, self.acked)
            with self._progress:
                self.sent += 1
                self._progress.notify_all()
            self._stop.wait(0.005)  # a steady trickle, not a flood

    def wait_for_acks(self, count: int) -> None:
        """Until `count` more messages are acknowledged (each send wakes this, so nothing polls for long)."""
        target = len(self.acked) + count
        with self._progress:
            assert self._progress.wait_for(lambda: len(self.acked) >= target, timeout=60), \
                f"{len(self.acked)} of {target} acknowledged"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.writer.flush()
        self.writer.close()


def read_values(bootstrap: str, topic: str) -> set[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        consumer.seek_to_beginning()
        return {record.value for record in consumer}
    finally:
        consumer.close()


@pytest.mark.parametrize("client", [KafkaPythonWriter, ConfluentWriter], ids=["kafka-python", "confluent-kafka"])
def test_writes_continue_through_a_restart_of_every_node(cluster, client):
    topic = f"rolling-{client.__name__.lower()}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    assert cluster.wait_in_sync(topic)
    bootstrap = cluster.bootstrap_servers
    steady = SteadyWriter(client(bootstrap, topic))
    try:
        for node_id in sorted(cluster.nodes):
            steady.wait_for_acks(MESSAGES_BETWEEN_FAULTS)
            cluster.kill_node(node_id)
            cluster.restart_node(node_id)
            assert cluster.wait_in_sync(topic)
        steady.wait_for_acks(MESSAGES_BETWEEN_FAULTS)
    finally:
        steady.stop()
    assert cluster.bootstrap_servers == bootstrap
    # A new client with only the list the cluster first printed finds every acknowledged message.
    stored = read_values(bootstrap, topic)
    assert set(steady.acked) <= stored
    assert len(steady.acked) >= (len(cluster.nodes) + 1) * MESSAGES_BETWEEN_FAULTS


def cluster_ports(data_dir) -> dict:
    state = json.loads((data_dir / "cluster.json").read_text())
    return {"controller": state["controller"]["port"],
            "nodes": {node_id: (node["port"], node["admin_port"]) for node_id, node in state["nodes"].items()}}


def test_a_cluster_started_again_on_its_data_dir_listens_where_it_did(tmp_path):
    data_dir = tmp_path / "cluster"
    with Cluster(nodes=2, data_dir=data_dir) as first:
        ports = cluster_ports(data_dir)
        bootstrap = first.bootstrap_servers
    with Cluster(nodes=2, data_dir=data_dir) as again:
        assert cluster_ports(data_dir) == ports
        assert again.bootstrap_servers == bootstrap
        again.create_topic("back", partitions=1)


def test_a_kept_port_taken_by_another_process_is_named(tmp_path):
    data_dir = tmp_path / "cluster"
    with Cluster(nodes=2, data_dir=data_dir) as cluster:
        port = cluster.nodes[2].port
        cluster.kill_node(2)
        with socket.create_server(("127.0.0.1", port)):
            with pytest.raises(ClusterError) as refused:
                cluster.restart_node(2)
        assert str(refused.value).startswith(f"node 2 cannot listen on 127.0.0.1:{port}: the port is in use by "
                                             "another process")
        cluster.restart_node(2)  # free again
        assert cluster.nodes[2].port == port and cluster.nodes[2].alive()
