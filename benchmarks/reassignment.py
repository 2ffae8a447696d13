"""How long moving a large partition takes, throttled and not: `python -m benchmarks.reassignment`.

Starts a 3-node cluster on free ports, writes --size-mb of data to a one-replica partition on
node 1, then moves it to node 2 under a --rate throttle (Kafka's --throttle: leader and
follower rates, and the moving replicas listed as throttled) while a producer keeps writing
about 1 MB/s, and moves it on to node 3 without a throttle. Prints each move's time and rate.
"""
from __future__ import annotations

import argparse
import threading
import time

from confluent_kafka import Producer

from cluster.launch.cluster import Cluster

TOPIC = "bulk"
VALUE_SIZE = 10_000
BACKGROUND_BYTES_PER_S = 1_000_000


def fill(bootstrap: str, megabytes: int) -> int:
    """Write about megabytes of data to partition 0; returns the bytes acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1 << 20})
    value = b"x" * VALUE_SIZE
    for _ in range(megabytes * 1_000_000 // VALUE_SIZE):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    return megabytes * 1_000_000 // VALUE_SIZE * VALUE_SIZE


def keep_writing(bootstrap: str, stop: threading.Event) -> None:
    """About BACKGROUND_BYTES_PER_S of writes, so that a move runs under produce traffic."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20})
    value = b"y" * VALUE_SIZE
    while not stop.wait(VALUE_SIZE / BACKGROUND_BYTES_PER_S):
        producer.produce(TOPIC, value, partition=0)
        producer.poll(0)
    producer.flush(30)


def timed_move(cluster: Cluster, replicas: list[int], rate: int | None) -> float:
    started = time.monotonic()
    refused = cluster.reassign({(TOPIC, 0): replicas}, throttle_bytes_per_s=rate)
    if refused[(TOPIC, 0)]:
        raise SystemExit(f"the move to {replicas} was refused: {refused[(TOPIC, 0)]}")
    if not cluster.wait_reassigned([(TOPIC, 0)], timeout=600):
        raise SystemExit(f"the move to {replicas} did not complete in 600 s")
    took = time.monotonic() - started
    if rate is not None:
        cluster.clear_throttles()
    return took


def run(size_mb: int, rate: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    with Cluster(nodes=3) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        admin.create_topics([NewTopic(TOPIC, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1]})])
        admin.close()
        written = fill(cluster.bootstrap_servers, size_mb)
        print(f"partition {TOPIC}-0 on node 1: {written / 1e6:.0f} MB")
        stop = threading.Event()
        writer = threading.Thread(target=keep_writing, args=(cluster.bootstrap_servers, stop), daemon=True)
        writer.start()
        try:
            throttled = timed_move(cluster, [2], rate)
            print(f"node 1 -> node 2, throttled at {rate / 1e6:.1f} MB/s ({rate} bytes/s), produce going on: "
                  f"{throttled:.1f} s ({written / throttled / 1e6:.1f} MB/s; expected {written / rate:.1f} s)")
            unthrottled = timed_move(cluster, [3], None)
            print(f"node 2 -> node 3, unthrottled, produce going on: {unthrottled:.1f} s "
                  f"({written / unthrottled / 1e6:.1f} MB/s)")
        finally:
            stop.set()
            writer.join()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reassignment", description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="data in the partition moved [200]")
    parser.add_argument("--rate", type=int, default=20 * 1024 * 1024,
                        help="leader and follower replication throttle, bytes/s [20971520]")
    args = parser.parse_args()
    run(args.size_mb, args.rate)


if __name__ == "__main__":
    main()
