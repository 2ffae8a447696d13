"""The share coordinator (KIP-932) over the wire: share-partition state kept in `__share_group_state`.

Against a 3-node cluster, with kafka.protocol-encoded requests: FindCoordinator key type SHARE names
the leader of the share-partition's state partition; state written there reads back exactly; a write
from an older leader epoch or state epoch is refused; a node that does not lead the state partition
answers NOT_COORDINATOR; a persister on another node reaches the coordinator over the wire; and when
the coordinator is killed the new leader of the state partition answers the same state, replayed
from its snapshot and the updates after it. The share-group offset admin APIs answer for groups
that are not share groups with Kafka's codes.
"""
from __future__ import annotations

import time

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse

from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.launch import Cluster
from node.apis.alter_share_group_offsets import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse
from node.apis.delete_share_group_offsets import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse
from node.apis.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
)
from node.apis.initialize_share_group_state import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse
from node.apis.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse
from node.apis.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse,
)
from node.apis.write_share_group_state import WriteShareGroupStateRequest, WriteShareGroupStateResponse
from node.groups.placement import partition_for_group
from tests.integration.wire import exchange_once

TOPIC = "shared"
STATE_TOPIC = "__share_group_state"
STATE_PARTITIONS = 4
SNAPSHOT_EVERY = 3
NONE, NOT_COORDINATOR, GROUP_ID_NOT_FOUND, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH = 0, 16, 69, 74, 124
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
DEADLINE_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("share-state") / "kraftwerk",
                 node_config={"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
                              "share.coordinator.snapshot.update.records.per.snapshot": str(SNAPSHOT_EVERY),
                              "auto.leader.rebalance.enable": "false"}) as running:
        running.create_topic(TOPIC, partitions=3, replication_factor=3)
        yield running


# --- the cluster and the wire ---

def address(cluster, node_id: int) -> tuple[str, int]:
    host, port = cluster.address(cluster.nodes[node_id]).rsplit(":", 1)
    return host, int(port)


def topic_id(cluster):
    request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name=TOPIC)],
                                  allow_auto_topic_creation=False)
    return exchange_once(address(cluster, 1), request, MetadataResponse, 12).topics[0].topic_id


def find_share_coordinator(cluster, node_id: int, key: str):
    request = FindCoordinatorRequest[6](key_type=2, coordinator_keys=[key])
    return exchange_once(address(cluster, node_id), request, FindCoordinatorResponse, 6).coordinators[0]


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def state_leader(cluster, partition: int) -> tuple[int, int]:
    """(leader, leader epoch) of a `__share_group_state` partition, as the controller has it."""
    topics = {t["name"]: t for t in cluster.status()["topics"]}
    found = next(p for p in topics[STATE_TOPIC]["partitions"] if p["partition"] == partition)
    return found["leader"], found["leader_epoch"]


def coordinator_of(cluster, key: str) -> int:
    """The node FindCoordinator names for the key, once the state partition has a leader."""
    def found():
        answer = find_share_coordinator(cluster, 1, key)
        return answer.node_id if answer.error_code == NONE else None
    return wait_for(found, f"a share coordinator for {key}")


def batch(request_class, first: int, last: int, state: int, count: int):
    return request_class.WriteStateData.PartitionData.StateBatch(first_offset=first, last_offset=last,
                                                                  delivery_state=state, delivery_count=count)


def write(cluster, node_id, group, tid, partition, *, state_epoch, leader_epoch, start_offset, batches) -> int:
    R = WriteShareGroupStateRequest
    request = R[0](group_id=group, topics=[R.WriteStateData(topic_id=tid, partitions=[R.WriteStateData.PartitionData(
        partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        state_batches=[batch(R, *b) for b in batches])])])
    return exchange_once(address(cluster, node_id), request, WriteShareGroupStateResponse, 0) \
        .results[0].partitions[0].error_code


def read(cluster, node_id, group, tid, partition, leader_epoch):
    R = ReadShareGroupStateRequest
    request = R[0](group_id=group, topics=[R.ReadStateData(topic_id=tid, partitions=[R.ReadStateData.PartitionData(
        partition=partition, leader_epoch=leader_epoch)])])
    answer = exchange_once(address(cluster, node_id), request, ReadShareGroupStateResponse, 0).results[0].partitions[0]
    batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in answer.state_batches]
    return answer.error_code, answer.state_epoch, answer.start_offset, batches


def initialize(cluster, node_id, group, tid, partition, state_epoch, start_offset) -> int:
    R = InitializeShareGroupStateRequest
    request = R[0](group_id=group, topics=[R.InitializeStateData(topic_id=tid, partitions=[
        R.InitializeStateData.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)])])
    return exchange_once(address(cluster, node_id), request, InitializeShareGroupStateResponse, 0) \
        .results[0].partitions[0].error_code


def summary(cluster, node_id, group, tid, partition):
    R = ReadShareGroupStateSummaryRequest
    request = R[0](group_id=group, topics=[R.ReadStateSummaryData(topic_id=tid, partitions=[
        R.ReadStateSummaryData.PartitionData(partition=partition, leader_epoch=-1)])])
    answer = exchange_once(address(cluster, node_id), request, ReadShareGroupStateSummaryResponse, 0) \
        .results[0].partitions[0]
    return answer.error_code, answer.state_epoch, answer.start_offset


# --- the tests ---

def test_find_coordinator_names_the_leader_of_the_share_partitions_state_partition(cluster):
    tid = topic_id(cluster)
    key = f"finders:{topic_id_to_kafka_string(tid)}:1"
    coordinator = coordinator_of(cluster, key)  # the first lookup creates __share_group_state
    leader, _ = state_leader(cluster, partition_for_group(key, STATE_PARTITIONS))
    assert coordinator == leader
    for node_id in (1, 2, 3):
        answer = find_share_coordinator(cluster, node_id, key)
        assert (answer.key, answer.error_code, answer.node_id) == (key, NONE, leader)
        assert (answer.host, answer.port) == address(cluster, leader)
    assert find_share_coordinator(cluster, 1, "no-topic-id:0").error_code == 42  # INVALID_REQUEST


def test_written_state_reads_back_exactly_and_only_its_coordinator_answers(cluster):
    tid = topic_id(cluster)
    group = "exact"
    key = f"{group}:{topic_id_to_kafka_string(tid)}:0"
    coordinator = coordinator_of(cluster, key)
    assert initialize(cluster, coordinator, group, tid, 0, state_epoch=0, start_offset=10) == NONE
    assert read(cluster, coordinator, group, tid, 0, leader_epoch=1) == (NONE, 0, 10, [])
    assert write(cluster, coordinator, group, tid, 0, state_epoch=0, leader_epoch=1, start_offset=10,
                 batches=[(10, 19, AVAILABLE, 1)]) == NONE
    assert write(cluster, coordinator, group, tid, 0, state_epoch=0, leader_epoch=1, start_offset=-1,
                 batches=[(10, 14, ACKNOWLEDGED, 1), (17, 17, ARCHIVED, 5)]) == NONE
    assert read(cluster, coordinator, group, tid, 0, leader_epoch=1) == (
        NONE, 0, 10, [(10, 14, ACKNOWLEDGED, 1), (15, 16, AVAILABLE, 1), (17, 17, ARCHIVED, 5), (18, 19, AVAILABLE, 1)])
    # A new start offset drops what lies before it.
    assert write(cluster, coordinator, group, tid, 0, state_epoch=0, leader_epoch=1, start_offset=15,
                 batches=[]) == NONE
    assert read(cluster, coordinator, group, tid, 0, leader_epoch=1) == (
        NONE, 0, 15, [(15, 16, AVAILABLE, 1), (17, 17, ARCHIVED, 5), (18, 19, AVAILABLE, 1)])
    assert summary(cluster, coordinator, group, tid, 0) == (NONE, 0, 15)
    for other in {1, 2, 3} - {coordinator}:
        assert read(cluster, other, group, tid, 0, leader_epoch=1)[0] == NOT_COORDINATOR
        assert write(cluster, other, group, tid, 0, state_epoch=0, leader_epoch=1, start_offset=-1,
                     batches=[]) == NOT_COORDINATOR
    # A share-partition never initialized reads as start offset -1.
    unused = coordinator_of(cluster, f"nobody-here:{topic_id_to_kafka_string(tid)}:0")
    assert read(cluster, unused, "nobody-here", tid, 0, leader_epoch=1) == (NONE, 0, -1, [])


def test_a_deposed_leader_and_an_old_state_epoch_are_fenced(cluster):
    tid = topic_id(cluster)
    group = "fenced"
    key = f"{group}:{topic_id_to_kafka_string(tid)}:2"
    coordinator = coordinator_of(cluster, key)
    assert initialize(cluster, coordinator, group, tid, 2, state_epoch=0, start_offset=0) == NONE
    assert write(cluster, coordinator, group, tid, 2, state_epoch=0, leader_epoch=5, start_offset=0,
                 batches=[(0, 4, ACKNOWLEDGED, 1)]) == NONE
    # The leader before epoch 5 writes late: refused, and nothing it wrote is kept.
    assert write(cluster, coordinator, group, tid, 2, state_epoch=0, leader_epoch=4, start_offset=0,
                 batches=[(0, 4, AVAILABLE, 2)]) == FENCED_LEADER_EPOCH
    assert read(cluster, coordinator, group, tid, 2, leader_epoch=4)[0] == FENCED_LEADER_EPOCH
    # A new leader reads at epoch 6: the leader of epoch 5 is fenced from then on.
    assert read(cluster, coordinator, group, tid, 2, leader_epoch=6) == (NONE, 0, 0, [(0, 4, ACKNOWLEDGED, 1)])
    assert write(cluster, coordinator, group, tid, 2, state_epoch=0, leader_epoch=5, start_offset=-1,
                 batches=[]) == FENCED_LEADER_EPOCH
    # Initialized again at state epoch 1 (as AlterShareGroupOffsets does): writes at state epoch 0 are refused.
    assert initialize(cluster, coordinator, group, tid, 2, state_epoch=1, start_offset=3) == NONE
    assert initialize(cluster, coordinator, group, tid, 2, state_epoch=0, start_offset=3) == FENCED_STATE_EPOCH
    assert write(cluster, coordinator, group, tid, 2, state_epoch=0, leader_epoch=6, start_offset=-1,
                 batches=[(3, 3, ARCHIVED, 1)]) == FENCED_STATE_EPOCH
    assert read(cluster, coordinator, group, tid, 2, leader_epoch=6) == (NONE, 1, 3, [])


def test_a_persister_on_another_node_reaches_the_coordinator_over_the_wire(cluster):
    tid = topic_id(cluster)
    group = "remote"
    key = f"{group}:{topic_id_to_kafka_string(tid)}:1"
    coordinator = coordinator_of(cluster, key)
    caller = next(n for n in (1, 2, 3) if n != coordinator)

    def persister(action, on=caller, **args):
        answer = cluster.node_control(on, "share_state", action=action, group_id=group, topic=TOPIC,
                                      partition=1, **args)
        return {"error_code": answer["error_code"], "state": answer["state"]}

    assert persister("read", leader_epoch=3) == {"error_code": NONE, "state": None}
    assert persister("initialize", state_epoch=0, start_offset=7)["error_code"] == NONE
    assert persister("write", state_epoch=0, leader_epoch=3, start_offset=7,
                     batches=[[7, 9, ACKNOWLEDGED, 1], [10, 12, AVAILABLE, 2]])["error_code"] == NONE
    assert persister("read", leader_epoch=3)["state"] == {
        "state_epoch": 0, "leader_epoch": 3, "start_offset": 7,
        "batches": [[7, 9, ACKNOWLEDGED, 1], [10, 12, AVAILABLE, 2]]}
    assert persister("read_summary")["state"] == {"state_epoch": 0, "leader_epoch": -1, "start_offset": 7,
                                                  "batches": []}
    assert read(cluster, coordinator, group, tid, 1, leader_epoch=3) == (
        NONE, 0, 7, [(7, 9, ACKNOWLEDGED, 1), (10, 12, AVAILABLE, 2)])
    # On the coordinator's own node the persister calls it directly, with the same answers.
    assert persister("read", on=coordinator, leader_epoch=3) == persister("read", leader_epoch=3)
    assert persister("write", state_epoch=0, leader_epoch=2, start_offset=-1, batches=[]) == {
        "error_code": FENCED_LEADER_EPOCH, "state": None}
    assert persister("delete")["error_code"] == NONE
    assert persister("read", leader_epoch=3) == {"error_code": NONE, "state": None}


def test_offset_admin_apis_answer_for_a_group_that_is_not_a_share_group(cluster):
    group = "not-shared"
    R = DescribeShareGroupOffsetsRequest
    request = R[0](groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
        R.DescribeShareGroupOffsetsRequestGroup.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC,
                                                                                       partitions=[0])])])
    coordinator = wait_for(lambda: (lambda a: a.node_id if a.error_code == NONE else None)(exchange_once(
        address(cluster, 1), FindCoordinatorRequest[3](key=group, key_type=0), FindCoordinatorResponse, 3)),
        "the group's coordinator")
    answers = {n: exchange_once(address(cluster, n), request, DescribeShareGroupOffsetsResponse, 0).groups[0]
               for n in (1, 2, 3)}
    assert wait_for(lambda: exchange_once(address(cluster, coordinator), request, DescribeShareGroupOffsetsResponse,
                                          0).groups[0].error_code == GROUP_ID_NOT_FOUND, "the group's partition loaded")
    assert {n: a.error_code for n, a in answers.items() if n != coordinator} == {
        n: NOT_COORDINATOR for n in {1, 2, 3} - {coordinator}}
    A = AlterShareGroupOffsetsRequest
    altered = exchange_once(address(cluster, coordinator), A[0](group_id=group, topics=[
        A.AlterShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[
            A.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=5)])]), AlterShareGroupOffsetsResponse, 0)
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in altered.responses] == [
        (TOPIC, [(0, GROUP_ID_NOT_FOUND)])]
    D = DeleteShareGroupOffsetsRequest
    deleted = exchange_once(address(cluster, coordinator), D[0](group_id=group, topics=[
        D.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[0])]), DeleteShareGroupOffsetsResponse, 0)
    assert (deleted.error_code, deleted.responses) == (GROUP_ID_NOT_FOUND, [])


def test_the_new_coordinator_answers_the_same_state_after_the_old_one_is_killed(cluster):
    tid = topic_id(cluster)
    group = "survivors"
    key = f"{group}:{topic_id_to_kafka_string(tid)}:0"
    state_partition = partition_for_group(key, STATE_PARTITIONS)
    coordinator = coordinator_of(cluster, key)
    assert initialize(cluster, coordinator, group, tid, 0, state_epoch=0, start_offset=0) == NONE
    # More writes than share.coordinator.snapshot.update.records.per.snapshot: a snapshot and updates after it.
    for first in range(0, 40, 5):
        assert write(cluster, coordinator, group, tid, 0, state_epoch=0, leader_epoch=2, start_offset=-1,
                     batches=[(first, first + 4, AVAILABLE, 1), (first + 1, first + 2, ACKNOWLEDGED, 1)]) == NONE
    assert write(cluster, coordinator, group, tid, 0, state_epoch=0, leader_epoch=2, start_offset=11,
                 batches=[(30, 39, ARCHIVED, 5)]) == NONE
    before = read(cluster, coordinator, group, tid, 0, leader_epoch=2)
    assert before[:3] == (NONE, 0, 11)
    assert before[3][:2] == [(11, 12, ACKNOWLEDGED, 1), (13, 15, AVAILABLE, 1)] and before[3][-1] == (30, 39, ARCHIVED, 5)
    _, epoch_before = state_leader(cluster, state_partition)
    cluster.kill_node(coordinator)
    try:
        new_leader = wait_for(lambda: (lambda l: l[0] if l[0] not in (-1, coordinator) else None)(
            state_leader(cluster, state_partition)), "a new leader of the state partition")
        assert state_leader(cluster, state_partition)[1] > epoch_before
        # FindCoordinator names the state partition's leader as the controller has it (on a loaded
        # machine the leadership may move on once more, from a node fenced for a late heartbeat).
        new_leader = wait_for(lambda: (lambda a, leader: a.node_id if a.error_code == NONE and a.node_id == leader
                                       else None)(find_share_coordinator(cluster, new_leader, key),
                                                  state_leader(cluster, state_partition)[0]),
                              "FindCoordinator to name the new coordinator")
        assert new_leader != coordinator
        after = wait_for(lambda: (lambda r: r if r[0] == NONE else None)(
            read(cluster, new_leader, group, tid, 0, leader_epoch=2)), "the new coordinator to load the state")
        assert after == before
        # The new coordinator keeps fencing: a write from the leader before epoch 2 is refused.
        assert write(cluster, new_leader, group, tid, 0, state_epoch=0, leader_epoch=1, start_offset=-1,
                     batches=[]) == FENCED_LEADER_EPOCH
    finally:
        cluster.restart_node(coordinator)
