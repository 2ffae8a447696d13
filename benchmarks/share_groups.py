"""Share-group throughput: `python -m benchmarks.share_groups [--messages N] [--consumers 4]`.

A 3-node cluster, a topic of --partitions partitions (RF 3) holding --messages records of
--size bytes, and --consumers confluent-kafka ShareConsumers of one share group (implicit
acknowledgement), each polling in a thread of its own until the group has received every record.
Prints messages per second from the first poll to the last record, and how the records were spread
over the consumers. Figures, not assertions: nothing else should run on the machine meanwhile.
"""
from __future__ import annotations

import argparse
import threading
import time

from confluent_kafka import Producer, ShareConsumer

from cluster.launch.cluster import Cluster

GROUP = "bench-share"
TOPIC = "bench-share"


def read_from_the_start(cluster) -> None:
    """The group reads each partition from its start (the group config share.auto.offset.reset)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entries = [ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, GROUP,
                                                                  incremental_configs=entries)]).values():
        future.result(30)


def produce(cluster, messages: int, size: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20, "acks": "all"})
    value = b"x" * size
    for index in range(messages):
        while True:
            try:
                producer.produce(TOPIC, value, partition=index % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


def consume(cluster, consumers: int, messages: int, timeout_s: float) -> tuple[float, list[int]]:
    counts = [0] * consumers
    lock = threading.Lock()
    done = threading.Event()
    started = time.monotonic()
    finished = [started]

    def run(index: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP})
        consumer.subscribe([TOPIC])
        try:
            while not done.is_set() and time.monotonic() - started < timeout_s:
                got = sum(1 for message in consumer.poll(0.2) if message.error() is None)
                with lock:
                    counts[index] += got
                    if sum(counts) >= messages and not done.is_set():
                        finished[0] = time.monotonic()
                        done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return finished[0] - started, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    with Cluster(nodes=3) as cluster:
        cluster.create_topic(TOPIC, partitions=args.partitions, replication_factor=3)
        assert cluster.wait_in_sync(TOPIC, timeout=60)
        read_from_the_start(cluster)
        produce(cluster, args.messages, args.size, args.partitions)
        seconds, counts = consume(cluster, args.consumers, args.messages, args.timeout)
    received = sum(counts)
    print(f"share group, {args.consumers} consumers, {args.partitions} partitions, {args.size}-byte records")
    print(f"  received {received} of {args.messages} in {seconds:.2f} s: {received / seconds:,.0f} msg/s")
    print(f"  per consumer: {counts}")


if __name__ == "__main__":
    main()
