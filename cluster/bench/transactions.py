"""Transactional producer throughput beside the same client's idempotent throughput:
`python -m cluster.bench.transactions`, and a table of `kraftwerk bench`.

One confluent-kafka producer writes `messages` 100-byte messages with acks=all and idempotence to
a topic of 4 partitions and 3 replicas; then a transactional one writes as many to another such
topic in transactions of 100 messages (keyed, so each spans the 4 partitions), committed back to
back: begin_transaction, 100 produce calls, commit_transaction, again. Printed for each: msg/s,
the transactional rate over the idempotent one, commit_transaction's p50 and p99 (its round trip:
the flush of the transaction's messages, with the AddPartitionsToTxn they wait for, then EndTxn),
and the CPU the nodes (all of them, from /proc) and the client's process spent per message
meanwhile. The transactional producer's init_transactions (which makes the cluster create
`__transaction_state`) happens before its clock starts, as the idempotent producer's connections
do before its first acknowledgement.

`python -m cluster.bench.transactions` measures librdkafka's mock cluster the same way after
kraftwerk (in a process of its own, its CPU in the nodes' row; `--no-mock` to skip it): it answers
in microseconds and replicates nothing, so its ratio is what this client loop allows at best.

Each transaction costs the cluster, beyond its messages: an AddPartitionsToTxn (a state write to
`__transaction_state`, acks=all), a verification by each partition leader before the transaction's
first batch there (KIP-890), an EndTxn (another state write), a COMMIT marker on each of its
partitions (acks=all, through WriteTxnMarkers to their leaders) and the completion's state write.
The producer's next AddPartitionsToTxn waits at the coordinator until that completion is written
(Kafka answers CONCURRENT_TRANSACTIONS, which librdkafka retries 20 ms later). docs/performance.md
has the figures and where the time goes.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from cluster.bench.clients import PRODUCER_SETTINGS, produce_confluent
from cluster.bench.stats import cpu_seconds, percentile

PARTITIONS = 4
REPLICATION_FACTOR = 3
PER_TRANSACTION = 100
VALUE_SIZE = 100
DEFAULT_MESSAGES = 200_000


@dataclass
class ProducerRun:
    what: str
    messages: int
    seconds: float
    nodes_cpu_s: float  # all nodes together, user + kernel
    client_cpu_s: float  # the bench's process: librdkafka's threads and the Python loop
    commits_s: list[float] | None = None  # commit_transaction round trips

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def per_message_us(self, cpu_s: float) -> float:
        return cpu_s / self.messages * 1e6

    def commit_ms(self, fraction: float) -> float:
        ordered = sorted(self.commits_s or [])
        return (statistics.median(ordered) if fraction == 0.5 else percentile(ordered, fraction)) * 1000


def _create_topic(bootstrap: str, name: str, replication_factor: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, replication_factor)])[name].result(60)


def _measured(node_pids: list[int], what: str, messages: int, run) -> ProducerRun:
    """Time run() (which returns its own seconds and commit times) with the nodes' and this process's CPU."""
    nodes_before = sum(cpu_seconds(pid) for pid in node_pids)
    client_before = time.process_time()
    seconds, commits = run()
    return ProducerRun(what, messages, seconds, sum(cpu_seconds(pid) for pid in node_pids) - nodes_before,
                       time.process_time() - client_before, commits)


def produce_transactions(confluent_kafka, bootstrap: str, topic: str, messages: int, value: bytes,
                         per_transaction: int = PER_TRANSACTION) -> tuple[float, list[float]]:
    """Seconds one transactional confluent-kafka producer takes to write `messages` copies of `value` in
    transactions of `per_transaction` messages, committed back to back, and each commit's round trip."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS,
                                         "transactional.id": f"kraftwerk-bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(error)

    commits = []
    started = time.perf_counter()
    for first in range(0, messages, per_transaction):
        producer.begin_transaction()
        for i in range(first, min(first + per_transaction, messages)):
            producer.produce(topic, value=value, key=str(i).encode(), on_delivery=delivered)
        committing = time.perf_counter()
        producer.commit_transaction(60)
        commits.append(time.perf_counter() - committing)
    elapsed = time.perf_counter() - started
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} messages refused (first error: {failures[0]})")
    return elapsed, commits


def measure(bootstrap: str, node_pids: list[int], messages: int = DEFAULT_MESSAGES,
            replication_factor: int | None = REPLICATION_FACTOR) -> list[ProducerRun]:
    """The idempotent row, then the transactional one, each on a new topic of its own (replication_factor None:
    topics made on first use, as librdkafka's mock makes them, with 4 partitions)."""
    import confluent_kafka

    value = os.urandom(VALUE_SIZE)
    suffix = uuid.uuid4().hex[:6]
    idempotent_topic, transactional_topic = f"bench-idempotent-{suffix}", f"bench-transactional-{suffix}"
    for topic in (idempotent_topic, transactional_topic):
        if replication_factor is not None:
            _create_topic(bootstrap, topic, replication_factor)
    idempotent = _measured(node_pids, "idempotent", messages, lambda: (produce_confluent(
        confluent_kafka, bootstrap, idempotent_topic, messages, value, "all", {"enable.idempotence": True}), None))
    transactional = _measured(node_pids, "transactional",
                              messages, lambda: produce_transactions(confluent_kafka, bootstrap, transactional_topic,
                                                                     messages, value))
    return [idempotent, transactional]


@contextlib.contextmanager
def mock_process(brokers: int = REPLICATION_FACTOR) -> Iterator[tuple[int, str]]:
    """librdkafka's mock cluster in a process of its own, as our nodes are: yields its pid and bootstrap string."""
    code = ("import sys\n"
            "from cluster.bench.against_mock import mock_cluster\n"
            "with mock_cluster(int(sys.argv[1])) as bootstrap:\n"
            "    print(bootstrap, flush=True)\n"
            "    sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(brokers)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        yield child.pid, child.stdout.readline().strip()
    finally:
        child.stdin.close()
        child.wait(30)


def table(runs: list[ProducerRun], nodes: int, client: str, replication_factor: int = REPLICATION_FACTOR,
          cluster: str = "") -> Table:
    """The idempotent run and the transactional one measured after it, side by side (runs as measure returns them)."""
    idempotent, transactional = runs
    result = Table(title=f"transactions{cluster}: {nodes} nodes, {PARTITIONS} partitions, RF={replication_factor}, "
                         f"{VALUE_SIZE} B values, {PER_TRANSACTION} messages a transaction, client {client}")
    for column in ("figure", "unit", "idempotent", "transactional", "ratio"):
        result.add_column(column, justify="right")
    result.add_row("throughput, acks=all", "msg/s", f"{idempotent.rate:,.0f}", f"{transactional.rate:,.0f}",
                   f"{transactional.rate / idempotent.rate:.2f}x")
    result.add_row("commit_transaction p50", "ms", "", f"{transactional.commit_ms(0.5):.2f}", "")
    result.add_row("commit_transaction p99", "ms", "", f"{transactional.commit_ms(0.99):.2f}", "")
    for what, cpu in (("nodes' CPU a message", "nodes_cpu_s"), ("client's CPU a message", "client_cpu_s")):
        mine, theirs = (run.per_message_us(getattr(run, cpu)) for run in (idempotent, transactional))
        result.add_row(what, "us", f"{mine:.1f}", f"{theirs:.1f}", f"{theirs / mine:.0f}x" if mine else "")
    return result


def main() -> None:
    from cluster.launch.cluster import Cluster

    parser = argparse.ArgumentParser(prog="python -m cluster.bench.transactions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="messages per producer run")
    parser.add_argument("--runs", type=int, default=1, help="idempotent and transactional runs, in turn")
    parser.add_argument("--no-mock", action="store_true", help="leave librdkafka's mock cluster out")
    args = parser.parse_args()
    import confluent_kafka

    console = Console()
    client = f"confluent-kafka {confluent_kafka.version()}"
    ratios = []
    with Cluster(nodes=REPLICATION_FACTOR) as cluster:
        pids = [node.pid for node in cluster.nodes.values()]
        for _ in range(args.runs):
            runs = measure(cluster.bootstrap_servers, pids, args.messages)
            console.print(table(runs, REPLICATION_FACTOR, client))
            ratios.append(runs[1].rate / runs[0].rate)
    if len(ratios) > 1:
        console.print(f"transactional / idempotent over {len(ratios)} runs: min {min(ratios):.2f}x, "
                      f"median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x")
    if not args.no_mock:
        with mock_process() as (pid, bootstrap):
            runs = measure(bootstrap, [pid], args.messages, replication_factor=None)
        console.print(table(runs, REPLICATION_FACTOR, client, cluster=" on librdkafka's mock cluster"))


if __name__ == "__main__":
    main()
