"""Client throughput figures, side by side with librdkafka's mock cluster.

Each figure function takes a bootstrap string, so the same code measures a kraftwerk
cluster and the mock cluster that ships inside confluent-kafka (in-process C, memory only,
replication simulated). The figures are printed with their ratio to the mock's: on a
shared machine a ratio from one run says more than absolute numbers from different runs.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterator

from rich.console import Console
from rich.table import Table

from cluster.bench import security
from cluster.bench.clients import consume_confluent, produce_confluent, produce_kafka_python, read_from_beginning
from cluster.bench.replication import LATENCY_ROUNDS, Percentiles, acks_all_latency, mock_acks_all_latency
from cluster.launch.cluster import Cluster

LARGE_VALUE_BYTES = 1_000_000
# The mock keeps the last 5 MB of each partition: the consumer reads no more than 4 partitions
# of 100-byte values it still holds, on either cluster.
MOCK_RETAINED_MESSAGES = 150_000
KAFKA_PYTHON_API_VERSION = (2, 1)
# librdkafka refuses to send a message above message.max.bytes (1,000,000 by default).
_LARGE_MESSAGE_LIMIT = 2 * LARGE_VALUE_BYTES


@dataclass
class SideBySide:
    what: str
    unit: str
    kraftwerk: float
    mock: float | None  # None: a figure the mock cannot give

    @property
    def ratio(self) -> float | None:
        return self.kraftwerk / self.mock if self.mock else None


@contextlib.contextmanager
def mock_cluster(brokers: int = 3) -> Iterator[str]:
    """librdkafka's mock cluster for as long as the block runs; yields its bootstrap string.

    The mock lives inside a client handle (`test.mock.num.brokers`); the brokers the handle
    learns from Metadata are the mock's listeners, which any other client can reach.
    """
    import confluent_kafka

    # The handle logs at NOTICE that it replaced bootstrap.servers: expected, not worth a line.
    quiet = logging.getLogger("kraftwerk.bench.mock")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    holder = confluent_kafka.Producer({"bootstrap.servers": "mock", "test.mock.num.brokers": brokers,
                                       "logger": quiet})
    try:
        metadata = holder.list_topics(timeout=10)
        yield ",".join(f"{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id))
    finally:
        holder.flush(5)
        del holder


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, replication_factor)]).values():
        future.result(30)


def confluent_producer_rate(bootstrap: str, topic: str, messages: int, value_size: int, acks: str = "all") -> float:
    """Messages per second one confluent-kafka producer writes and has acknowledged."""
    import confluent_kafka

    seconds = produce_confluent(confluent_kafka, bootstrap, topic, messages, os.urandom(value_size), acks)
    return messages / seconds


def confluent_consumer_rate(bootstrap: str, topic: str, partitions: int, messages: int) -> float:
    """Messages per second one confluent-kafka consumer reads of a topic, from the beginning."""
    import confluent_kafka

    return messages / consume_confluent(confluent_kafka, bootstrap, topic, partitions, messages)


def confluent_consumer_steady_rate(bootstrap: str, topic: str, partitions: int, messages: int,
                                   reads: int = 3) -> float:
    """Best of `reads` reads of a topic from the beginning by one confluent-kafka consumer, in messages
    per second after its first message (ReadTimes.steady_rate)."""
    import confluent_kafka

    best = 0.0
    for _ in range(reads):
        # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s) once queued.min.messages
        # (100,000) wait in its queue: a pause of the client's, taken at random against either cluster.
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "kraftwerk-bench",
                                             "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                                             "queued.min.messages": 10 * messages})
        best = max(best, read_from_beginning(consumer, topic, range(partitions), messages, 10_000).steady_rate())
        consumer.close()
    return best


def open_group_coordinator(bootstrap: str, topic: str) -> None:
    """Commit an offset once, so that the cluster has created and opened __consumer_offsets.

    The first consumer with a group.id makes a cluster create that topic (50 partitions, as
    Kafka); the mock has it from the start. Its creation is a one-time cost of the cluster's
    first group, not of reading, and stays out of the consumer figure.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    # kafka-python's commit waits out COORDINATOR_LOAD_IN_PROGRESS; librdkafka's fails on it.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kraftwerk-bench", enable_auto_commit=False,
                             api_version=KAFKA_PYTHON_API_VERSION)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()


def kafka_python_producer_rate(bootstrap: str, topic: str, messages: int, value_size: int, acks: str = "1") -> float:
    """Messages per second one kafka-python producer writes and has acknowledged.

    The API versions are pinned to Kafka 2.1's (Produce v7) on every cluster: kafka-python
    3.0 cannot read the mock's answer to the ApiVersions v4 it opens with otherwise.
    """
    return messages / produce_kafka_python(bootstrap, topic, messages, os.urandom(value_size), acks,
                                           api_version=KAFKA_PYTHON_API_VERSION)


def write_large_values(bootstrap: str, topic: str, count: int, value_size: int = LARGE_VALUE_BYTES) -> None:
    import confluent_kafka

    # acks=all: the reads that follow measure fetching, not waiting for the high watermark.
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                         "message.max.bytes": _LARGE_MESSAGE_LIMIT})
    value = os.urandom(value_size)
    for _ in range(count):
        producer.produce(topic, value=value, partition=0)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("large values left unacknowledged")


# The large fetch figure's fetch sizes: 64 MB answers. Its "default fetch sizes" rows leave
# librdkafka's own (1 MB a partition, 50 MB a request): one 1 MB value an answer.
LARGE_FETCH_SIZES = {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 64 << 20,
                     "receive.message.max.bytes": 128 << 20}


def large_fetch_megabytes_per_second(bootstrap: str, topic: str, count: int, reads: int = 3,
                                     value_size: int = LARGE_VALUE_BYTES,
                                     fetch_sizes: dict | None = None) -> tuple[float, float]:
    """Best of `reads` reads of partition 0 (holding `count` values of value_size bytes) by one
    confluent-kafka consumer, in MB/s of values: from the consumer's start, and after its first
    value (ReadTimes.steady_rate). fetch_sizes: the consumer's fetch size settings (default:
    LARGE_FETCH_SIZES; {} for librdkafka's own)."""
    import confluent_kafka

    best = float("inf")
    best_steady = 0.0
    for _ in range(reads):
        # A queue of 1 GB: the default (64 MB) would pause fetching for fetch.queue.backoff.ms at random.
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "kraftwerk-bench-large", "enable.auto.commit": False,
            "queued.max.messages.kbytes": 1 << 20, **(LARGE_FETCH_SIZES if fetch_sizes is None else fetch_sizes)})
        times = read_from_beginning(consumer, topic, [0], count, 100)
        best, best_steady = min(best, times.seconds), max(best_steady, times.steady_rate())
        consumer.close()
    return count * value_size / best / 1e6, best_steady * value_size / 1e6


def measure(bootstrap: str, replication_factor: int | None, messages: int, large_values: int,
            partitions: int = 4, value_size: int = 100) -> dict[str, float]:
    """Every figure of one cluster, by name (the names `side_by_side` prints).

    replication_factor None leaves topics to be created on first use: librdkafka's mock
    never answers CreateTopics, and creates a topic on first use with 4 partitions, each
    on all of its brokers.
    """
    def create_topic_of(name: str, partition_count: int) -> None:
        if replication_factor is not None:
            create_topic(bootstrap, name, partition_count, replication_factor)

    figures = {}
    create_topic_of("bench-confluent", partitions)
    figures["confluent producer acks=all"] = confluent_producer_rate(bootstrap, "bench-confluent", messages,
                                                                     value_size, "all")
    open_group_coordinator(bootstrap, "bench-confluent")
    figures["confluent consumer"] = confluent_consumer_rate(bootstrap, "bench-confluent", partitions,
                                                            min(messages, MOCK_RETAINED_MESSAGES))
    figures[STEADY_CONSUMER] = confluent_consumer_steady_rate(bootstrap, "bench-confluent", partitions,
                                                              min(messages, MOCK_RETAINED_MESSAGES))
    create_topic_of("bench-kafka-python", partitions)
    # kafka-python is pure Python and about 20x slower than librdkafka: a tenth of the messages.
    figures["kafka-python producer acks=1"] = kafka_python_producer_rate(
        bootstrap, "bench-kafka-python", max(messages // 10, 1), value_size, "1")
    if large_values:
        create_topic_of("bench-large", 1)
        write_large_values(bootstrap, "bench-large", large_values)
        figures["1 MB values fetch"], figures[STEADY_LARGE_FETCH] = large_fetch_megabytes_per_second(
            bootstrap, "bench-large", large_values)
        figures[DEFAULT_SIZES_LARGE_FETCH], figures[DEFAULT_SIZES_STEADY_LARGE_FETCH] = (
            large_fetch_megabytes_per_second(bootstrap, "bench-large", large_values, fetch_sizes={}))
    return figures


# The same reads, counted from the consumer's first message: the client's own start (about 0.5 s
# with librdkafka, against the mock as against kraftwerk) is most of a read of 150,000 small messages.
STEADY_CONSUMER = "confluent consumer, after its first message"
STEADY_LARGE_FETCH = "1 MB values fetch, after the first value"
DEFAULT_SIZES_LARGE_FETCH = "1 MB values fetch, default fetch sizes"
DEFAULT_SIZES_STEADY_LARGE_FETCH = "1 MB values fetch, default sizes, after the first"
UNITS = {"confluent producer acks=all": "msg/s", "confluent consumer": "msg/s", STEADY_CONSUMER: "msg/s",
         "kafka-python producer acks=1": "msg/s", "1 MB values fetch": "MB/s", STEADY_LARGE_FETCH: "MB/s",
         DEFAULT_SIZES_LARGE_FETCH: "MB/s", DEFAULT_SIZES_STEADY_LARGE_FETCH: "MB/s"}


def latency_figures(latency: Percentiles, rf: int) -> dict[str, float]:
    return {f"acks=all latency p50, RF={rf}": latency.p50_ms, f"acks=all latency p99, RF={rf}": latency.p99_ms}


def unit_of(what: str) -> str:
    return "ms (lower is better)" if what.startswith("acks=all latency") else UNITS[what]


def side_by_side(nodes: int = 3, replication_factor: int = 3, messages: int = 500_000, large_values: int = 1000,
                 console: Console | None = None, progress: Callable[[str], None] | None = None,
                 latency_rounds: int = LATENCY_ROUNDS) -> list[SideBySide]:
    """kraftwerk (`nodes` nodes) and a mock cluster of as many brokers, measured one after the other."""
    console = console or Console()
    progress = progress or (lambda text: console.log(text))
    progress(f"measuring kraftwerk: {nodes} nodes, RF={replication_factor}")
    with Cluster(nodes=nodes) as cluster:
        ours = measure(cluster.bootstrap_servers, replication_factor, messages, large_values)
        for rf in sorted({replication_factor, 1}, reverse=True):
            ours.update(latency_figures(acks_all_latency(cluster.bootstrap_servers, rf, latency_rounds), rf))
    progress(f"kraftwerk: {_summary(ours)}; measuring librdkafka's mock cluster: {nodes} brokers")
    with mock_cluster(nodes) as bootstrap:
        # The mock keeps the last 5 MB of a partition: it cannot serve 1,000 values of 1 MB.
        theirs = measure(bootstrap, None, messages, large_values=0)
    # The mock only simulates replication: its one latency stands beside each of ours.
    mock_latency = mock_acks_all_latency(latency_rounds)
    for rf in sorted({replication_factor, 1}, reverse=True):
        theirs.update(latency_figures(mock_latency, rf))
    rows = [SideBySide(what, unit_of(what), ours[what], theirs.get(what)) for what in ours]
    console.print(_table(rows, nodes, replication_factor, messages))
    progress("measuring what TLS and SASL cost: PLAINTEXT, then SASL_SSL with SCRAM-SHA-256")
    secured = security.measure(nodes, replication_factor, min(messages, SECURITY_MESSAGES))
    console.print(security.table(secured, nodes, replication_factor, min(messages, SECURITY_MESSAGES)))
    return rows


# Messages of the security rows' runs: two more clusters, each written and read once.
SECURITY_MESSAGES = 200_000


def _summary(figures: dict[str, float]) -> str:
    return ", ".join(f"{what} {_shown(value)} {unit_of(what).split()[0]}" for what, value in figures.items())


def _shown(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _table(rows: list[SideBySide], nodes: int, replication_factor: int, messages: int) -> Table:
    table = Table(title=f"kraftwerk vs librdkafka's mock cluster: {nodes} nodes, RF={replication_factor}, "
                        f"4 partitions, {messages:,} x 100 B values")
    for column in ("figure", "unit", "kraftwerk", "mock", "kraftwerk / mock"):
        table.add_column(column, justify="right")
    for row in rows:
        if row.mock is None:
            table.add_row(row.what, row.unit, f"{row.kraftwerk:,.0f}", "n/a: keeps 5 MB a partition", "")
        else:
            table.add_row(row.what, row.unit, _shown(row.kraftwerk), _shown(row.mock), f"{row.ratio:.2f}x")
    return table
