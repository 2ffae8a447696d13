"""Metadata answers that nodes keep encoded follow every change: after a node dies, a topic
grows and another is deleted, a node that answered (and kept) the earlier state answers the
new one exactly as the controller has it."""
import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions, NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from cluster.formats.topic_ids import topic_id_from_kafka_string
from cluster.launch import Cluster
from tests.integration.wire import exchange_once

VERSION = 12
DEAD_NODE = 3


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3) as cluster:
        yield cluster


def metadata_of(cluster, node_id: int):
    request = MetadataRequest[VERSION](topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)
    return exchange_once((cluster.host, cluster.nodes[node_id].port), request, MetadataResponse, VERSION)


def partitions_of(response) -> dict[tuple[str, int], tuple]:
    return {(t.name, p.partition_index): (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
                                          p.offline_replicas)
            for t in response.topics for p in t.partitions}


def as_the_controller_has_it(cluster, dead: set[int]) -> dict[tuple[str, int], tuple]:
    return {(t["name"], p["partition"]): (0, p["leader"], p["leader_epoch"], p["replicas"], p["isr"],
                                          [r for r in p["replicas"] if r in dead])
            for t in cluster.status()["topics"] for p in t["partitions"]}


def admin_of(cluster, node_ids: list[int]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=",".join(f"{cluster.host}:{cluster.nodes[n].port}" for n in node_ids))


def test_kept_answers_follow_a_leader_change_a_new_partition_and_a_deletion(cluster):
    admin = admin_of(cluster, [1, 2, 3])
    try:
        admin.create_topics([NewTopic("moving", 3, 3), NewTopic("going", 1, 3)])
    finally:
        admin.close()
    cluster.wait_ready()
    before = metadata_of(cluster, 1)
    assert metadata_of(cluster, 1) == before  # the same state, answered again
    led_by_dead = {key: state for key, state in partitions_of(before).items() if state[1] == DEAD_NODE}
    assert led_by_dead  # placement spreads leaders over every node

    cluster.kill_node(DEAD_NODE)
    admin = admin_of(cluster, [1, 2])
    try:
        admin.create_partitions({"moving": NewPartitions(4, new_assignments=[[2, 1, DEAD_NODE]])})
        admin.delete_topics(["going"])
    finally:
        admin.close()
    cluster.wait_ready([1, 2])

    expected = as_the_controller_has_it(cluster, dead={DEAD_NODE})
    assert {name for name, _ in expected} == {"moving"}
    assert set(expected) == {("moving", index) for index in range(4)}
    for node_id in (1, 2):
        after = metadata_of(cluster, node_id)
        assert sorted(b.node_id for b in after.brokers) == [1, 2]
        assert [t.name for t in after.topics] == ["moving"]
        ids = {t["name"]: t["topic_id"] for t in cluster.status()["topics"]}
        assert after.topics[0].topic_id == topic_id_from_kafka_string(ids["moving"])
        assert partitions_of(after) == expected
    for key, (_, _, epoch, *_rest) in led_by_dead.items():
        _, leader, new_epoch, _, isr, offline = expected[key]
        assert leader in (1, 2) and new_epoch == epoch + 1
        assert DEAD_NODE not in isr and offline == [DEAD_NODE]
    assert expected[("moving", 3)] == (0, 2, 0, [2, 1, DEAD_NODE], [2, 1], [DEAD_NODE])
