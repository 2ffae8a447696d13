"""`kraftwerk bench --against-mock`'s security rows: what TLS and a SASL login cost a client.

Two clusters of the same size, one after the other: PLAINTEXT, and SASL_SSL with SCRAM-SHA-256
(the nodes replicating over it too). Each is measured with the same producer and consumer loops
(cluster.bench.clients) and with a connection's set-up: a fresh librdkafka client's first
Metadata answer, which takes a TCP connection, and on SASL_SSL a TLS handshake and a SCRAM login.
librdkafka's mock has no TLS listener, so these rows compare kraftwerk with itself.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

from rich.table import Table

from cluster.bench.clients import consume_confluent, produce_confluent
from cluster.launch.cluster import Cluster
from cluster.launch.security import Security

PARTITIONS = 4
CONNECTIONS = 20


@dataclass
class SecurityRow:
    what: str
    unit: str
    plaintext: float
    secured: float

    @property
    def ratio(self) -> float:
        return self.secured / self.plaintext if self.plaintext else 0.0


def _figures(cluster: Cluster, replication_factor: int, messages: int, value_size: int) -> dict[str, float]:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    config = cluster.client_config()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **config})
    admin.create_topics([NewTopic("bench-security", PARTITIONS, replication_factor)])["bench-security"].result(30)
    produced = produce_confluent(confluent_kafka, cluster.bootstrap_servers, "bench-security", messages,
                                 os.urandom(value_size), "all", config)
    consumed = consume_confluent(confluent_kafka, cluster.bootstrap_servers, "bench-security", PARTITIONS, messages,
                                 config)
    return {"confluent producer acks=all": messages / produced, "confluent consumer": messages / consumed,
            "connection set-up, median": _connection_setup_ms(confluent_kafka, cluster.bootstrap_servers, config)}


def _connection_setup_ms(confluent_kafka, bootstrap: str, config: dict) -> float:
    """Median ms from a new client to its first Metadata answer (one node asked)."""
    first = bootstrap.split(",")[0]
    times = []
    for _ in range(CONNECTIONS):
        started = time.perf_counter()
        client = confluent_kafka.admin.AdminClient({"bootstrap.servers": first, **config})
        client.list_topics(timeout=10)
        times.append((time.perf_counter() - started) * 1000)
        del client
    return statistics.median(times)


UNITS = {"confluent producer acks=all": "msg/s", "confluent consumer": "msg/s",
         "connection set-up, median": "ms (lower is better)"}


def measure(nodes: int, replication_factor: int, messages: int, value_size: int = 100) -> list[SecurityRow]:
    with Cluster(nodes=nodes) as cluster:
        plaintext = _figures(cluster, replication_factor, messages, value_size)
    with Cluster(nodes=nodes, security=Security.of("SASL_SSL", "SCRAM-SHA-256")) as cluster:
        secured = _figures(cluster, replication_factor, messages, value_size)
    return [SecurityRow(what, UNITS[what], plaintext[what], secured[what]) for what in plaintext]


def table(rows: list[SecurityRow], nodes: int, replication_factor: int, messages: int) -> Table:
    result = Table(title=f"SASL_SSL (SCRAM-SHA-256) beside PLAINTEXT: {nodes} nodes, RF={replication_factor}, "
                         f"{PARTITIONS} partitions, {messages:,} x 100 B values")
    for column in ("figure", "unit", "PLAINTEXT", "SASL_SSL", "SASL_SSL / PLAINTEXT"):
        result.add_column(column, justify="right")
    for row in rows:
        shown = (lambda v: f"{v:,.0f}") if row.unit == "msg/s" else (lambda v: f"{v:.1f}")
        result.add_row(row.what, row.unit, shown(row.plaintext), shown(row.secured), f"{row.ratio:.2f}x")
    return result


def main(argv: list[str] | None = None) -> None:
    """Only the security rows: `python -m cluster.bench.security [--nodes 3] [--messages 200000]`."""
    import argparse

    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args(argv)
    rows = measure(args.nodes, args.replication_factor, args.messages)
    Console().print(table(rows, args.nodes, args.replication_factor, args.messages))


if __name__ == "__main__":
    main()
