"""Followers replicate through the Kafka Fetch API; the high watermark and acks=all follow the ISR."""
from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaProducer

from cluster.launch import Cluster
from tests.integration.wire import fetch_values

REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19


@pytest.fixture(scope="module")
def cluster():
    # A long session so that a paused node stays in the ISR (it is not fenced) during a test.
    with Cluster(nodes=3, node_config={"broker.session.timeout.ms": "30000"}) as running:
        yield running


def partition_info(cluster, topic: str, partition: int) -> dict:
    return next(p for t in cluster.status()["topics"] if t["name"] == topic for p in t["partitions"]
                if p["partition"] == partition)


def segment_bytes(cluster, node_id: int, topic: str, partition: int) -> bytes:
    directory = cluster.nodes[node_id].data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def visible(cluster, topic: str, via: int) -> list[bytes]:
    return fetch_values((cluster.host, cluster.nodes[via].port), topic)


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
    address = (cluster.host, cluster.nodes[leader].port)
    assert fetch_values(address, topic, offset=1, wait_ms=10_000) == [b"waiting"]
    assert visible(cluster, topic, via=leader) == [b"committed", b"waiting"]


def test_killing_the_leader_loses_no_acknowledged_write_and_it_rejoins(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as running:
        topic = "failover"
        running.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        old_leader = partition_info(running, topic, 0)["leader"]
        producer = KafkaProducer(bootstrap_servers=running.bootstrap_servers, acks="all", retries=10,
                                 enable_idempotence=False, request_timeout_ms=5000, retry_backoff_ms=200)
        acknowledged, failed = [], []

        def send(i):
            future = producer.send(topic, f"m{i}".encode(), partition=0)
            future.add_callback(lambda meta, i=i: acknowledged.append(i))
            future.add_errback(lambda exc, i=i: failed.append(i))

        for i in range(200):
            send(i)
        producer.flush()
        killed_at = time.monotonic()
        running.kill_node(old_leader)
        for i in range(200, 400):
            send(i)
        producer.flush()
        resumed_after = time.monotonic() - killed_at
        producer.close()

        info = partition_info(running, topic, 0)
        assert info["leader"] not in (old_leader, -1)
        assert old_leader not in info["isr"]
        new_leader = info["leader"]
        values = visible(running, topic, via=new_leader)
        numbers = [int(v[1:]) for v in values]
        assert set(acknowledged) <= set(numbers), "an acknowledged write was lost"
        duplicates = len(numbers) - len(set(numbers))
        print(f"writes resumed {resumed_after:.2f}s after kill -9; {len(failed)} failed, "
              f"{duplicates} duplicated by client retries")

        running.restart_node(old_leader)
        deadline = time.monotonic() + 20
        while old_leader not in partition_info(running, topic, 0)["isr"] and time.monotonic() < deadline:
            time.sleep(0.1)  # waiting for the controller to take it back into the ISR
        assert old_leader in partition_info(running, topic, 0)["isr"]
        assert segment_bytes(running, old_leader, topic, 0) == segment_bytes(running, new_leader, topic, 0)


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1():
    with Cluster(nodes=3) as running:
        topic = "min-isr"
        running.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        leader = partition_info(running, topic, 0)["leader"]
        followers = [n for n in (1, 2, 3) if n != leader]
        for follower in followers:
            running.kill_node(follower)
        deadline = time.monotonic() + 20
        while partition_info(running, topic, 0)["isr"] != [leader] and time.monotonic() < deadline:
            time.sleep(0.1)  # waiting for the controller to fence them and shrink the ISR
        assert partition_info(running, topic, 0)["isr"] == [leader]
        bootstrap = f"127.0.0.1:{running.nodes[leader].port}"
        strict = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
        with pytest.raises(Exception) as refused:
            strict.send(topic, b"needs two copies", partition=0).get(10)
        assert getattr(refused.value, "errno", None) == NOT_ENOUGH_REPLICAS
        strict.close()
        relaxed = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
        assert relaxed.send(topic, b"one copy is enough", partition=0).get(10).offset == 0
        relaxed.close()
        # Acknowledged, but not committed while the ISR is under min.insync.replicas (Kafka 3.7+):
        # consumers see it once a second replica has it.
        assert visible(running, topic, via=leader) == []
        running.restart_node(followers[0])
        assert fetch_values((running.host, running.nodes[leader].port), topic, wait_ms=10000) == \
            [b"one copy is enough"]

        # min.insync.replicas above the replication factor counts as the replication factor.
        single = "min-isr-single-copy"
        running.create_topic(single, partitions=1, replication_factor=1, config={"min.insync.replicas": "2"})
        single_leader = partition_info(running, single, 0)["leader"]
        strict = KafkaProducer(bootstrap_servers=f"127.0.0.1:{running.nodes[single_leader].port}", acks="all")
        assert strict.send(single, b"the only copy", partition=0).get(10).offset == 0
        strict.close()


def test_graceful_stop_moves_leadership_before_the_node_exits(cluster):
    topic = f"handover-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = partition_info(cluster, topic, 0)["leader"]
    cluster.stop_node(leader)
    try:
        info = partition_info(cluster, topic, 0)  # right away: no session timeout was waited for
        assert info["leader"] not in (leader, -1) and leader not in info["isr"]
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{cluster.nodes[info['leader']].port}", acks="all",
                                 retries=0)
        assert producer.send(topic, b"after the handover", partition=0).get(10).offset == 0
        producer.close()
    finally:
        cluster.restart_node(leader)


def test_a_follower_that_retention_left_behind_starts_over_at_the_leaders_log_start(tmp_path):
    config = {"log.retention.check.interval.ms": "200"}
    with Cluster(nodes=2, data_dir=tmp_path / "cluster", node_config=config) as cluster:
        topic = f"retained-{uuid.uuid4().hex[:6]}"
        # Small segments and a small byte budget: retention soon deletes what the follower lacks.
        cluster.create_topic(topic, partitions=1, replication_factor=2,
                             config={"segment.bytes": "1024", "retention.bytes": "2048"})
        assert cluster.wait_in_sync(topic)
        leader = partition_info(cluster, topic, 0)["leader"]
        follower = 3 - leader
        cluster.kill_node(follower)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=0)
        for i in range(200):
            producer.send(topic, f"message {i:03d} ".encode() * 4, partition=0).get(10)
        producer.close()
        leader_dir = cluster.nodes[leader].data_dir / f"{topic}-0"
        deadline = time.monotonic() + 20
        while (first := int(sorted(leader_dir.glob("*.log"))[0].stem)) == 0:  # retention has not run yet
            assert time.monotonic() < deadline, "the leader never deleted its first segment"
            time.sleep(0.1)

        cluster.restart_node(follower)
        assert cluster.wait_in_sync(topic)  # it caught up from the leader's log start and rejoined
        states = {node: next(p for p in state["partitions"] if p["topic"] == topic)
                  for node, state in cluster.replica_states().items()}
        assert states[follower]["log_start_offset"] >= first
        assert states[follower]["log_end_offset"] == states[leader]["log_end_offset"] == 200
        now_leading = partition_info(cluster, topic, 0)["leader"]
        assert fetch_values((cluster.host, cluster.nodes[now_leading].port), topic, offset=199) == \
            [b"message 199 " * 4]


def test_a_replica_back_alone_under_min_isr_still_serves_what_was_committed(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        topic = f"alone-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        assert cluster.wait_in_sync(topic)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        committed = [f"committed {i}".encode() for i in range(3)]
        for value in committed:
            producer.send(topic, value, partition=0).get(10)
        producer.close()
        leader = partition_info(cluster, topic, 0)["leader"]
        for follower in (n for n in cluster.nodes if n != leader):
            cluster.kill_node(follower)
        cluster.stop_node(leader)  # the last replica in the ISR: the partition has no leader now
        cluster.restart_node(leader)
        state = partition_info(cluster, topic, 0)
        assert (state["leader"], state["isr"]) == (leader, [leader])  # alone, under min.insync.replicas
        # Nothing new can commit, but what was committed before is still served, from the checkpoint.
        assert visible(cluster, topic, via=leader) == committed
