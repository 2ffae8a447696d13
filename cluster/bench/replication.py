"""Replication figures: `python -m cluster.bench.replication`.

Prints, side by side with librdkafka's mock cluster (in-process, replication simulated) measured
in the same run:

- single-message acks=all latency: a confluent-kafka producer (linger.ms=0) sends one message,
  flushes, and repeats; p50/p99/max over the round trips, for RF=3 and RF=1, and each node's CPU
  per write (user + kernel, from /proc; the busiest node is the partition's leader);
- idle cost: a 9-node cluster holding 1,000 topics x 3 partitions x RF 3 (9,000 replicas) and no
  client traffic at all: each node's share of a core and its RSS.

The functions take an already-running cluster (`acks_all_latency(bootstrap, rf)`,
`idle_cpu_and_rss(cluster, seconds)`), so that `kraftwerk bench` can call them on its own.

One acks=all write costs two replica round trips: a follower's parked Fetch is woken by the
leader's append, and the produce is answered from that follower's next Fetch. An idle node's cost
is its replica fetching, which fetch sessions (KIP-227) keep from naming every followed partition
in every Fetch.
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

from cluster.bench.stats import cpu_seconds, percentile, rss_mb
from cluster.launch.cluster import Cluster

LATENCY_ROUNDS = 2000
WARM_UP_ROUNDS = 50
VALUE = b"v" * 100
IDLE_TOPICS = 1000
IDLE_PARTITIONS = 3
IDLE_NODES = 9


@dataclass
class Percentiles:
    p50_ms: float
    p99_ms: float
    max_ms: float
    rounds: int

    @classmethod
    def of(cls, seconds: list[float]) -> "Percentiles":
        ordered = sorted(seconds)
        return cls(p50_ms=statistics.median(ordered) * 1000, p99_ms=percentile(ordered, 0.99) * 1000,
                   max_ms=ordered[-1] * 1000, rounds=len(ordered))


@dataclass
class NodeIdle:
    node_id: int
    cpu_percent: float  # of one core
    rss_mb: float


def _round_trips(producer_config: dict, topic: str, rounds: int) -> list[float]:
    """Seconds each of `rounds` single-message acks=all writes took, after a warm-up."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"linger.ms": 0, "acks": "all", "enable.idempotence": False, **producer_config})
    errors = []

    def delivered(error, _message):
        if error is not None:
            errors.append(error)

    seconds = []
    for index in range(WARM_UP_ROUNDS + rounds):
        started = time.perf_counter()
        producer.produce(topic, value=VALUE, partition=0, on_delivery=delivered)
        producer.flush(30)
        if index >= WARM_UP_ROUNDS:
            seconds.append(time.perf_counter() - started)
    if errors:
        raise KafkaException(errors[0])
    return seconds


def acks_all_latency(bootstrap: str, rf: int, rounds: int = LATENCY_ROUNDS) -> Percentiles:
    """Single-message acks=all produce latency to a new one-partition topic of rf replicas."""
    return Percentiles.of(_round_trips({"bootstrap.servers": bootstrap}, latency_topic(bootstrap, rf), rounds))


def latency_topic(bootstrap: str, rf: int) -> str:
    """A new one-partition topic of rf replicas to measure on."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"latency-rf{rf}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, rf)])[topic].result(60)
    return topic


def mock_acks_all_latency(rounds: int = LATENCY_ROUNDS) -> Percentiles:
    """The same loop against librdkafka's mock cluster of 3 brokers (topics auto-created, RF 3)."""
    return Percentiles.of(_round_trips({"test.mock.num.brokers": 3}, "latency-mock", rounds))


def idle_cpu_and_rss(cluster: Cluster, seconds: float = 20) -> list[NodeIdle]:
    """Each node's CPU (percent of one core) over `seconds` of whatever the cluster does now, and its RSS."""
    pids = {node_id: node.pid for node_id, node in sorted(cluster.nodes.items())}
    before = {node_id: cpu_seconds(pid) for node_id, pid in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)  # the measurement window itself
    elapsed = time.monotonic() - started
    return [NodeIdle(node_id, (cpu_seconds(pid) - before[node_id]) / elapsed * 100, rss_mb(pid))
            for node_id, pid in pids.items()]


def create_idle_topics(cluster: Cluster, topics: int = IDLE_TOPICS, partitions: int = IDLE_PARTITIONS,
                       replication_factor: int = 3) -> None:
    """Create `topics` topics and wait until every replica of them is in sync."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    names = [f"idle-{index:04d}" for index in range(topics)]
    for start in range(0, topics, 100):
        chunk = names[start:start + 100]
        futures = admin.create_topics([NewTopic(name, partitions, replication_factor) for name in chunk],
                                      request_timeout=120)
        for future in futures.values():
            future.result(180)
    cluster.wait_ready()
    for name in (names[0], names[-1]):
        cluster.wait_in_sync(name, timeout=120)


def _print_latency(rf: int, ours: Percentiles, mock: Percentiles) -> None:
    print(f"acks=all single-message latency, RF={rf} ({ours.rounds} writes)")
    for label in ("p50_ms", "p99_ms", "max_ms"):
        mine, theirs = getattr(ours, label), getattr(mock, label)
        print(f"  {label[:-3]:>4}: kraftwerk {mine:7.3f} ms   mock {theirs:7.3f} ms   ratio {mine / theirs:5.2f}x")


def _print_idle(figures: list[NodeIdle], seconds: float) -> None:
    print(f"idle, {IDLE_NODES} nodes, {IDLE_TOPICS} topics x {IDLE_PARTITIONS} partitions x RF 3, "
          f"over {seconds:.0f} s:")
    for figure in figures:
        print(f"  node {figure.node_id}: {figure.cpu_percent:5.2f}% of a core, RSS {figure.rss_mb:6.1f} MB")
    print(f"  mean {statistics.mean(f.cpu_percent for f in figures):5.2f}% of a core, "
          f"max RSS {max(f.rss_mb for f in figures):6.1f} MB")


def run_latency(rounds: int) -> None:
    with Cluster(nodes=3) as cluster:
        for rf in (3, 1):
            topic = latency_topic(cluster.bootstrap_servers, rf)
            pids = [node.pid for node in cluster.nodes.values()]
            before = [cpu_seconds(pid) for pid in pids]
            ours = Percentiles.of(_round_trips({"bootstrap.servers": cluster.bootstrap_servers}, topic, rounds))
            writes = rounds + WARM_UP_ROUNDS
            cpu_ms = sorted(((cpu_seconds(pid) - then) / writes * 1000 for pid, then in zip(pids, before)),
                            reverse=True)
            _print_latency(rf, ours, mock_acks_all_latency(rounds))
            # The busiest node is the partition's leader.
            print("  nodes' CPU per write, user + kernel, busiest first: "
                  + ", ".join(f"{ms:.3f}" for ms in cpu_ms) + " ms")


def run_idle(seconds: float, topics: int) -> None:
    with Cluster(nodes=IDLE_NODES, startup_timeout=300) as cluster:
        started = time.monotonic()
        create_idle_topics(cluster, topics)
        print(f"{topics} topics created and in sync after {time.monotonic() - started:.1f} s")
        time.sleep(5)  # let the creation's own work (ISR changes, first fetches) settle first
        _print_idle(idle_cpu_and_rss(cluster, seconds), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m cluster.bench.replication", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=LATENCY_ROUNDS, help="acks=all writes per figure")
    parser.add_argument("--idle-seconds", type=float, default=20, help="idle measurement window")
    parser.add_argument("--idle-topics", type=int, default=IDLE_TOPICS, help="topics in the idle cluster")
    parser.add_argument("--only", choices=("latency", "idle"), help="run one part only")
    args = parser.parse_args()
    if args.only != "idle":
        run_latency(args.rounds)
    if args.only != "latency":
        run_idle(args.idle_seconds, args.idle_topics)


if __name__ == "__main__":
    main()
