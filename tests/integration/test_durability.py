"""Data survives a full stop/start of the cluster and a kill -9 of a node in mid-produce."""
from __future__ import annotations

import threading
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from cluster.launch import Cluster
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import iter_batch_headers


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=4000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        return sorted((r.partition, r.offset, r.key, r.value) for r in consumer)
    finally:
        consumer.close()


def topic_ids(bootstrap: str) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {t["name"]: t["topic_id"] for t in admin.describe_topics()}
    finally:
        admin.close()


def test_down_and_up_keep_topics_ids_and_messages(tmp_path):
    data_dir = tmp_path / "cluster"
    with Cluster(nodes=3, data_dir=data_dir) as cluster:
        for name, partitions in (("orders", 6), ("events", 2)):
            cluster.create_topic(name, partitions=partitions)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for i in range(300):
            producer.send("orders", key=f"k{i}".encode(), value=f"order {i}".encode())
            producer.send("events", key=None, value=f"event {i}".encode(), partition=i % 2)
        producer.flush()
        producer.close()
        before = {t: read_all(cluster.bootstrap_servers, t, n) for t, n in (("orders", 6), ("events", 2))}
        ids_before = topic_ids(cluster.bootstrap_servers)
    assert len(before["orders"]) == 300 and len(before["events"]) == 300

    with Cluster(nodes=3, data_dir=data_dir) as cluster:
        assert topic_ids(cluster.bootstrap_servers) == ids_before
        after = {t: read_all(cluster.bootstrap_servers, t, n) for t, n in (("orders", 6), ("events", 2))}
    assert after == before


def test_kill_minus_nine_mid_produce_keeps_every_acknowledged_message(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        topic = f"crash-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=3)
        victim = cluster.status()
        leader_of = {p["partition"]: p["leader"] for t in victim["topics"] if t["name"] == topic for p in t["partitions"]}
        victim_node = leader_of[0]

        acknowledged: list[tuple[int, int, bytes]] = []
        stop = threading.Event()

        def produce():
            # Batches for the dead leader expire after delivery_timeout_ms, so close() can finish: a
            # producer whose close times out is left running, retrying the dead node for the rest of the run.
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=2,
                                     retries=0, request_timeout_ms=3000, max_block_ms=3000,
                                     delivery_timeout_ms=5000)
            i = 0
            while not stop.is_set():
                value = f"m{i}".encode()
                future = producer.send(topic, value=value, partition=0)
                future.add_callback(lambda meta, v=value: acknowledged.append((meta.partition, meta.offset, v)))
                future.add_errback(lambda exc: None)
                i += 1
                if i % 50 == 0:
                    try:
                        producer.flush(timeout=3)
                    except KafkaError:
                        pass  # the leader is gone: unacknowledged messages are expected
            producer.close(timeout=10)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            while len(acknowledged) < 500:
                threading.Event().wait(0.05)
            cluster.kill_node(victim_node)
        finally:
            stop.set()
            thread.join(30)

        partition_dir = cluster.nodes[victim_node].data_dir / f"{topic}-0"
        cluster.restart_node(victim_node)
        readable = {(p, o): v for p, o, _, v in read_all(cluster.bootstrap_servers, topic, 1)}

    assert acknowledged, "the producer never got an acknowledgement"
    for partition, offset, value in acknowledged:
        assert readable.get((partition, offset)) == value, (partition, offset)
    # The segment on disk ends on a whole batch after recovery.
    segment = sorted(partition_dir.glob("*.log"))[-1].read_bytes()
    end = 0
    for position, header in iter_batch_headers(segment):
        end = position + header.size
    assert end == len(segment)
    assert PartitionLog(partition_dir).log_end_offset == max(o for _, o in readable) + 1
