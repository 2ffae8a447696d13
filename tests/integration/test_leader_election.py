"""Preferred leaders come back on their own, and on request through ElectLeaders."""
from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import ElectionType, TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from cluster.launch import Cluster
from tests.integration.wire import exchange

ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80
FENCED_LEADER_EPOCH = 74
NOT_LEADER_OR_FOLLOWER = 6


def partitions_of(cluster, topic: str) -> list[dict]:
    return next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"]


def wait_until(condition, timeout: float = 30) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "condition not reached in time"
        time.sleep(0.05)
    return time.monotonic() - started


def test_preferred_leaders_return_after_a_node_comes_back(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster",
                 node_config={"leader.imbalance.check.interval.seconds": "1"}) as cluster:
        cluster.create_topic("balanced", partitions=6, replication_factor=3)
        assert all(p["leader"] == p["replicas"][0] for p in partitions_of(cluster, "balanced"))
        cluster.kill_node(1)
        assert all(p["leader"] != 1 for p in partitions_of(cluster, "balanced"))
        cluster.restart_node(1)
        took = wait_until(lambda: all(p["leader"] == p["replicas"][0] for p in partitions_of(cluster, "balanced")))
        print(f"\npreferred leaders back {took:.2f}s after node 1 restarted")
        assert sum(p["leader"] == 1 for p in partitions_of(cluster, "balanced")) == 2


@pytest.fixture(scope="module")
def unbalanced(tmp_path_factory):
    """Node 1 stopped and started again with automatic rebalancing off: it leads nothing."""
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("unbalanced"),
                 node_config={"auto.leader.rebalance.enable": "false"}) as cluster:
        yield cluster


def demote_node_1(cluster, topic: str) -> list[dict]:
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    cluster.stop_node(1)
    cluster.restart_node(1)
    assert cluster.wait_in_sync(topic)
    partitions = partitions_of(cluster, topic)
    assert [p["partition"] for p in partitions if p["replicas"][0] == 1] and all(p["leader"] != 1 for p in partitions)
    return partitions


def test_elect_leaders_through_kafka_python(unbalanced):
    before = demote_node_1(unbalanced, "elect-kp")
    admin = KafkaAdminClient(bootstrap_servers=unbalanced.bootstrap_servers)
    try:
        response = admin.elect_leaders(0, {"elect-kp": [0, 1, 2]})
    finally:
        admin.close()
    codes = {r.partition_id: r.error_code for t in response.replica_election_results for r in t.partition_result}
    expected = {p["partition"]: 0 if p["replicas"][0] == 1 else ELECTION_NOT_NEEDED for p in before}
    assert codes == expected
    assert all(p["leader"] == p["replicas"][0] for p in partitions_of(unbalanced, "elect-kp"))


def test_elect_leaders_through_confluent_kafka(unbalanced):
    before = demote_node_1(unbalanced, "elect-ck")
    admin = AdminClient({"bootstrap.servers": unbalanced.bootstrap_servers})
    results = admin.elect_leaders(ElectionType.PREFERRED, [ConfluentPartition("elect-ck", p) for p in range(3)]
                                  ).result(30)
    codes = {tp.partition: (error.code() if error else 0) for tp, error in results.items()}
    assert codes == {p["partition"]: 0 if p["replicas"][0] == 1 else ELECTION_NOT_NEEDED for p in before}
    assert all(p["leader"] == p["replicas"][0] for p in partitions_of(unbalanced, "elect-ck"))

    # A preferred replica that is down cannot be elected.
    moved = next(p["partition"] for p in before if p["replicas"][0] == 1)
    unbalanced.kill_node(1)
    try:
        results = admin.elect_leaders(ElectionType.PREFERRED, [ConfluentPartition("elect-ck", moved)]).result(30)
        (error,) = results.values()
        assert error is not None and error.code() == PREFERRED_LEADER_NOT_AVAILABLE
    finally:
        unbalanced.restart_node(1)


def test_offset_for_leader_epoch_gives_where_each_epoch_ends(unbalanced):
    unbalanced.create_topic("epochs", partitions=1, replication_factor=3)
    unbalanced.wait_in_sync("epochs")
    producer = KafkaProducer(bootstrap_servers=unbalanced.bootstrap_servers, acks="all")
    for i in range(3):
        producer.send("epochs", b"epoch 0", partition=0).get(10)
    leader = partitions_of(unbalanced, "epochs")[0]["leader"]
    unbalanced.stop_node(leader)  # leadership moves: epoch 1 starts at offset 3
    new_leader = partitions_of(unbalanced, "epochs")[0]["leader"]
    producer.send("epochs", b"epoch 1", partition=0).get(30)
    producer.close()

    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic

    def ask(epoch: int, current: int = -1):
        request = OffsetForLeaderEpochRequest[4](replica_id=-1, topics=[T(topic="epochs", partitions=[
            T.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
        with socket.create_connection((unbalanced.host, unbalanced.nodes[new_leader].port), timeout=10) as sock:
            result = exchange(sock, request, OffsetForLeaderEpochResponse, 4).topics[0].partitions[0]
        return result.error_code, result.leader_epoch, result.end_offset

    try:
        assert ask(0) == (0, 0, 3)
        assert ask(1) == (0, 1, 4)
        assert ask(0, current=0)[0] == FENCED_LEADER_EPOCH
    finally:
        unbalanced.restart_node(leader)


def test_fetch_with_an_old_leader_epoch_is_told_who_leads_now(unbalanced):
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    from cluster.formats.topic_ids import topic_id_from_kafka_string

    unbalanced.create_topic("moved", partitions=1, replication_factor=2)
    unbalanced.wait_in_sync("moved")
    before = partitions_of(unbalanced, "moved")[0]
    unbalanced.stop_node(before["leader"])
    try:
        now = partitions_of(unbalanced, "moved")[0]
        assert now["leader_epoch"] > before["leader_epoch"]
        topic_id = topic_id_from_kafka_string(
            next(t["topic_id"] for t in unbalanced.status()["topics"] if t["name"] == "moved"))
        Topic = FetchRequest.FetchTopic

        def fetch(node_id: int):
            request = FetchRequest[16](
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[Topic(topic_id=topic_id, partitions=[
                    Topic.FetchPartition(partition=0, current_leader_epoch=before["leader_epoch"], fetch_offset=0,
                                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])])
            with socket.create_connection((unbalanced.host, unbalanced.nodes[node_id].port), timeout=10) as sock:
                response = exchange(sock, request, FetchResponse, 16)
            data = response.responses[0].partitions[0]
            return data.error_code, (data.current_leader.leader_id, data.current_leader.leader_epoch), \
                sorted(e.node_id for e in response.node_endpoints)

        # The new leader: fenced epoch, and here is who leads at which epoch, with its address.
        assert fetch(now["leader"]) == (FENCED_LEADER_EPOCH, (now["leader"], now["leader_epoch"]), [now["leader"]])
        # A node that holds no replica says so, whatever epoch the client names.
        outsider = next(n for n in unbalanced.nodes if n not in now["replicas"])
        assert fetch(outsider)[0] == NOT_LEADER_OR_FOLLOWER
    finally:
        unbalanced.restart_node(before["leader"])
