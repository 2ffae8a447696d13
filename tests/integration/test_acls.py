"""ACLs with real clients, on a cluster run with Kafka's StandardAuthorizer.

Over PLAINTEXT every client is User:ANONYMOUS, and the super user is one nobody here can be, so
what a client may do is exactly what the ACLs below grant it. The only ACLs written outside the
Kafka protocol are the ones that let User:ANONYMOUS administer ACLs (ALTER and DESCRIBE on the
cluster), written through the controller's channel as `kraftwerk acl add` does; every other ACL is
created, described and deleted with confluent-kafka's and kafka-python's admin clients.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ConfigResource, NewTopic,
    ResourcePatternType, ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourcePatternFilter
from kafka.admin import ACLResourcePatternType, ResourceType as KafkaPythonResourceType
from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from cluster.formats.topic_ids import topic_id_from_kafka_string
from cluster.launch import Cluster
from tests.integration.wire import exchange

AUTHORIZED = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin;User:broker"}
ANONYMOUS = "User:ANONYMOUS"
TIMEOUT_S = 15
# The installed console script, as users run it; the module when kraftwerk is not pip-installed.
KRAFTWERK = [shutil.which("kraftwerk")] if shutil.which("kraftwerk") else [sys.executable, "-m", "cluster.cli"]


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=1, node_config=AUTHORIZED) as running:
        grant_acl_administration(running)
        yield running


def grant_acl_administration(cluster) -> None:
    """ALTER and DESCRIBE on the cluster for User:ANONYMOUS, through the controller's channel."""
    creations = [{"resource_type": 4, "resource_name": "kafka-cluster", "pattern_type": 3, "principal": ANONYMOUS,
                  "host": "*", "operation": operation, "permission_type": 3} for operation in (7, 8)]
    assert cluster.control("create_acls", creations=creations)["results"] == [
        {"error_code": 0, "error_message": None}] * 2
    cluster.control("wait_ready", node_ids=sorted(cluster.nodes), timeout_ms=TIMEOUT_S * 1000)


@pytest.fixture
def admin(cluster):
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    yield client
    # Every ACL a test made goes, but the two that administer ACLs.
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    administering = {(AclOperation.ALTER, AclPermissionType.ALLOW), (AclOperation.DESCRIBE, AclPermissionType.ALLOW)}
    made = [b for b in client.describe_acls(everything).result(TIMEOUT_S)
            if not (b.restype == ResourceType.BROKER and (b.operation, b.permission_type) in administering)]
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in made]
    for future in (client.delete_acls(filters).values() if filters else ()):
        future.result(TIMEOUT_S)


TOPIC_IDS: dict[str, uuid.UUID] = {}  # of the topics topic_named made


def topic_named(cluster, prefix: str = "acl", partitions: int = 1) -> str:
    """A new topic, made through the controller's channel (nobody here may create topics)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    reply = cluster.control("create_topics", topics=[{"name": name, "num_partitions": partitions,
                                                      "replication_factor": 1, "assignments": None, "configs": {}}],
                            validate_only=False)
    assert reply["results"][0]["error_code"] == 0, reply
    TOPIC_IDS[name] = topic_id_from_kafka_string(reply["results"][0]["topic_id"])
    return name


def allow(resource_type, name, operation, pattern=ResourcePatternType.LITERAL, host="*",
          permission=AclPermissionType.ALLOW, principal=ANONYMOUS) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def deny(resource_type, name, operation, pattern=ResourcePatternType.LITERAL, host="*") -> AclBinding:
    return allow(resource_type, name, operation, pattern, host, AclPermissionType.DENY)


def create(admin, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        assert future.result(TIMEOUT_S) is None


def delivery_error(cluster, topic: str, config: dict | None = None) -> KafkaError | None:
    """The error of producing one message with a new confluent-kafka producer (None: delivered)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.timeout.ms": 5000,
                         **(config or {})})
    outcome = []
    producer.produce(topic, b"hello", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def error_code(error) -> int | None:
    return None if error is None else error.code()


# --- the ACL APIs ---

def test_acls_are_created_described_by_filter_and_deleted_with_confluent_kafka(admin):
    orders = allow(ResourceType.TOPIC, "orders", AclOperation.READ)
    ord_prefix = allow(ResourceType.TOPIC, "ord", AclOperation.WRITE, ResourcePatternType.PREFIXED, host="127.0.0.1")
    group = deny(ResourceType.GROUP, "*", AclOperation.DELETE)
    create(admin, orders, ord_prefix, group)
    create(admin, orders)  # the same ACL again: still one ACL

    def described(restype, name, pattern, permission=AclPermissionType.ANY):
        return sorted(admin.describe_acls(AclBindingFilter(restype, name, pattern, None, None, AclOperation.ANY,
                                                           permission)).result(TIMEOUT_S), key=str)

    assert described(ResourceType.TOPIC, None, ResourcePatternType.ANY) == sorted([orders, ord_prefix], key=str)
    assert described(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH) == sorted([orders, ord_prefix], key=str)
    assert described(ResourceType.TOPIC, "ord", ResourcePatternType.LITERAL) == []
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, AclPermissionType.DENY) == [group]

    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, ANONYMOUS,
                                                  None, AclOperation.ANY, AclPermissionType.ALLOW)])
    assert sorted(next(iter(deleted.values())).result(TIMEOUT_S), key=str) == sorted([orders, ord_prefix], key=str)
    assert described(ResourceType.TOPIC, None, ResourcePatternType.ANY) == []
    assert described(ResourceType.GROUP, None, ResourcePatternType.ANY) == [group]


def test_create_acls_refuses_what_kafka_refuses(admin):
    bad = allow(ResourceType.BROKER, "other-cluster", AclOperation.ALTER)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([bad])[bad].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in refused.value.args[0].str()


def test_describe_acls_needs_describe_on_the_cluster(cluster, admin):
    create(admin, deny(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE))
    everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(KafkaPythonResourceType.ANY, None,
                                                                  ACLResourcePatternType.ANY))
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kafka_admin.describe_acls(everything)
        denial = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*",
                                  AclOperation.DESCRIBE, AclPermissionType.DENY)
        assert len(admin.delete_acls([denial])[denial].result(TIMEOUT_S)) == 1
        found, error = kafka_admin.describe_acls(everything)
        assert error.errno == 0 and len(found) == 2  # the two that administer ACLs
    finally:
        kafka_admin.close()


@pytest.mark.kraftwerk(nodes=1)
def test_acl_apis_answer_security_disabled_without_an_authorizer(kraftwerk_cluster):
    admin = AdminClient({"bootstrap.servers": kraftwerk_cluster.bootstrap_servers})
    binding = allow(ResourceType.TOPIC, "orders", AclOperation.READ)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding])[binding].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED


# --- topics ---

def test_producing_needs_write_on_the_topic(cluster, admin):
    topic = topic_named(cluster)
    assert error_code(delivery_error(cluster, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert delivery_error(cluster, topic) is None


def test_a_prefixed_acl_covers_every_topic_it_begins(cluster, admin):
    covered, other = topic_named(cluster, "sales"), topic_named(cluster, "salt")
    create(admin, allow(ResourceType.TOPIC, "sales-", AclOperation.WRITE, ResourcePatternType.PREFIXED))
    assert delivery_error(cluster, covered) is None
    assert error_code(delivery_error(cluster, other)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_wildcard_covers_every_topic_and_deny_beats_allow(cluster, admin):
    open_topic, closed_topic = topic_named(cluster), topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, "*", AclOperation.ALL),
           deny(ResourceType.TOPIC, closed_topic, AclOperation.WRITE))
    assert delivery_error(cluster, open_topic) is None
    assert error_code(delivery_error(cluster, closed_topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_acl_for_another_host_does_not_apply(cluster, admin):
    topic = topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE, host="10.99.99.99"))
    assert error_code(delivery_error(cluster, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE, host="127.0.0.1"))
    assert delivery_error(cluster, topic) is None


def test_metadata_lists_only_the_topics_the_principal_may_describe(cluster, admin):
    described, written, hidden = topic_named(cluster, "seen"), topic_named(cluster, "seen"), topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, described, AclOperation.DESCRIBE),
           allow(ResourceType.TOPIC, written, AclOperation.WRITE))  # WRITE implies DESCRIBE
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert set(kafka_admin.list_topics()) == {described, written}
        assert hidden not in admin.list_topics(timeout=TIMEOUT_S).topics
    finally:
        kafka_admin.close()
    # Asked for by name, a hidden topic is refused by name; by id, by id alone (its name stays hidden).
    hidden_too = topic_named(cluster)
    asked = [MetadataRequest[12].MetadataRequestTopic(name=hidden, topic_id=None),
             MetadataRequest[12].MetadataRequestTopic(name=None, topic_id=TOPIC_IDS[hidden_too])]
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        answer = exchange(sock, MetadataRequest[12](topics=asked, allow_auto_topic_creation=False,
                                                    include_topic_authorized_operations=False),
                          MetadataResponse, 12)
    assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, hidden, None),  # (kafka-python reads the zero id as None)
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, None, TOPIC_IDS[hidden_too])]


def test_a_consumer_needs_read_on_the_topic(cluster, admin):
    topic = topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert delivery_error(cluster, topic) is None
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.poll(timeout_ms=5000)
        create(admin, allow(ResourceType.TOPIC, topic, AclOperation.READ))
        consumer.seek(TopicPartition(topic, 0), 0)
        assert [m.value for m in consumer] == [b"hello"]
    finally:
        consumer.close()


# --- groups, transactional ids, the cluster ---

def consume_in_group(cluster, topic: str, group: str) -> tuple[list[bytes], int | None]:
    """(values read, the first error code) of a confluent-kafka consumer in group."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest"})
    values, error = [], None
    try:
        consumer.subscribe([topic])
        for _ in range(20):
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                error = message.error().code()
                break
            values.append(message.value())
            break
    finally:
        consumer.close()
    return values, error


def test_a_group_needs_read_on_the_group(cluster, admin):
    topic, group = topic_named(cluster), f"group-{uuid.uuid4().hex[:8]}"
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.ALL))
    assert delivery_error(cluster, topic) is None
    assert consume_in_group(cluster, topic, group) == ([], KafkaError.GROUP_AUTHORIZATION_FAILED)
    create(admin, allow(ResourceType.GROUP, group, AclOperation.READ))
    assert consume_in_group(cluster, topic, group) == ([b"hello"], None)
    described = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)  # READ implies DESCRIBE
    assert (described.group_id, described.state.name) == (group, "EMPTY")

    reader = AclBindingFilter(ResourceType.GROUP, group, ResourcePatternType.LITERAL, ANONYMOUS, "*",
                              AclOperation.READ, AclPermissionType.ALLOW)
    assert len(admin.delete_acls([reader])[reader].result(TIMEOUT_S)) == 1
    with pytest.raises(KafkaException) as refused:
        admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE on the cluster (the ACL administrators have it) lists every group all the same
    assert group in [g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid]


def test_a_transactional_producer_needs_write_on_its_transactional_id(cluster, admin):
    topic, transactional_id = topic_named(cluster), f"tx-{uuid.uuid4().hex[:8]}"
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    config = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id}
    producer = Producer(config)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    create(admin, allow(ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE))
    producer = Producer(config)
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(TIMEOUT_S)


def test_creating_topics_needs_create_on_the_cluster_or_the_topic(cluster, admin):
    first, second = (f"created-{uuid.uuid4().hex[:8]}" for _ in range(2))
    refused = admin.create_topics([NewTopic(first, 1, 1)])[first]
    with pytest.raises(KafkaException) as failure:
        refused.result(TIMEOUT_S)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, allow(ResourceType.TOPIC, first, AclOperation.CREATE))
    assert admin.create_topics([NewTopic(first, 1, 1)])[first].result(TIMEOUT_S) is None
    create(admin, allow(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE))
    assert admin.create_topics([NewTopic(second, 1, 1)])[second].result(TIMEOUT_S) is None


def test_kafka_python_admin_creates_describes_and_deletes_acls(cluster, admin):
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        acl = ACL(principal=ANONYMOUS, host="*", operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KafkaPythonResourceType.GROUP, "readers",
                                                   ACLResourcePatternType.PREFIXED))
        created = kafka_admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        acl_filter = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(KafkaPythonResourceType.GROUP, "readers-1",
                                                                      ACLResourcePatternType.MATCH))
        found, error = kafka_admin.describe_acls(acl_filter)
        assert error.errno == 0 and [(a.principal, a.resource_pattern.resource_name) for a in found] == [
            (ANONYMOUS, "readers")]
        [(_, matched, error)] = kafka_admin.delete_acls([acl_filter])
        assert error.errno == 0 and [(a.resource_pattern.resource_name, a.operation) for a in matched] == [
            ("readers", ACLOperation.READ)]
    finally:
        kafka_admin.close()


# --- the command line ---

def kraftwerk(cluster, *args: str) -> str:
    result = subprocess.run([*KRAFTWERK, "acl", *args, "--data-dir", str(cluster.data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_kraftwerk_acl_adds_lists_and_removes_in_kafka_acls_words(cluster, admin):
    topic = topic_named(cluster)
    kraftwerk(cluster, "add", "--allow-principal", ANONYMOUS, "--producer", "--topic", topic)
    assert delivery_error(cluster, topic) is None
    resource = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert kraftwerk(cluster, "list", "--topic", topic) == (
        f"Current ACLs for resource `{resource}`: \n"
        f" \t(principal={ANONYMOUS}, host=*, operation=CREATE, permissionType=ALLOW) \n"
        f" \t(principal={ANONYMOUS}, host=*, operation=DESCRIBE, permissionType=ALLOW) \n"
        f" \t(principal={ANONYMOUS}, host=*, operation=WRITE, permissionType=ALLOW) \n\n")
    assert kraftwerk(cluster, "remove", "--topic", topic, "--allow-principal", ANONYMOUS,
                     "--operation", "Write").splitlines()[1] == (
        f" \t(principal={ANONYMOUS}, host=*, operation=WRITE, permissionType=ALLOW) ")
    assert error_code(delivery_error(cluster, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    listed = json.loads(kraftwerk(cluster, "list", "--topic", topic, "--bootstrap-server", cluster.bootstrap_servers,
                                  "--json"))
    assert sorted(acl["operation"] for acl in listed) == ["CREATE", "DESCRIBE"]


# --- two SASL PLAIN users: alice allowed, bob denied ---

SASL_LISTENER = "sasl_plaintext"
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_AUTHORIZED = {
    **AUTHORIZED, "super.users": "User:admin",
    "listeners": "INTERNAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN",
    f"listener.name.{SASL_LISTENER}.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
        "password=\"admin-secret\" " + " ".join(f'user_{u}="{p}"' for u, p in SASL_USERS.items()) + ";",
}


@pytest.fixture(scope="module")
def sasl_cluster():
    with Cluster(nodes=1, node_config=SASL_AUTHORIZED) as running:
        yield running


def as_user(cluster, user: str) -> dict:
    bootstrap = ",".join(f"127.0.0.1:{node.ports['SASL_PLAINTEXT']}" for node in cluster.nodes.values())
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": SASL_USERS[user]}


def produced_as(cluster, user: str, topic: str) -> int | None:
    producer = Producer({**as_user(cluster, user), "message.timeout.ms": 5000})
    outcome = []
    producer.produce(topic, user.encode(), on_delivery=lambda error, message: outcome.append(error))
    producer.flush(TIMEOUT_S)
    return error_code(outcome[0])


def test_alice_is_allowed_what_her_acls_grant_and_bob_nothing(sasl_cluster):
    admin = AdminClient(as_user(sasl_cluster, "admin"))  # the super user
    topic, group = f"sasl-acl-{uuid.uuid4().hex[:8]}", f"sasl-group-{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S) is None
    create(admin, *(allow(ResourceType.TOPIC, topic, operation, principal="User:alice")
                    for operation in (AclOperation.WRITE, AclOperation.READ)),
           allow(ResourceType.GROUP, group, AclOperation.READ, principal="User:alice"),
           allow(ResourceType.TOPIC, topic, AclOperation.READ, principal="User:bob"))  # (so only the group refuses him)

    assert produced_as(sasl_cluster, "alice", topic) is None
    assert produced_as(sasl_cluster, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topic in AdminClient(as_user(sasl_cluster, "alice")).list_topics(timeout=TIMEOUT_S).topics
    assert set(AdminClient(as_user(sasl_cluster, "bob")).list_topics(timeout=TIMEOUT_S).topics) == {topic}

    def consumed_as(user: str) -> tuple[list[bytes], int | None]:
        consumer = Consumer({**as_user(sasl_cluster, user), "group.id": group, "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            for _ in range(20):
                message = consumer.poll(1)
                if message is not None:
                    return ([], message.error().code()) if message.error() else ([message.value()], None)
            return [], None
        finally:
            consumer.close()

    assert consumed_as("alice") == ([b"alice"], None)
    assert consumed_as("bob") == ([], KafkaError.GROUP_AUTHORIZATION_FAILED)
    bob_binding = allow(ResourceType.TOPIC, topic, AclOperation.WRITE, principal="User:bob")
    bobs_admin = AdminClient(as_user(sasl_cluster, "bob"))
    with pytest.raises(KafkaException) as refused:
        bobs_admin.create_acls([bob_binding])[bob_binding].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_authorized_operations_are_those_the_acls_allow(cluster, admin):
    topic = topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    described = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert sorted(described.authorized_operations, key=lambda op: op.value) == [AclOperation.ALTER,
                                                                                AclOperation.DESCRIBE]
    [(_, future)] = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True).items()
    assert sorted(future.result(TIMEOUT_S).authorized_operations, key=lambda op: op.value) == [
        AclOperation.WRITE, AclOperation.DESCRIBE]


def test_a_kip_848_consumer_needs_describe_on_its_subscribed_topics(cluster, admin):
    topic, group = topic_named(cluster), f"group-{uuid.uuid4().hex[:8]}"
    create(admin, allow(ResourceType.GROUP, group, AclOperation.READ))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        error = next((m.error().code() for m in (consumer.poll(1) for _ in range(10)) if m is not None and m.error()),
                     None)
    finally:
        consumer.close()
    assert error == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_follower_fetch_needs_cluster_action_where_a_consumer_needs_read(cluster, admin):
    topic = topic_named(cluster)
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.ALL))
    T = FetchRequest.FetchTopic

    def fetched_error(replica_id: int) -> int:
        part = T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                log_start_offset=-1, last_fetched_epoch=-1)
        request = FetchRequest[12](replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                   isolation_level=0, session_id=0, session_epoch=-1,
                                   topics=[T(topic=topic, partitions=[part])], forgotten_topics_data=[], rack_id="")
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
            response = exchange(sock, request, FetchResponse, 12)
        return response.responses[0].partitions[0].error_code

    assert fetched_error(-1) == 0  # a consumer, with READ (ALL)
    assert fetched_error(2) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # a follower, without CLUSTER_ACTION


def test_configs_need_describe_configs_on_the_topic_or_the_cluster(cluster, admin):
    topic = topic_named(cluster)

    def describe_error(resource: ConfigResource) -> int | None:
        try:
            admin.describe_configs([resource])[resource].result(TIMEOUT_S)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    topic_resource, broker_resource = ConfigResource("topic", topic), ConfigResource("broker", "1")
    assert describe_error(topic_resource) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert describe_error(broker_resource) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    create(admin, allow(ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    assert describe_error(topic_resource) is None


# --- a cluster the fixture secures: SCRAM users, the super user's nodes replicating under ACLs ---

@pytest.mark.kraftwerk(nodes=3, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                       users=["alice", "bob"])
def test_scram_users_under_acls_on_a_replicated_cluster(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    topic = f"replicated-{uuid.uuid4().hex[:8]}"
    kraftwerk(cluster, "add", "--allow-principal", "User:alice", "--producer", "--topic", topic,
              "--bootstrap-server", cluster.bootstrap_servers)  # as the super user, from cluster.json
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()})
    assert admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(TIMEOUT_S) is None

    def produced_by(user: str) -> int | None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config(user),
                             "acks": "all", "message.timeout.ms": 10000})
        outcome = []
        producer.produce(topic, user.encode(), on_delivery=lambda error, message: outcome.append(error))
        producer.flush(TIMEOUT_S)
        return error_code(outcome[0])

    # acks=all: the followers (the super user, over SASL) replicated it
    assert produced_by("alice") is None
    assert produced_by("bob") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, **cluster.kafka_python_config())
    try:
        consumer.assign([TopicPartition(topic, 0)])
        assert [m.value for m in consumer] == [b"alice"]
    finally:
        consumer.close()
