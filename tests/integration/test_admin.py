"""Admin operations and offset lookups through real admin and consumer clients."""
from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError
from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

confluent_admin = pytest.importorskip("confluent_kafka.admin")


@pytest.fixture(scope="module")
def cluster():
    from cluster.launch import Cluster

    with Cluster(nodes=3) as running:
        yield running


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_create_topic_errors_and_validate_only(admin):
    name = unique("created")
    admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)
    assert name not in admin.list_topics()
    admin.create_topics([NewTopic(name, 2, 1)])
    assert name in admin.list_topics()
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(name, 2, 1)])
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("not a valid name", 1, 1)])


def test_create_topic_with_a_replica_assignment_of_its_own(cluster, admin):
    name = unique("placed")
    admin.create_topics([NewTopic(name, -1, -1, replica_assignments={0: [2, 3], 1: [3, 1]})])
    state = cluster.status()
    placed = next(t for t in state["topics"] if t["name"] == name)["partitions"]
    assert [(p["replicas"], p["leader"]) for p in placed] == [([2, 3], 2), ([3, 1], 3)]
    assert not any(b["fenced"] for b in state["brokers"])  # the request did not cut a node off
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    other = unique("placed")
    list(client.create_topics([confluent_admin.NewTopic(other, num_partitions=2, replica_assignment=[[1], [2]])]).values())[0].result(10)
    placed = next(t for t in cluster.status()["topics"] if t["name"] == other)["partitions"]
    assert [p["replicas"] for p in placed] == [[1], [2]]


def test_replication_factor_larger_than_the_cluster_is_refused(cluster):
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = client.create_topics([confluent_admin.NewTopic(unique("too-many"), 1, 4)])
    error = list(future.values())[0].exception(10)
    assert error is not None and error.args[0].code() == 38  # INVALID_REPLICATION_FACTOR


def test_create_partitions_adds_usable_partitions(cluster, admin):
    name = unique("grow")
    admin.create_topics([NewTopic(name, 2, 1)])
    admin.create_partitions({name: NewPartitions(5)})
    partitions = admin.describe_topics([name])[0]["partitions"]
    assert sorted(p["partition_index"] for p in partitions) == [0, 1, 2, 3, 4]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    assert producer.send(name, b"in partition four", partition=4).get(10).offset == 0
    producer.close()


def test_describe_and_alter_topic_configs(cluster):
    name = unique("configs")
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    list(client.create_topics([confluent_admin.NewTopic(name, 1, 1, config={"retention.ms": "60000"})]).values())[0].result(10)
    resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, name)
    configs = list(client.describe_configs([resource]).values())[0].result(10)
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == confluent_admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == confluent_admin.ConfigSource.DEFAULT_CONFIG.value

    change = confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, name, incremental_configs=[
        confluent_admin.ConfigEntry("retention.ms", "120000",
                                    incremental_operation=confluent_admin.AlterConfigOpType.SET),
        confluent_admin.ConfigEntry("cleanup.policy", "compact",
                                    incremental_operation=confluent_admin.AlterConfigOpType.SET)])
    list(client.incremental_alter_configs([change]).values())[0].result(10)
    configs = list(client.describe_configs([resource]).values())[0].result(10)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == ("120000", "compact")


def test_describe_cluster(cluster):
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = client.describe_cluster().result(10)
    assert sorted(node.id for node in described.nodes) == [1, 2, 3]
    assert described.cluster_id == cluster.status()["cluster_id"]
    assert described.controller.id in (1, 2, 3)


def test_delete_and_recreate_gives_a_new_empty_topic(cluster, admin):
    name = unique("deleted")
    admin.create_topics([NewTopic(name, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    producer.send(name, b"old", partition=0).get(10)
    old_id = admin.describe_topics([name])[0]["topic_id"]
    admin.delete_topics([name])
    assert name not in admin.list_topics()
    admin.create_topics([NewTopic(name, 1, 1)])
    assert admin.describe_topics([name])[0]["topic_id"] != old_id
    assert producer.send(name, b"new", partition=0).get(10).offset == 0
    producer.close()


def test_list_offsets_earliest_latest_and_by_timestamp(cluster, admin):
    name = unique("offsets")
    admin.create_topics([NewTopic(name, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    base = int(time.time() * 1000) - 10_000
    for i in range(10):
        producer.send(name, f"m{i}".encode(), partition=0, timestamp_ms=base + 1000 * i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    partition = TopicPartition(name, 0)
    try:
        assert consumer.beginning_offsets([partition]) == {partition: 0}
        assert consumer.end_offsets([partition]) == {partition: 10}
        found = consumer.offsets_for_times({partition: base + 3500})[partition]
        assert (found.offset, found.timestamp) == (4, base + 4000)
        assert consumer.offsets_for_times({partition: base + 60_000})[partition] is None
    finally:
        consumer.close()


def test_metadata_request_auto_creates_topics(cluster):
    name = unique("auto")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    metadata = producer.send(name, b"first").get(10)
    producer.close()
    assert (metadata.topic, metadata.partition, metadata.offset) == (name, 0, 0)


def test_describe_topic_partitions_pages_with_a_cursor(cluster, admin):
    name = unique("paged")
    admin.create_topics([NewTopic(name, 5, 1)])
    Topic = DescribeTopicPartitionsRequest.TopicRequest
    seen, cursor = [], None
    for _ in range(5):
        request = DescribeTopicPartitionsRequest[0](topics=[Topic(name=name)], response_partition_limit=2,
                                                     cursor=cursor)
        response = admin._manager.run(admin._manager.send, request)
        assert isinstance(response, DescribeTopicPartitionsResponse)
        topic, = response.topics
        assert topic.error_code == 0
        seen += [(p.partition_index, p.leader_id) for p in topic.partitions]
        cursor = response.next_cursor
        if cursor is None:
            break
        cursor = DescribeTopicPartitionsRequest.Cursor(topic_name=cursor.topic_name,
                                                        partition_index=cursor.partition_index)
    assert [p for p, _ in seen] == [0, 1, 2, 3, 4]
    assert all(leader in (1, 2, 3) for _, leader in seen)
