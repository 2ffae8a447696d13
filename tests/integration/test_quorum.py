"""DescribeQuorum through the nodes, and `kraftwerk quorum describe`: kafka-python's
describe_metadata_quorum and raw requests of each version against a real 3-node cluster."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse

from tests.integration.wire import exchange_once

CONTROLLER_ID = 0  # the launcher's controller formats its log dir as node 0


def describe(cluster) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        [topic] = admin.describe_metadata_quorum()["topics"]
    finally:
        admin.close()
    assert topic["topic_name"] == "__cluster_metadata"
    [partition] = topic["partitions"]
    return partition


def caught_up(cluster, timeout_s: float = 10) -> dict:
    """The quorum once every observer reports the high watermark applied."""
    deadline = time.monotonic() + timeout_s
    while True:
        partition = describe(cluster)
        if all(o["log_end_offset"] == partition["high_watermark"] for o in partition["observers"]):
            return partition
        assert time.monotonic() < deadline, partition
        time.sleep(0.2)


@pytest.mark.kraftwerk(nodes=3)
def test_the_controller_leads_and_votes_and_the_nodes_observe_the_metadata_log(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    before = caught_up(cluster)
    assert before["error"] is None
    assert (before["leader_id"], before["leader_epoch"]) == (CONTROLLER_ID, 1)
    [voter] = before["current_voters"]
    assert voter["replica_id"] == CONTROLLER_ID and voter["log_end_offset"] == before["high_watermark"]
    assert [o["replica_id"] for o in before["observers"]] == [1, 2, 3]
    now_ms = time.time() * 1000
    assert all(now_ms - 10_000 < o["last_fetch_timestamp"] <= now_ms + 1000 for o in before["observers"])

    cluster.create_topic("quorum-grows", partitions=3, replication_factor=3)  # a TopicRecord, 3 PartitionRecords
    after = caught_up(cluster)
    assert after["high_watermark"] >= before["high_watermark"] + 4
    assert after["current_voters"][0]["log_end_offset"] == after["high_watermark"]


@pytest.mark.kraftwerk(nodes=1)
def test_each_version_answers_and_other_partitions_are_unknown(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    address = ("127.0.0.1", cluster.nodes[1].port)
    for version in (0, 1, 2):
        T = DescribeQuorumRequest[version].TopicData
        asked = DescribeQuorumRequest[version](topics=[T(topic_name="__cluster_metadata",
                                                          partitions=[T.PartitionData(partition_index=0)])])
        answer = exchange_once(address, asked, DescribeQuorumResponse, version)
        [partition] = answer.topics[0].partitions
        assert (answer.error_code, partition.error_code, partition.leader_id) == (0, 0, CONTROLLER_ID)
        assert [v.replica_id for v in partition.current_voters] == [CONTROLLER_ID]
        if version >= 2:
            [node] = answer.nodes
            assert (node.node_id, [(lst.name, lst.port) for lst in node.listeners]) == \
                (CONTROLLER_ID, [("CONTROLLER", cluster.controller_port)])

    T = DescribeQuorumRequest[2].TopicData
    elsewhere = DescribeQuorumRequest[2](topics=[
        T(topic_name="__cluster_metadata", partitions=[T.PartitionData(partition_index=1)]),
        T(topic_name="orders", partitions=[T.PartitionData(partition_index=0)])])
    answer = exchange_once(address, elsewhere, DescribeQuorumResponse, 2)
    assert [(t.topic_name, [(p.partition_index, p.error_code, p.leader_id) for p in t.partitions])
            for t in answer.topics] == [("__cluster_metadata", [(1, 3, -1)]), ("orders", [(0, 3, -1)])]


@pytest.mark.kraftwerk(nodes=2)
def test_kraftwerk_quorum_describe_prints_what_kafka_metadata_quorum_prints(kraftwerk_cluster):
    cluster = kraftwerk_cluster

    def quorum(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "cluster.cli", "quorum", "describe", *args,
                               "--data-dir", str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    caught_up(cluster)
    status = quorum("--status")
    assert re.fullmatch(
        r"ClusterId:              \S{22}\nLeaderId:               0\nLeaderEpoch:            1\n"
        r"HighWatermark:          \d+\nMaxFollowerLag:         0\nMaxFollowerLagTimeMs:   0\n"
        r'CurrentVoters:          \[\{"id": 0, "directoryId": "\S{22}", "endpoints": '
        rf'\["CONTROLLER://127.0.0.1:{cluster.controller_port}"\]\}}\]\n'
        r'CurrentObservers:       \[\{"id": 1, "directoryId": null\}, \{"id": 2, "directoryId": null\}\]\n',
        status), status
    rows = [line.split("\t") for line in quorum("--replication").splitlines()]
    assert [cell.strip() for cell in rows[0]] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                                  "LastCaughtUpTimestamp", "Status", ""]
    assert [(r[0].strip(), r[3].strip(), r[6].strip()) for r in rows[1:]] == \
        [("0", "0", "Leader"), ("1", "0", "Observer"), ("2", "0", "Observer")]
