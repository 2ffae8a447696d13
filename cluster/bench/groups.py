"""How fast a group hands out partitions, classic protocol beside KIP-848's consumer protocol:
`python -m cluster.bench.groups`, and a table of `kraftwerk bench`.

For each protocol, `members` confluent-kafka consumers of a new group subscribe together to a topic
of `partitions` partitions holding one message each. Timed:

- join: from the moment the first member subscribes until the members together have read the
  message of every partition (every partition assigned, and fetched from);
- leave: one member closes (leaving the group); one new message is written to every partition at
  once, and the time runs until the remaining members have read all of them, the partitions of
  the member that left included.

Classic members use librdkafka's default strategy (range,roundrobin: an eager rebalance in which
every member rejoins) and heartbeat every 500 ms; consumer-protocol members use the group's default
server-side assignor and heartbeat interval (`group.consumer.heartbeat.interval.ms`, 500 ms). Under
either protocol a member learns that partitions move on its next heartbeat, so the interval bounds
how fast they do: with librdkafka's default `heartbeat.interval.ms` of 3 s, classic figures are
about 3 s.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

MEMBERS = 10
PARTITIONS = 20
POLL_S = 0.05
TIMEOUT_S = 60
PROTOCOLS = ("classic", "consumer")
CLASSIC_HEARTBEAT_MS = 500  # group.consumer.heartbeat.interval.ms's default (cluster/formats/config.py)


@dataclass
class GroupRun:
    protocol: str
    join_s: float
    leave_s: float


class _Members:
    """Consumers of one group, each polling in a thread of its own; what they read, by value."""

    def __init__(self, confluent_kafka, bootstrap: str, topic: str, group: str, protocol: str, count: int):
        self.read: set[str] = set()
        self.changed = threading.Condition()
        self.stop = [threading.Event() for _ in range(count)]
        config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "log_level": 0}
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            # The same heartbeat interval as the consumer protocol's, so that the two compare the
            # coordinators, not the clients' defaults (librdkafka's is 3 s).
            config.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": CLASSIC_HEARTBEAT_MS})
        self.consumers = [confluent_kafka.Consumer(dict(config, **{"client.id": f"bench-{i}"})) for i in range(count)]
        self.threads = [threading.Thread(target=self._poll, args=(i, topic), daemon=True) for i in range(count)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _poll(self, index: int, topic: str) -> None:
        consumer = self.consumers[index]
        consumer.subscribe([topic])
        while not self.stop[index].is_set():
            message = consumer.poll(POLL_S)
            if message is not None and not message.error():
                with self.changed:
                    self.read.add(message.value().decode())
                    self.changed.notify_all()
        consumer.close()

    def wait_read(self, values: set[str]) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: values <= self.read, TIMEOUT_S)

    def close(self, index: int) -> None:
        self.stop[index].set()
        self.threads[index].join(TIMEOUT_S)

    def close_all(self) -> None:
        for index in range(len(self.threads)):
            self.close(index)


def _write_one_each(confluent_kafka, bootstrap: str, topic: str, partitions: int, tag: str) -> set[str]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    values = {f"{tag}-{p}" for p in range(partitions)}
    for p in range(partitions):
        producer.produce(topic, value=f"{tag}-{p}".encode(), partition=p)
    producer.flush(TIMEOUT_S)
    return values


def measure_protocol(cluster, protocol: str, members: int = MEMBERS, partitions: int = PARTITIONS) -> GroupRun:
    import confluent_kafka

    bootstrap = cluster.bootstrap_servers
    topic = f"bench-groups-{protocol}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=partitions)
    first = _write_one_each(confluent_kafka, bootstrap, topic, partitions, "first")
    group = _Members(confluent_kafka, bootstrap, topic, f"{topic}-group", protocol, members)
    try:
        started = time.perf_counter()
        group.start()
        if not group.wait_read(first):
            raise RuntimeError(f"{protocol} members did not read every partition in {TIMEOUT_S}s")
        join_s = time.perf_counter() - started
        started = time.perf_counter()
        group.close(0)
        second = _write_one_each(confluent_kafka, bootstrap, topic, partitions, "second")
        if not group.wait_read(second):
            raise RuntimeError(f"{protocol} members did not take over the partitions of one that left")
        leave_s = time.perf_counter() - started
    finally:
        group.close_all()
    return GroupRun(protocol, join_s, leave_s)


def measure(cluster, runs: int = 1) -> list[list[GroupRun]]:
    """For each run, a GroupRun per protocol, the protocols in turn."""
    return [[measure_protocol(cluster, protocol) for protocol in PROTOCOLS] for _ in range(runs)]


def table(results: list[list[GroupRun]], nodes: int) -> Table:
    result = Table(title=f"groups: {nodes} nodes, {MEMBERS} members, {PARTITIONS} partitions "
                         f"(median of {len(results)} run{'s' if len(results) > 1 else ''})")
    for column in ("figure", "unit", *PROTOCOLS, "consumer / classic"):
        result.add_column(column, justify="right")
    for what, attribute in (("join: every partition assigned and read", "join_s"),
                            ("a member leaves: its partitions read elsewhere", "leave_s")):
        medians = [statistics.median(getattr(run[i], attribute) for run in results) for i in range(len(PROTOCOLS))]
        result.add_row(what, "s", *(f"{m:.3f}" for m in medians), f"{medians[1] / medians[0]:.2f}x")
    return result


def main() -> None:
    from cluster.launch.cluster import Cluster

    parser = argparse.ArgumentParser(prog="python -m cluster.bench.groups", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with Cluster(nodes=args.nodes) as cluster:
        results = measure(cluster, args.runs)
    Console().print(table(results, args.nodes))


if __name__ == "__main__":
    main()
