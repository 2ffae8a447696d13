"""The old API versions Kafka 3.9 still serves (ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0,
CreateTopics v0-1, DeleteTopics v0, DescribeConfigs v0, OffsetForLeaderEpoch v0-1) and the
legacy AlterConfigs, through raw requests and through clients pinned to old broker versions."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.protocol import admin as admin_api
from kafka.protocol import consumer as group_api
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.structs import OffsetAndMetadata

from cluster.launch import Cluster
from tests.integration.wire import exchange

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS, UNSUPPORTED_VERSION = 3, 36, 35
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, INVALID_CONFIG, INVALID_REQUEST = 22, 25, 40, 42
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=1) as running:
        yield running


@pytest.fixture
def sock(cluster):
    host, port = cluster.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        yield connection


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def filled_topic(cluster, messages: int) -> str:
    name = unique("legacy")
    cluster.create_topic(name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    for i in range(messages):
        producer.send(name, b"m%d" % i, partition=0)
    producer.flush()
    producer.close()
    return name


# --- ListOffsets v0 ---

def list_offsets_v0(sock, topic: str, timestamp: int, max_num_offsets: int):
    T = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest[0](replica_id=-1, topics=[T(name=topic, partitions=[
        T.ListOffsetsPartition(partition_index=0, timestamp=timestamp, max_num_offsets=max_num_offsets)])])
    answer = exchange(sock, request, ListOffsetsResponse, 0).topics[0].partitions[0]
    return answer.error_code, answer.old_style_offsets


def test_list_offsets_v0_answers_arrays_of_offsets_newest_first(cluster, sock):
    topic = filled_topic(cluster, messages=5)
    assert list_offsets_v0(sock, topic, LATEST, 10) == (0, [5, 0])
    assert list_offsets_v0(sock, topic, LATEST, 1) == (0, [5])
    assert list_offsets_v0(sock, topic, EARLIEST, 10) == (0, [0])
    in_an_hour = int(time.time() * 1000) + 3_600_000
    assert list_offsets_v0(sock, topic, in_an_hour, 10) == (0, [5, 0])
    assert list_offsets_v0(sock, topic, 1, 10) == (0, [])  # no segment was written that early
    assert list_offsets_v0(sock, topic, MAX_TIMESTAMP, 10) == (UNSUPPORTED_VERSION, [])
    assert list_offsets_v0(sock, "no-such-topic", LATEST, 10) == (UNKNOWN_TOPIC_OR_PARTITION, [])
    empty = unique("empty")
    cluster.create_topic(empty, partitions=1)
    assert list_offsets_v0(sock, empty, LATEST, 10) == (0, [0])


# --- OffsetCommit v0-1, OffsetFetch v0-1 ---

def commit(sock, version: int, group: str, topic: str, offset: int, metadata: str, generation: int = -1,
           member: str = "", commit_timestamp: int = -1) -> int:
    T = group_api.OffsetCommitRequest.OffsetCommitRequestTopic
    request = group_api.OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, topics=[T(name=topic, partitions=[
            T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata=metadata,
                                           commit_timestamp=commit_timestamp)])])
    return exchange(sock, request, group_api.OffsetCommitResponse, version).topics[0].partitions[0].error_code


def fetch_committed(sock, version: int, group: str, topic: str, partitions=(0,)):
    T = group_api.OffsetFetchRequest.OffsetFetchRequestTopic
    request = group_api.OffsetFetchRequest[version](group_id=group, topics=[T(name=topic,
                                                                              partition_indexes=list(partitions))])
    answer = exchange(sock, request, group_api.OffsetFetchResponse, version)
    return [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in answer.topics[0].partitions]


def find_coordinator(sock, group: str) -> None:
    assert exchange(sock, FindCoordinatorRequest[0](key=group), FindCoordinatorResponse, 0).error_code == 0


def test_offsets_committed_with_v0_and_v1_are_fetched_by_every_version(cluster, sock):
    topic = filled_topic(cluster, messages=5)
    find_coordinator(sock, "legacy-v0")  # creates __consumer_offsets
    assert commit(sock, 0, "legacy-v0", topic, 3, "from v0") == 0
    assert fetch_committed(sock, 0, "legacy-v0", topic, partitions=(0, 1)) == [(0, 3, "from v0", 0), (1, -1, "", 0)]
    assert commit(sock, 1, "legacy-v1", topic, 4, "from v1", commit_timestamp=int(time.time() * 1000)) == 0
    assert fetch_committed(sock, 1, "legacy-v1", topic) == [(0, 4, "from v1", 0)]
    assert fetch_committed(sock, 0, "legacy-v1", topic) == [(0, 4, "from v1", 0)]
    modern = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id="legacy-v0", enable_auto_commit=False)
    try:
        assert modern.committed(TopicPartition(topic, 0), metadata=True) == OffsetAndMetadata(3, "from v0", -1)
    finally:
        modern.close()
    assert commit(sock, 1, "legacy-v1", "no-such-topic", 1, "") == UNKNOWN_TOPIC_OR_PARTITION


def test_offset_commit_v1_is_checked_against_the_generation_of_a_live_group(cluster, sock):
    topic = filled_topic(cluster, messages=1)
    group = unique("sarama-like")
    find_coordinator(sock, group)
    P = group_api.JoinGroupRequest.JoinGroupRequestProtocol
    joined = exchange(sock, group_api.JoinGroupRequest[0](
        group_id=group, session_timeout_ms=30000, member_id="", protocol_type="consumer",
        protocols=[P(name="range", metadata=b"")]), group_api.JoinGroupResponse, 0)
    assert joined.error_code == 0
    member, generation = joined.member_id, joined.generation_id
    A = group_api.SyncGroupRequest.SyncGroupRequestAssignment
    synced = exchange(sock, group_api.SyncGroupRequest[0](group_id=group, generation_id=generation, member_id=member,
                                                         assignments=[A(member_id=member, assignment=b"")]),
                      group_api.SyncGroupResponse, 0)
    assert synced.error_code == 0
    assert commit(sock, 1, group, topic, 1, "", generation=generation, member=member) == 0
    assert commit(sock, 1, group, topic, 2, "", generation=generation + 1, member=member) == ILLEGAL_GENERATION
    assert commit(sock, 1, group, topic, 2, "", generation=generation, member="ghost") == UNKNOWN_MEMBER_ID
    assert fetch_committed(sock, 1, group, topic) == [(0, 1, "", 0)]
    M = group_api.LeaveGroupRequest.MemberIdentity
    exchange(sock, group_api.LeaveGroupRequest[0](group_id=group, member_id=member,
                                                 members=[M(member_id=member)]), group_api.LeaveGroupResponse, 0)


def test_the_commit_timestamp_of_offset_commit_v1_is_when_offsets_expire_from():
    config = {"offsets.retention.minutes": "60", "offsets.retention.check.interval.ms": "300"}
    with Cluster(nodes=1, node_config=config) as running:
        topic = filled_topic(running, messages=1)
        host, port = running.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            find_coordinator(connection, "stale")
            two_hours_ago = int(time.time() * 1000) - 2 * 3_600_000
            assert commit(connection, 1, "stale", topic, 1, "", commit_timestamp=two_hours_ago) == 0
            assert commit(connection, 1, "fresh", topic, 1, "") == 0
            deadline = time.monotonic() + 10
            while fetch_committed(connection, 1, "stale", topic)[0][1] != -1 and time.monotonic() < deadline:
                time.sleep(0.2)  # waiting on the broker's expiry timer, which the test cannot observe otherwise
            assert fetch_committed(connection, 1, "stale", topic) == [(0, -1, "", 0)]
            assert fetch_committed(connection, 1, "fresh", topic) == [(0, 1, "", 0)]


@pytest.mark.parametrize("broker_version", [(0, 8, 2), (0, 9), (0, 10, 0)])
def test_consumers_pinned_to_old_brokers_commit_offsets_a_modern_consumer_reads(cluster, broker_version):
    # kafka-python's tables: 0.8.2 commits with OffsetCommit v1, 0.9 and 0.10.0 with v2; all fetch
    # with OffsetFetch v1 and look offsets up with ListOffsets v0.
    topic = filled_topic(cluster, messages=5)
    group = unique("pinned")
    partition = TopicPartition(topic, 0)
    old = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, api_version=broker_version,
                        enable_auto_commit=False)
    try:
        old.assign([partition])
        assert old.beginning_offsets([partition]) == {partition: 0}
        assert old.end_offsets([partition]) == {partition: 5}
        old.commit({partition: OffsetAndMetadata(4, "pinned", -1)})
        assert old.committed(partition, metadata=True) == OffsetAndMetadata(4, "pinned", -1)
    finally:
        old.close()
    modern = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        assert modern.committed(partition, metadata=True) == OffsetAndMetadata(4, "pinned", -1)
    finally:
        modern.close()


@pytest.mark.parametrize("fallback", ["0.8.2.2", "0.9.0.1", "0.10.0.1"])
def test_librdkafka_without_api_versions_looks_up_and_commits_offsets(cluster, fallback):
    # Without ApiVersions librdkafka speaks what the fallback broker did: ListOffsets v0 for the
    # watermarks, and OffsetCommit v1 (0.8.2) or v2 with OffsetFetch v1.
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = filled_topic(cluster, messages=5)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("fallback"), "api.version.request": False,
        "broker.version.fallback": fallback, "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10) == (0, 5)
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 3)], asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        assert [(p.offset, p.error) for p in committed] == [(3, None)]
    finally:
        consumer.close()


# --- CreateTopics v0-1, DeleteTopics v0, DescribeConfigs v0, OffsetForLeaderEpoch v0-1 ---

def topic_in_metadata(sock, topic: str) -> bool:
    # Version 4 is the first that can ask without creating the topic.
    request = MetadataRequest[4](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                 allow_auto_topic_creation=False)
    return exchange(sock, request, MetadataResponse, 4).topics[0].error_code == 0


def test_create_topics_v0_creates_a_topic_that_metadata_shows_and_delete_topics_v0_deletes_it(sock):
    name = unique("created-v0")
    T = admin_api.CreateTopicsRequest.CreatableTopic
    create = admin_api.CreateTopicsRequest[0](topics=[T(name=name, num_partitions=2, replication_factor=1,
                                                        assignments=[], configs=[])], timeout_ms=5000)
    created = exchange(sock, create, admin_api.CreateTopicsResponse, 0).topics[0]
    assert (created.name, created.error_code) == (name, 0)
    assert topic_in_metadata(sock, name)
    again = exchange(sock, create, admin_api.CreateTopicsResponse, 0).topics[0]
    assert again.error_code == TOPIC_ALREADY_EXISTS
    validated = admin_api.CreateTopicsRequest[1](topics=[T(name=name + "-not", num_partitions=1, replication_factor=1,
                                                           assignments=[], configs=[])], timeout_ms=5000,
                                                 validate_only=True)
    assert exchange(sock, validated, admin_api.CreateTopicsResponse, 1).topics[0].error_code == 0
    assert not topic_in_metadata(sock, name + "-not")
    deleted = exchange(sock, admin_api.DeleteTopicsRequest[0](topic_names=[name, "no-such-topic"], timeout_ms=5000),
                       admin_api.DeleteTopicsResponse, 0)
    assert [(r.name, r.error_code) for r in deleted.responses] == [(name, 0), ("no-such-topic", 3)]
    assert not topic_in_metadata(sock, name)


def test_describe_configs_v0_tells_defaults_from_overrides(cluster, sock):
    name = unique("described")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={"retention.ms": "60000"})])
    finally:
        admin.close()
    R = admin_api.DescribeConfigsRequest.DescribeConfigsResource
    request = admin_api.DescribeConfigsRequest[0](resources=[R(resource_type=TOPIC, resource_name=name,
                                                               configuration_keys=["retention.ms", "segment.bytes"])])
    result = exchange(sock, request, admin_api.DescribeConfigsResponse, 0).results[0]
    assert result.error_code == 0
    assert sorted((c.name, c.value, c.is_default) for c in result.configs) == [
        ("retention.ms", "60000", False), ("segment.bytes", "1073741824", True)]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_and_v1_answer_where_the_epoch_ends(cluster, sock, version):
    topic = filled_topic(cluster, messages=3)
    T = group_api.OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    request = group_api.OffsetForLeaderEpochRequest[version](topics=[T(topic=topic, partitions=[
        T.OffsetForLeaderPartition(partition=0, leader_epoch=0)])])
    answer = exchange(sock, request, group_api.OffsetForLeaderEpochResponse, version).topics[0].partitions[0]
    assert (answer.error_code, answer.end_offset) == (0, 3)
    if version == 1:
        assert answer.leader_epoch == 0


def test_admin_pinned_to_old_brokers_creates_deletes_and_describes(cluster):
    name = unique("pinned-admin")
    old = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1))  # CreateTopics v0
    try:
        old.create_topics([NewTopic(name, 2, 1)])
        assert name in old.list_topics()
        old.delete_topics([name])
        assert name not in old.list_topics()
    finally:
        old.close()
    configured = unique("pinned-configs")
    old = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 11))  # DescribeConfigs v0
    try:
        old.create_topics([NewTopic(configured, 1, 1, topic_configs={"retention.ms": "60000"})])
        described = old.describe_configs([ConfigResource(ConfigResourceType.TOPIC, configured)])
        assert {k: v["value"] for k, v in described["topic"][configured].items()} == {"retention.ms": "60000"}
    finally:
        old.close()


# --- AlterConfigs ---

def modified_configs(admin, topic: str) -> dict[str, str]:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {name: entry["value"] for name, entry in described["topic"][topic].items()}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_every_dynamic_config_of_a_topic(cluster):
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    name = unique("replaced")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={"retention.ms": "60000", "cleanup.policy": "compact"})])
        # librdkafka's alter_configs is the legacy API: what it does not name goes back to its default.
        client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, name,
                                                  set_config={"segment.ms": "3600000"})
        assert list(client.alter_configs([resource]).values())[0].result(10) is None
        assert modified_configs(admin, name) == {"segment.ms": "3600000"}
        # kafka-python sends the configs it wants kept along with the new one.
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "5000"})],
                                     incremental=False)
        assert result == {"topic": {name: "OK"}}
        assert modified_configs(admin, name) == {"segment.ms": "3600000", "retention.ms": "5000"}
        checked = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7"})],
                                      incremental=False, validate_only=True)
        assert checked == {"topic": {name: "OK"}}
        assert modified_configs(admin, name) == {"segment.ms": "3600000", "retention.ms": "5000"}
    finally:
        admin.close()


def test_alter_configs_from_a_client_pinned_to_kafka_0_11(cluster):
    name = unique("pinned-alter")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 11))  # AlterConfigs v0
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "9000"})])
        assert result == {"topic": {name: "OK"}}
        assert modified_configs(admin, name) == {"retention.ms": "9000"}
    finally:
        admin.close()


def legacy_alter(sock, resources, validate_only=False, version=2) -> list[tuple[int, str, int]]:
    R = admin_api.AlterConfigsRequest.AlterConfigsResource
    request = admin_api.AlterConfigsRequest[version](resources=[
        R(resource_type=kind, resource_name=name, configs=[R.AlterableConfig(name=k, value=v) for k, v in configs])
        for kind, name, configs in resources], validate_only=validate_only)
    answer = exchange(sock, request, admin_api.AlterConfigsResponse, version)
    return [(r.resource_type, r.resource_name, r.error_code) for r in answer.responses]


def test_alter_configs_errors_are_kafkas(cluster, sock):
    name = filled_topic(cluster, messages=0)
    assert legacy_alter(sock, [
        (TOPIC, "no-such-topic", [("retention.ms", "1000")]),
        (TOPIC, name, [("retention.ms", "soon")]),
        (BROKER, "1", [("log.retention.ms", "1000")]),
        (BROKER, "2", []),
        (BROKER_LOGGER, "1", []),
    ]) == [(TOPIC, "no-such-topic", UNKNOWN_TOPIC_OR_PARTITION), (TOPIC, name, INVALID_CONFIG),
           (BROKER, "1", INVALID_REQUEST), (BROKER, "2", INVALID_REQUEST), (BROKER_LOGGER, "1", INVALID_REQUEST)]
    assert legacy_alter(sock, [(TOPIC, name, [("no.such.config", "1")])], version=0) == [(TOPIC, name, INVALID_CONFIG)]
    assert legacy_alter(sock, [(TOPIC, name, [("retention.ms", "1"), ("retention.ms", "2")])]) == [
        (TOPIC, name, INVALID_REQUEST)]
    assert legacy_alter(sock, [(TOPIC, name, []), (TOPIC, name, [])]) == [
        (TOPIC, name, INVALID_REQUEST), (TOPIC, name, INVALID_REQUEST)]
    assert legacy_alter(sock, [(BROKER, "1", []), (BROKER, "", [])], version=1) == [(BROKER, "1", 0), (BROKER, "", 0)]
