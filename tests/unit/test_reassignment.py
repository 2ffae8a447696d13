"""The controller's reassignment decisions, as Kafka's PartitionReassignmentReplicas,
PartitionReassignmentRevert and completeReassignmentIfNeeded make them."""
import asyncio
import uuid

import pytest

from cluster.formats.control import BadControlRequest
from cluster.formats.errors import ErrorCode
from cluster.formats.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from cluster.formats.config import valid_throttled_replicas
from controller import reassignment
from node.replication_throttle import parse_throttled_replicas


def image_with(partition: PartitionInfo, brokers=(1, 2, 3, 4), fenced=()) -> MetadataImage:
    image = MetadataImage()
    for node_id in brokers:
        image.brokers[node_id] = BrokerInfo(node_id, uuid.uuid4(), 0, [], fenced=node_id in fenced)
    topic = TopicInfo("t", uuid.uuid4(), {0: partition})
    image.topics["t"], image.topics_by_id[topic.topic_id] = topic, topic
    return image


def alter(image: MetadataImage, replicas, brokers=(1, 2, 3, 4)):
    requests = [{"name": "t", "partitions": [{"partition": 0, "replicas": replicas}]}]
    outcome = asyncio.run(reassignment.alter_reassignments(image, list(brokers), requests))
    result = outcome.results[0]["partitions"][0]
    change = outcome.records[0][1] if outcome.records else None
    return result["error_code"], change


def test_a_move_lists_the_target_first_then_the_replicas_it_drops():
    image = image_with(PartitionInfo(0, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1))
    code, change = alter(image, [4, 2, 3])
    assert code == 0
    assert (change["replicas"], change["adding_replicas"], change["removing_replicas"]) == ([4, 2, 3, 1], [4], [1])
    assert "leader" not in change and "isr" not in change


def test_the_change_that_brings_the_last_new_replica_in_sync_completes_the_move():
    partition = PartitionInfo(0, replicas=[4, 2, 3, 1], isr=[1, 2, 3], leader=1, adding_replicas=[4],
                              removing_replicas=[1])
    change = reassignment.settle(image_with(partition), partition, {"isr": [1, 2, 3, 4]})
    # The leader is being removed: the first target replica in sync takes over.
    assert change == {"replicas": [4, 2, 3], "isr": [2, 3, 4], "removing_replicas": [], "adding_replicas": [],
                      "leader": 4}


def test_a_move_that_only_removes_completes_at_once():
    image = image_with(PartitionInfo(0, replicas=[1, 2, 3], isr=[1, 2, 3], leader=2))
    code, change = alter(image, [1, 3])
    assert change == {"partition_id": 0, "topic_id": image.topics["t"].topic_id, "replicas": [1, 3],
                      "isr": [1, 3], "leader": 1}


def test_cancelling_reverts_to_the_original_replicas():
    image = image_with(PartitionInfo(0, replicas=[4, 2, 3, 1], isr=[1, 2, 3], leader=1, adding_replicas=[4],
                                     removing_replicas=[1]))
    code, change = alter(image, None)
    assert code == 0
    assert (change["replicas"], change["adding_replicas"], change["removing_replicas"]) == ([2, 3, 1], [], [])


def test_cancelling_is_refused_where_only_added_replicas_are_in_sync():
    image = image_with(PartitionInfo(0, replicas=[4, 1], isr=[4], leader=4, adding_replicas=[4],
                                     removing_replicas=[1]))
    assert alter(image, None)[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_refusals():
    image = image_with(PartitionInfo(0, replicas=[1], isr=[1], leader=1), fenced=(4,))
    assert alter(image, [2, 2], brokers=(1, 2, 3))[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert alter(image, [9], brokers=(1, 2, 3))[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert alter(image, [], brokers=(1, 2, 3))[0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert alter(image, [1, 4], brokers=(1, 2, 3))[0] == ErrorCode.NONE  # fenced, but registered: as in Kafka
    assert alter(image, None, brokers=(1, 2, 3))[0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    with pytest.raises(BadControlRequest, match="broker id"):
        alter(image, ["1"])
    outcome = asyncio.run(reassignment.alter_reassignments(image, [1], [
        {"name": "t", "partitions": [{"partition": i, "replicas": [1]} for i in range(10_001)]}]))
    assert outcome.refused[0] == ErrorCode.POLICY_VIOLATION


def test_throttled_replica_lists():
    assert parse_throttled_replicas("0:1,1:2,2:1", 1) == {0, 2}
    assert parse_throttled_replicas("*", 3) is None
    assert parse_throttled_replicas("", 3) == set()
    assert valid_throttled_replicas("0:1, 1:2") and valid_throttled_replicas("*")
    assert not valid_throttled_replicas("0-1") and not valid_throttled_replicas("a:1")
