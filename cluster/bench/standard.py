"""`kraftwerk bench`: start-up time, produce and fetch throughput, failover time, how long
stopping a cluster takes, and node memory, printed.

Start-up is shown for the benchmark's own cluster and as min/median/max over fresh clusters of
3 and 9 nodes: a start is mostly the processes' imports and their first heartbeats, which is why
the controller and nodes are forked from one process that imported their code once
(cluster/launch/fork_server.py).

Uses confluent-kafka (librdkafka) when it is installed, since the point is to measure the
cluster, not the client; kafka-python otherwise. With confluent-kafka, a second table sets a
transactional producer (100-message transactions) beside an idempotent one (cluster.bench.transactions),
and a third how fast a group of 10 hands out partitions, classic beside KIP-848 (cluster.bench.groups).
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from cluster.bench.clients import consume_confluent, consume_kafka_python, produce_confluent, produce_kafka_python
from cluster.bench.stats import rss_mb
from cluster.bench.groups import measure as measure_groups, table as groups_table
from cluster.bench.transactions import measure as measure_transactions, table as transactions_table
from cluster.launch.cluster import Cluster


@dataclass
class Figure:
    what: str
    messages: int
    seconds: float
    value_size: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.rate * self.value_size / 1e6


class AckRecorder:
    """One acks=all producer writing to partition 0 a message at a time, noting when each is acknowledged."""

    def __init__(self, bootstrap: str, topic: str, confluent_kafka):
        self.acked_at: list[float] = []
        self._stop = threading.Event()
        self._send_one, self._close = self._confluent(bootstrap, topic, confluent_kafka) if confluent_kafka else \
            self._kafka_python(bootstrap, topic)
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-acks")

    @staticmethod
    def _confluent(bootstrap: str, topic: str, confluent_kafka):
        # log_level 0: the disconnects this measurement causes are expected, not worth a line each.
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                             "log_level": 0})

        def send_one() -> bool:
            delivered = []
            producer.produce(topic, b"tick", partition=0, on_delivery=lambda error, _: delivered.append(error))
            producer.flush(10)
            return delivered == [None]
        return send_one, lambda: producer.flush(5)

    @staticmethod
    def _kafka_python(bootstrap: str, topic: str):
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)

        def send_one() -> bool:
            try:
                producer.send(topic, b"tick", partition=0).get(10)
                return True
            except KafkaError:
                return False
        return send_one, lambda: producer.close(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._send_one():
                self.acked_at.append(time.monotonic())

    def start(self) -> "AckRecorder":
        self._thread.start()
        return self

    def wait_for_acks(self, count: int, timeout: float = 30) -> bool:
        """False if `count` more acknowledgements did not come within timeout seconds."""
        deadline = time.monotonic() + timeout
        target = len(self.acked_at) + count
        while len(self.acked_at) < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def longest_gap_since(self, since: float) -> float:
        """The longest time without an acknowledgement from `since` on: how long writes were unavailable."""
        times = [since] + [t for t in self.acked_at if t > since]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self._close()


def measure_failover(cluster: Cluster, confluent_kafka) -> list[tuple[str, float]]:
    """Seconds without acks=all acknowledgements when the leader is killed (-9), then stopped gracefully."""
    topic = "bench-failover"
    cluster.create_topic(topic, partitions=1, replication_factor=min(3, len(cluster.nodes)))
    cluster.wait_in_sync(topic)
    recorder = AckRecorder(cluster.bootstrap_servers, topic, confluent_kafka).start()
    figures = []
    def partition_state() -> dict:
        return next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"][0]

    def acknowledged(count: int, when: str) -> None:
        if not recorder.wait_for_acks(count):
            raise RuntimeError(f"no acks=all acknowledgements for 30s {when}; partition now {partition_state()}, "
                               f"replicas {cluster.replica_states()}")

    try:
        for what, fault in (("kill -9", cluster.kill_node), ("graceful stop", cluster.stop_node)):
            acknowledged(200, f"before the leader {what}")
            leader = partition_state()["leader"]
            faulted_at = time.monotonic()
            fault(leader)
            acknowledged(200, f"after the leader {what}")
            figures.append((f"leader {what}: writes unavailable", recorder.longest_gap_since(faulted_at)))
            cluster.restart_node(leader)
            cluster.wait_in_sync(topic)
    finally:
        recorder.stop()
    return figures


def measure_down(nodes: int, partitions: int, runs: int) -> list[float]:
    """Seconds each of `runs` stops of a fresh cluster takes (what `kraftwerk down` does), with one replicated
    topic written with acks=all and read by a consumer group, so every node leads and follows partitions."""
    from kafka import KafkaConsumer, KafkaProducer

    seconds = []
    for _ in range(runs):
        data_dir = tempfile.mkdtemp(prefix="kraftwerk-bench-down-")
        try:
            cluster = Cluster(nodes=nodes, data_dir=data_dir).start()
            try:
                cluster.create_topic("orders", partitions=partitions, replication_factor=min(3, nodes))
                producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
                for i in range(100):
                    producer.send("orders", b"order %d" % i)
                producer.close()
                consumer = KafkaConsumer("orders", bootstrap_servers=cluster.bootstrap_servers, group_id="bench",
                                         auto_offset_reset="earliest", consumer_timeout_ms=5000)
                next(iter(consumer))
                consumer.commit()
                consumer.close()
            finally:
                started = time.perf_counter()
                cluster.stop()
                seconds.append(time.perf_counter() - started)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return seconds


def measure_startup(node_counts: tuple[int, ...], runs: int) -> dict[int, list[float]]:
    """Per cluster size, the seconds each of `runs` starts of a fresh cluster took until every node was
    registered, unfenced and caught up: what `kraftwerk up` reports as ready."""
    seconds: dict[int, list[float]] = {}
    for count in node_counts:
        for _ in range(runs):
            with Cluster(nodes=count) as cluster:
                seconds.setdefault(count, []).append(cluster.startup_seconds)
    return seconds


def add_spread(table: Table, what: str, seconds: list[float]) -> None:
    """Rows for the min, median and max of `seconds`."""
    for name, figure in (("min", min(seconds)), ("median", statistics.median(seconds)), ("max", max(seconds))):
        table.add_row(f"{what} ({name} of {len(seconds)})", f"{figure:.2f}", "", "")


def run_benchmark(nodes: int, messages: int, value_size: int, partitions: int, console: Console | None = None,
                  down_runs: int = 10, startup_runs: int = 10, startup_node_counts: tuple[int, ...] = (3, 9)):
    console = console or Console()
    try:
        import confluent_kafka
    except ImportError:
        confluent_kafka = None
    client = f"confluent-kafka {confluent_kafka.version()}" if confluent_kafka else "kafka-python"
    value = os.urandom(value_size)
    figures: list[Figure] = []
    with Cluster(nodes=nodes) as cluster:
        bootstrap = cluster.bootstrap_servers
        rss_idle = {n: rss_mb(p.pid) for n, p in cluster.nodes.items()}
        for acks in ("1", "all"):
            topic = f"bench-acks-{acks}"
            cluster.create_topic(topic, partitions=partitions)
            if confluent_kafka:
                seconds = produce_confluent(confluent_kafka, bootstrap, topic, messages, value, acks)
            else:
                seconds = produce_kafka_python(bootstrap, topic, messages, value, acks)
            figures.append(Figure(f"produce acks={'-1' if acks == 'all' else acks}", messages, seconds, value_size))
        if confluent_kafka:
            seconds = consume_confluent(confluent_kafka, bootstrap, "bench-acks-1", partitions, messages)
        else:
            seconds = consume_kafka_python(bootstrap, "bench-acks-1", partitions, messages)
        figures.append(Figure("fetch (consume all)", messages, seconds, value_size))
        transactions = measure_transactions(bootstrap, [p.pid for p in cluster.nodes.values()], messages,
                                            min(3, nodes)) if confluent_kafka else []
        groups = measure_groups(cluster) if confluent_kafka else []
        rss_loaded = {n: rss_mb(p.pid) for n, p in cluster.nodes.items()}
        startup = cluster.startup_seconds
        failover = measure_failover(cluster, confluent_kafka) if nodes > 1 else []
    downs = measure_down(nodes, partitions, down_runs) if down_runs else []
    starts = measure_startup(startup_node_counts, startup_runs) if startup_runs else {}

    table = Table(title=f"kraftwerk bench: {nodes} nodes, {partitions} partitions, {messages:,} x {value_size} B "
                        f"values, client {client}")
    for column in ("measure", "seconds", "messages/s", "MB/s"):
        table.add_column(column, justify="right")
    table.add_row("cluster start-up", f"{startup:.2f}", "", "")
    for count, seconds in starts.items():
        add_spread(table, f"cluster start-up, {count} nodes", seconds)
    for figure in figures:
        table.add_row(figure.what, f"{figure.seconds:.2f}", f"{figure.rate:,.0f}", f"{figure.megabytes_per_second:.1f}")
    for what, seconds in failover:
        table.add_row(what, f"{seconds:.2f}", "", "")
    if downs:
        add_spread(table, "cluster down", downs)
    console.print(table)
    if transactions:
        console.print(transactions_table(transactions, nodes, client, min(3, nodes)))
    if groups:
        console.print(groups_table(groups, nodes))
    memory = Table(title="node memory (RSS)")
    for column in ("node", "idle MB", "after load MB"):
        memory.add_column(column, justify="right")
    for node_id in sorted(rss_idle):
        memory.add_row(str(node_id), f"{rss_idle[node_id]:.1f}", f"{rss_loaded[node_id]:.1f}")
    console.print(memory)
    return figures
