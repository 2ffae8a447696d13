"""Growing and shrinking a running cluster while real clients use it: `kraftwerk node add`,
`kraftwerk rebalance` (and its plan fed back through `reassign --file`), `kraftwerk node remove`,
and their error lines."""
from __future__ import annotations

import json
import subprocess
import threading
from types import SimpleNamespace
from collections import Counter

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from cluster.launch import Cluster
from cluster.tools.planner import replica_counts
from tests.integration.test_cli import KRAFTWERK

TOPIC = "payments"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("grow")
    running = Cluster(nodes=3, data_dir=data_dir).start()
    try:
        yield running
    finally:
        Cluster.attach(data_dir).stop()  # also the nodes `kraftwerk node add` started
        running.stop()


def kraftwerk(cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*KRAFTWERK, *args, "--data-dir", str(cluster.data_dir)],
                            capture_output=True, text=True, timeout=300)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result


def current(cluster) -> Cluster:
    """The cluster as cluster.json describes it now, with the nodes the command line added or removed."""
    return Cluster.attach(cluster.data_dir)


def live_leaders(cluster) -> Counter:
    return Counter(p["leader"] for t in cluster.status()["topics"] for p in t["partitions"])


class Traffic:
    """An idempotent acks=all confluent-kafka producer and a kafka-python consumer group, both running
    until stopped: what was acknowledged, what the group read, and every error the clients reported."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.acknowledged: set[bytes] = set()
        self.read: set[bytes] = set()
        self.failed: list[str] = []
        self.client_errors: list = []
        self.stopping = threading.Event()
        self.produced = threading.Event()  # the producer's last acknowledgement is in
        # Daemons: a consumer still waiting for a lost message must not keep pytest from exiting.
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> "Traffic":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(120)

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acknowledged.add(message.value())
        else:
            self.failed.append(str(error))

    def _produce(self) -> None:
        producer = ConfluentProducer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5, "error_cb": self.client_errors.append})
        sequence = 0
        try:
            while not self.stopping.is_set():
                for _ in range(50):
                    producer.produce(TOPIC, b"payment-%07d" % sequence, on_delivery=self._delivered)
                    sequence += 1
                producer.flush(30)  # paces the writes by the acknowledgements
            assert producer.flush(60) == 0
        finally:
            self.produced.set()

    def _consume(self) -> None:
        consumer = KafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id="grow-readers",
                                 auto_offset_reset="earliest", enable_auto_commit=True)
        try:
            while not (self.produced.is_set() and self.acknowledged <= self.read):
                for records in consumer.poll(timeout_ms=500).values():
                    self.read.update(record.value for record in records)
        finally:
            consumer.close()


def test_a_cluster_grows_to_five_nodes_and_rebalances_under_load(cluster):
    cluster.create_topic(TOPIC, partitions=12, replication_factor=3)
    with Traffic(cluster.bootstrap_servers) as traffic:
        assert kraftwerk(cluster, "node", "add").stdout.startswith("node 4 joined at 127.0.0.1:")
        assert kraftwerk(cluster, "node", "add").stdout.startswith("node 5 joined at 127.0.0.1:")
        rebalanced = kraftwerk(cluster, "rebalance").stdout
    assert "partitions" in rebalanced and "MB left" in rebalanced
    grown = current(cluster)
    nodes = [1, 2, 3, 4, 5]
    assert sorted(grown.nodes) == nodes
    replicas = replica_counts(grown.assignment(), nodes)
    assert max(replicas.values()) - min(replicas.values()) <= 1, replicas
    leaders = {node_id: live_leaders(grown)[node_id] for node_id in nodes}
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders
    assert traffic.failed == []
    assert traffic.acknowledged and traffic.acknowledged <= traffic.read
    admin = KafkaAdminClient(bootstrap_servers=grown.bootstrap_servers)
    try:
        assert sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"]) == nodes
    finally:
        admin.close()


def test_a_dry_run_plan_fed_to_reassign_gives_the_same_result(cluster, tmp_path):
    grown = current(cluster)
    admin = KafkaAdminClient(bootstrap_servers=grown.bootstrap_servers)
    try:  # piled onto three of the five nodes
        admin.create_topics([NewTopic("lopsided", replica_assignments={i: [1, 2, 3] for i in range(5)})])
    finally:
        admin.close()
    before = grown.assignment()
    plan_file = tmp_path / "plan.json"
    printed = kraftwerk(grown, "rebalance", "--dry-run", "--plan-out", str(plan_file)).stdout
    plan = {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(plan_file.read_text())["partitions"]}
    assert plan and f"{len(plan)} of {len(before)} partitions change" in printed
    assert grown.assignment() == before  # a dry run moves nothing
    kraftwerk(grown, "reassign", "--file", str(plan_file), "--wait")
    assert grown.assignment() == {**before, **plan}
    assert kraftwerk(grown, "rebalance", "--dry-run").stdout.startswith("0 of ")


def test_removing_a_leader_node_moves_everything_off_it(cluster):
    grown = current(cluster)
    assert live_leaders(grown)[2] > 0
    removed_dir = grown.nodes[2].data_dir
    producer_errors = []
    producer = KafkaProducer(bootstrap_servers=grown.bootstrap_servers, acks="all", retries=10)
    with Traffic(grown.bootstrap_servers) as traffic:
        assert kraftwerk(grown, "node", "remove", "2").stdout == "node 2 removed; nodes now 1, 3, 4, 5\n"
        futures = [producer.send(TOPIC, b"after-removal-%d" % i) for i in range(100)]
        producer.flush(60)
        producer_errors = [f.exception for f in futures if f.failed()]
    producer.close()
    shrunk = current(cluster)
    assert sorted(shrunk.nodes) == [1, 3, 4, 5]
    assert all(2 not in replicas for replicas in shrunk.assignment().values())
    assert not removed_dir.exists()
    admin = KafkaAdminClient(bootstrap_servers=shrunk.bootstrap_servers)
    try:
        assert sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"]) == [1, 3, 4, 5]
    finally:
        admin.close()
    assert producer_errors == [] and traffic.failed == []
    assert all(not error.fatal() for error in traffic.client_errors), traffic.client_errors
    assert traffic.acknowledged <= traffic.read


def test_command_line_errors_are_one_line(cluster):
    shrunk = current(cluster)
    shrunk.create_topic("everywhere", partitions=1, replication_factor=4)
    before = shrunk.assignment()
    for args, message in [
        (("node", "remove", "42"), "Error: node 42 is not part of the cluster (nodes: [1, 3, 4, 5])"),
        (("node", "remove", "3"), "Error: cannot remove node 3: topic everywhere has replication factor 4, "
                                  "which 3 remaining nodes cannot keep (partition 0)"),
        (("rebalance", "--throttle", "0"), "Error: --throttle must be a positive rate in MB/s, got 0.0"),
    ]:
        result = kraftwerk(shrunk, *args, ok=False)
        assert result.returncode == 1 and result.stderr == message + "\n", result.stderr
    assert shrunk.assignment() == before
    assert sorted(current(cluster).nodes) == [1, 3, 4, 5]


def test_racks_and_added_nodes_are_kept_across_restarts(tmp_path):
    data_dir = tmp_path / "racked"
    cluster = SimpleNamespace(data_dir=data_dir)  # the command line starts and stops it
    try:
        kraftwerk(cluster, "up", "--nodes", "3", "--port", "0", "--detach",
                  "--rack-of", "1=a", "--rack-of", "2=a", "--rack-of", "3=b")
        assert kraftwerk(cluster, "node", "add", "--rack", "b").stdout.startswith("node 4 joined in rack b at ")
        kraftwerk(cluster, "node", "remove", "1")
        kraftwerk(cluster, "down")
        kraftwerk(cluster, "up", "--detach")
        restarted = current(cluster)
        assert sorted(restarted.nodes) == [2, 3, 4]
        admin = KafkaAdminClient(bootstrap_servers=restarted.bootstrap_servers)
        try:
            racks = {b["broker_id"]: b["rack"] for b in admin.describe_cluster()["brokers"]}
            assert racks == {2: "a", 3: "b", 4: "b"}
            admin.create_topics([NewTopic("spread", 6, 2)])
        finally:
            admin.close()
        placed = current(cluster).assignment()
        assert all({racks[r] for r in placed[("spread", i)]} == {"a", "b"} for i in range(6))
    finally:
        if (data_dir / "cluster.json").exists():
            Cluster.attach(data_dir).stop()
