"""How a node copes with a large topic created at once: `python -m benchmarks.large_topic`.

Starts a cluster of --nodes nodes (free ports, temporary data dir), arms each node's event-loop
stall probe, creates one topic of --partitions partitions with --replication-factor replicas
through kafka-python's admin client, and prints: how long CreateTopics took to answer, how long
until every node had opened the log of every replica it hosts, how long until an acks=all write
to each of a few partitions was acknowledged, each node's longest event-loop stall meanwhile,
and every fence the controller logged. Figures, not pass/fail.
"""
from __future__ import annotations

import argparse
import time

from cluster.launch.cluster import Cluster

SAMPLED_PARTITIONS = 8
READY_TIMEOUT_S = 600


def open_replicas(cluster: Cluster, topic: str) -> dict[int, int]:
    """Per node, how many logs of the topic it has open."""
    return {node_id: sum(p["topic"] == topic for p in state["partitions"])
            for node_id, state in cluster.replica_states(timeout=30).items()}


def produce_to_samples(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=1000, request_timeout_ms=60_000,
                             retry_backoff_ms=50)
    try:
        sampled = sorted({round(i * (partitions - 1) / (SAMPLED_PARTITIONS - 1)) for i in range(SAMPLED_PARTITIONS)})
        for future in [producer.send(topic, b"probe", partition=p) for p in sampled]:
            future.get(timeout=120)
    finally:
        producer.close()


def fences_logged(cluster: Cluster) -> list[str]:
    log_text = (cluster.data_dir / "logs" / "controller.log").read_text(errors="replace")
    return [line for line in log_text.splitlines() if "fencing it" in line]


def run(nodes: int, partitions: int, replication_factor: int, session_timeout_ms: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topic = "large"
    with Cluster(nodes=nodes, node_config={"broker.session.timeout.ms": str(session_timeout_ms)},
                 startup_timeout=READY_TIMEOUT_S) as cluster:
        for node_id in cluster.nodes:
            cluster.node_control(node_id, "stall_probe", action="start")
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=300_000)
        started = time.monotonic()
        admin.create_topics([NewTopic(topic, partitions, replication_factor)], timeout_ms=300_000)
        answered = time.monotonic() - started
        admin.close()
        cluster.wait_ready()  # every node has applied the topic's records: its logs are open
        opened = time.monotonic() - started
        counts = open_replicas(cluster, topic)
        produce_to_samples(cluster.bootstrap_servers, topic, partitions)
        usable = time.monotonic() - started
        stalls = {node_id: cluster.node_control(node_id, "stall_probe", action="stop", timeout=30)
                  for node_id in cluster.nodes}
        fences = fences_logged(cluster)
    print(f"a topic of {partitions} partitions x {replication_factor} replicas on {nodes} nodes "
          f"(broker.session.timeout.ms={session_timeout_ms}):")
    print(f"  CreateTopics answered after {answered:6.2f} s")
    print(f"  every replica's log open after {opened:6.2f} s ({counts})")
    print(f"  acks=all writes to {SAMPLED_PARTITIONS} partitions acknowledged after {usable:6.2f} s")
    for node_id, stall in sorted(stalls.items()):
        print(f"  node {node_id}: longest event-loop stall {stall['longest_stall_ms']:8.1f} ms "
              f"({stall['longest_stall_cpu_ms']:.1f} ms of CPU)")
    print(f"  fences in the controller's log: {len(fences)}")
    for line in fences:
        print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.large_topic", description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=2000)
    args = parser.parse_args()
    run(args.nodes, args.partitions, args.replication_factor, args.session_timeout_ms)


if __name__ == "__main__":
    main()
