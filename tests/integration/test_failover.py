"""kill -9 of a partition leader while kafka-python and confluent-kafka write with acks=all."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaProducer

from cluster.launch import Cluster
from tests.integration.messages import read_partition

TOPIC = "kill-under-load"
SEND_INTERVAL_S = 0.005


@dataclass
class Writer:
    """Numbered writes from one client: when each was sent and, if it was, acknowledged."""

    name: str
    sent_at: dict[int, float] = field(default_factory=dict)
    acked_at: dict[int, float] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    progress: threading.Condition = field(default_factory=threading.Condition)

    def value(self, number: int) -> bytes:
        return f"{self.name}-{number}".encode()

    def acknowledged(self, number: int) -> None:
        with self.progress:
            self.acked_at[number] = time.monotonic()
            self.progress.notify_all()

    def wait_for(self, predicate, timeout: float) -> bool:
        with self.progress:
            return self.progress.wait_for(predicate, timeout)

    def first_write_sent_after(self, moment: float) -> float | None:
        """Seconds from moment until the first write sent after it was acknowledged."""
        acked = [self.acked_at[n] for n, sent in self.sent_at.items() if sent >= moment and n in self.acked_at]
        return min(acked) - moment if acked else None


def write_with_kafka_python(writer: Writer, bootstrap: str, stop: threading.Event) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, retries=20,
                             retry_backoff_ms=100, request_timeout_ms=5000, linger_ms=2)
    number = 0
    while not stop.is_set():
        future = producer.send(TOPIC, writer.value(number), partition=0)
        writer.sent_at[number] = time.monotonic()
        future.add_callback(lambda _, n=number: writer.acknowledged(n))
        future.add_errback(lambda exc, n=number: writer.failed.__setitem__(n, repr(exc)))
        number += 1
        stop.wait(SEND_INTERVAL_S)  # the writers' pace, not a wait for an event
    producer.flush()
    producer.close()


def write_with_confluent_kafka(writer: Writer, bootstrap: str, stop: threading.Event) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                                  "retries": 20, "retry.backoff.ms": 100, "request.timeout.ms": 5000,
                                  "linger.ms": 2, "topic.metadata.refresh.interval.ms": 1000})

    def delivered(error, message) -> None:
        number = int(message.value().decode().rsplit("-", 1)[1])
        if error is None:
            writer.acknowledged(number)
        else:
            writer.failed[number] = str(error)

    number = 0
    while not stop.is_set():
        writer.sent_at[number] = time.monotonic()
        producer.produce(TOPIC, writer.value(number), partition=0, on_delivery=delivered)
        producer.poll(0)
        number += 1
        stop.wait(SEND_INTERVAL_S)
    producer.flush(30)


def leader_of(cluster) -> int:
    return next(t for t in cluster.status()["topics"] if t["name"] == TOPIC)["partitions"][0]["leader"]


@pytest.mark.timeout(180)
def test_kill_9_of_the_leader_loses_no_acknowledged_write_of_either_client(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        writers = [Writer("kafka-python"), Writer("confluent-kafka")]
        stop = threading.Event()
        threads = [threading.Thread(target=write, args=(writer, cluster.bootstrap_servers, stop))
                   for write, writer in zip((write_with_kafka_python, write_with_confluent_kafka), writers)]
        for thread in threads:
            thread.start()
        try:
            for writer in writers:
                assert writer.wait_for(lambda w=writer: len(w.acked_at) >= 100, 30), f"{writer.name} never got going"
            old_leader = leader_of(cluster)
            killed_at = time.monotonic()
            cluster.kill_node(old_leader)
            for writer in writers:
                assert writer.wait_for(lambda w=writer: w.first_write_sent_after(killed_at) is not None, 60), \
                    f"{writer.name} never wrote again after the leader was killed"
            stop.wait(1.0)  # a little more traffic on the new leader
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        new_leader = leader_of(cluster)
        assert new_leader not in (old_leader, -1)
        log = read_partition(cluster.bootstrap_servers, TOPIC)

        print(f"\nkill -9 of leader {old_leader}; node {new_leader} took over")
        copies = Counter(log)
        for writer in writers:
            acked = {writer.value(n) for n in writer.acked_at}
            lost = sorted(acked - set(copies))
            duplicated = sorted(v for v in copies if copies[v] > 1 and v.startswith(writer.name.encode()))
            print(f"{writer.name}: {len(writer.sent_at)} sent, {len(acked)} acknowledged, {len(writer.failed)} failed, "
                  f"writes resumed {writer.first_write_sent_after(killed_at):.2f}s after the kill, "
                  f"{len(duplicated)} written twice")
            assert not lost, f"{writer.name}: acknowledged writes missing from the log: {lost[:10]}"
            # Without idempotence a duplicate is a retry of a batch the old leader had already
            # replicated when it died, before it could answer: Kafka writes such a batch twice too.
            assert all(copies[v] == 2 for v in duplicated), "a write appears more than twice"

        cluster.restart_node(old_leader)
        deadline = time.monotonic() + 30
        while old_leader not in next(t for t in cluster.status()["topics"]
                                     if t["name"] == TOPIC)["partitions"][0]["isr"]:
            assert time.monotonic() < deadline, "the restarted node never rejoined the ISR"
            time.sleep(0.1)
        assert segment_bytes(cluster, old_leader) == segment_bytes(cluster, new_leader)


def segment_bytes(cluster, node_id: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{TOPIC}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
