"""Followers replicate through the Kafka Fetch API; the high watermark and acks=all follow the ISR."""
from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from cluster.launcher import Cluster

REQUEST_TIMED_OUT = 7


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as running:
        yield running


def partition_info(cluster, topic: str, partition: int) -> dict:
    return next(p for t in cluster.status()["topics"] if t["name"] == topic for p in t["partitions"]
                if p["partition"] == partition)


def segment_bytes(cluster, node_id: int, topic: str, partition: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def visible(cluster, topic: str, via: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{cluster.nodes[via].port}", consumer_timeout_ms=1500)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [record.value for record in consumer]
    finally:
        consumer.close()


def test_acks_all_writes_reach_every_replica_byte_for_byte(cluster):
    topic = f"replicated-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    for partition in range(3):
        info = partition_info(cluster, topic, partition)
        assert sorted(info["replicas"]) == [1, 2, 3] and sorted(info["isr"]) == [1, 2, 3]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", compression_type="gzip")
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(600)]
    producer.flush()
    producer.close()
    assert all(f.get().offset >= 0 for f in futures)
    for partition in range(3):
        copies = {n: segment_bytes(cluster, n, topic, partition) for n in (1, 2, 3)}
        assert len(set(copies.values())) == 1 and copies[1], f"replicas of partition {partition} differ"


def test_consumers_see_only_what_every_in_sync_replica_has(cluster):
    topic = f"watermark-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = partition_info(cluster, topic, 0)["leader"]
    follower = next(n for n in (1, 2, 3) if n != leader)
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{cluster.nodes[leader].port}", acks="all",
                             request_timeout_ms=3000,
                             retries=0)
    producer.send(topic, b"committed", partition=0).get(10)

    cluster.pause_node(follower)
    try:
        # The leader takes the write but cannot commit it while an in-sync follower lags.
        with pytest.raises(Exception) as failure:
            producer.send(topic, b"waiting", partition=0).get(10)
        assert getattr(failure.value, "errno", None) == REQUEST_TIMED_OUT
        assert visible(cluster, topic, via=leader) == [b"committed"]
    finally:
        cluster.resume_node(follower)
    producer.close()
    # Once the follower fetches again the high watermark moves and the write becomes visible.
    assert visible(cluster, topic, via=leader) == [b"committed", b"waiting"]
