"""How a cluster starts: nodes forked by the launcher's fork server, in the cluster's process group,
each its own process; a node that cannot start is reported with its reason, and nothing is left."""
from __future__ import annotations

import os

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from cluster.launch import Cluster, ClusterError, pid_alive


def test_every_node_is_its_own_process_in_the_cluster_group_and_restarts(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        pids = {node.pid for node in cluster.nodes.values()}
        assert len(pids | {cluster.controller_pid, os.getpid()}) == 5
        assert {os.getpgid(pid) for pid in pids} == {cluster.controller_pid}
        cluster.create_topic("started", partitions=1, replication_factor=3)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        producer.send("started", b"before").get(30)
        cluster.kill_node(1)
        # Another launcher, as `kraftwerk node restart 1` is, forks the node from a fork server of its own.
        Cluster.attach(cluster.data_dir).restart_node(1)
        producer.send("started", b"after").get(30)
        producer.close()
        restarted = Cluster.attach(cluster.data_dir).nodes[1]
        assert restarted.pid not in pids and os.getpgid(restarted.pid) == cluster.controller_pid
        consumer = KafkaConsumer(bootstrap_servers=f"{cluster.host}:{restarted.port}", consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("started", 0)])
        consumer.seek_to_beginning()
        assert [record.value for record in consumer] == [b"before", b"after"]
        consumer.close()


@pytest.mark.parametrize("node_config, reason", [
    ({"process.roles": "nonsense"}, "process.roles=nonsense: each role must be broker or controller (its log: "),
    ({"replica.fetch.wait.max.ms": "40000"},  # Kafka's check of the replica fetch timings
     "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms"),
])
def test_a_node_that_cannot_start_is_reported_with_its_reason_and_nothing_is_left(node_config, reason):
    cluster = Cluster(nodes=2, node_config=node_config)
    with pytest.raises(ClusterError) as refused:
        cluster.start()
    assert str(refused.value).startswith(f"node-1 exited before it was ready: cannot start: {reason}")
    assert not pid_alive(cluster.controller_pid)
    assert not cluster.data_dir.exists()
