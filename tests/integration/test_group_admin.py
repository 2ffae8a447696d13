"""What admins and tools see of the new group types, with real clients: group configs through
confluent-kafka's and kafka-python's admin clients, consumer groups (KIP-848) listed and described by
confluent-kafka's AdminClient and by `kraftwerk group`, rebalanced and shrunk on demand; share
groups (KIP-932) listed and described, with their records in flight."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ConfigResource as KafkaPythonResource, ConfigResourceType
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import (
    FindCoordinatorRequest, FindCoordinatorResponse,
)
from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse
from kafka.structs import OffsetAndMetadata, TopicPartition as KafkaPythonPartition

from cluster.launch import Cluster
from node.apis import schemas
from node.apis.consumer_group_describe import (
    CLASSIC_MEMBER, CONSUMER_MEMBER, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
)
from tests.integration.test_cli import KRAFTWERK, kraftwerk
from tests.integration.txn_wire import leader_of
from tests.integration.wire import exchange_once

PARTITIONS = 4
WAIT_S = 60
# Every group config with its default on a cluster launched by kraftwerk (cluster/formats/config.py).
DEFAULTS = {
    "consumer.heartbeat.interval.ms": "500", "consumer.session.timeout.ms": "10000",
    "share.auto.offset.reset": "latest", "share.heartbeat.interval.ms": "500",
    "share.isolation.level": "read_uncommitted", "share.record.lock.duration.ms": "30000",
    "share.session.timeout.ms": "10000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("group-admin") / "cluster") as running:
        yield running


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def address(cluster, node_id: int | None = None) -> tuple[str, int]:
    host, port = cluster.address(cluster.nodes[node_id or min(cluster.nodes)]).rsplit(":", 1)
    return host, int(port)


# --- group configs ---

def group_configs(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in future.result(timeout=WAIT_S).items()}


def alter(admin: AdminClient, group: str, *changes: tuple[str, str | None]) -> None:
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET if value is not None
                           else AlterConfigOpType.DELETE) for name, value in changes]
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                               incremental_configs=entries)]).values()
    future.result(timeout=WAIT_S)


def refusal(admin: AdminClient, group: str, name: str, value: str) -> tuple[int, str]:
    with pytest.raises(KafkaException) as refused:
        alter(admin, group, (name, value))
    error = refused.value.args[0]
    return error.code(), error.str()


def test_group_configs_are_set_described_with_their_sources_and_deleted(admin):
    group = f"configured-{uuid.uuid4().hex[:6]}"  # a group config needs no group
    defaults = {name: (value, ConfigSource.DEFAULT_CONFIG) for name, value in DEFAULTS.items()}
    assert group_configs(admin, group) == defaults
    alter(admin, group, ("consumer.heartbeat.interval.ms", "2000"), ("share.auto.offset.reset", "by_duration:PT1H"))
    assert group_configs(admin, group) == {
        **defaults, "consumer.heartbeat.interval.ms": ("2000", ConfigSource.GROUP_CONFIG),
        "share.auto.offset.reset": ("by_duration:PT1H", ConfigSource.GROUP_CONFIG)}
    alter(admin, group, ("consumer.heartbeat.interval.ms", None))
    assert group_configs(admin, group) == {
        **defaults, "share.auto.offset.reset": ("by_duration:PT1H", ConfigSource.GROUP_CONFIG)}


@pytest.mark.parametrize("name, value, message", [
    ("consumer.heartbeat.interval.ms", "50",
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "500",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("share.record.lock.duration.ms", "7200000",
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ("share.isolation.level", "read_everything",
     "Invalid value read_everything for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ("session.timeout.ms", "10000", "Unknown group config name: session.timeout.ms"),
])
def test_invalid_group_configs_are_refused_with_invalid_config(admin, name, value, message):
    group = f"refused-{uuid.uuid4().hex[:6]}"
    assert refusal(admin, group, name, value) == (KafkaError.INVALID_CONFIG, message)
    assert group_configs(admin, group) == {name: (value, ConfigSource.DEFAULT_CONFIG)
                                           for name, value in DEFAULTS.items()}


def test_kafka_python_replaces_and_describes_group_configs(cluster):
    group = f"replaced-{uuid.uuid4().hex[:6]}"
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        resource = KafkaPythonResource(ConfigResourceType.GROUP, group, configs={"share.isolation.level": "read_committed"})
        assert client.alter_configs([resource]) == {"group": {group: "OK"}}
        described = client.describe_configs([KafkaPythonResource(ConfigResourceType.GROUP, group)])
        assert described["group"][group]["share.isolation.level"]["value"] == "read_committed"
        assert described["group"][group]["share.isolation.level"]["config_source"] == "DYNAMIC_GROUP_CONFIG"
        bad = KafkaPythonResource(ConfigResourceType.GROUP, group, configs={"share.session.timeout.ms": "0"})
        assert client.alter_configs([bad]) == {"group": {group: (
            "[Error 40] InvalidConfigurationError: Invalid value 0 for configuration share.session.timeout.ms: "
            "Value must be at least 1")}}
    finally:
        client.close()


# --- consumer groups (KIP-848) ---

class Member:
    """A confluent-kafka consumer of the consumer protocol, polling in its own thread; `assigned` is
    what the client itself holds after each poll."""

    def __init__(self, cluster, group: str, topic: str, client_id: str):
        self.consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                                  "group.protocol": "consumer", "client.id": client_id,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.assigned: set[int] = set()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"confluent-kafka-{client_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.1)
            self.assigned = {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.thread.join(timeout=WAIT_S)
        self.consumer.close()


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def described(admin: AdminClient, group: str):
    [future] = admin.describe_consumer_groups([group]).values()
    return future.result(timeout=WAIT_S)


def cli_describe(cluster, group: str) -> dict:
    return json.loads(kraftwerk("group", "describe", group, "--json", data_dir=cluster.data_dir).stdout)


def settled(cluster, group: str, members: int) -> dict | None:
    """The CLI's description once the group is Stable with `members` members, each holding its target."""
    document = cli_describe(cluster, group)
    if document["state"] != "Stable" or len(document["members"]) != members:
        return None
    if any(m["assignment"] != m["target_assignment"] for m in document["members"]):
        return None
    return document


@pytest.fixture
def consumer_group(cluster):
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    group = f"modern-{uuid.uuid4().hex[:6]}"
    members = [Member(cluster, group, topic, f"member-{i}") for i in range(2)]
    try:
        wait_for(lambda: sorted(len(m.assigned) for m in members) == [2, 2]
                 and set().union(*(m.assigned for m in members)) == set(range(PARTITIONS)),
                 "two members with two partitions each")
        yield group, topic, members
    finally:
        for member in members:
            member.close()


def classic_group(cluster, topic: str) -> str:
    """An Empty classic group, made by a kafka-python commit."""
    group = f"classic-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({KafkaPythonPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()
    return group


def test_a_consumer_group_is_listed_by_type_and_described_with_its_members_assignments(cluster, admin,
                                                                                      consumer_group):
    group, topic, members = consumer_group
    classic = classic_group(cluster, topic)

    def listed(kind):
        return {g.group_id: g for g in admin.list_consumer_groups(types={kind}).result(timeout=WAIT_S).valid}
    consumers, classics = listed(ConsumerGroupType.CONSUMER), listed(ConsumerGroupType.CLASSIC)
    assert group in consumers and classic not in consumers
    assert classic in classics and group not in classics
    assert consumers[group].type == ConsumerGroupType.CONSUMER
    empty_classics = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC},
                                                states={ConsumerGroupState.EMPTY}).result(timeout=WAIT_S).valid
    assert classic in {g.group_id for g in empty_classics} and group not in {g.group_id for g in empty_classics}

    description = wait_for(lambda: (d := described(admin, group)) and len(d.members) == 2 and d, "two members")
    assert description.type == ConsumerGroupType.CONSUMER
    by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in description.members}
    assert by_client == {"member-0": members[0].assigned, "member-1": members[1].assigned}
    assert {m.client_id: {tp.partition for tp in m.target_assignment.topic_partitions}
            for m in description.members} == by_client
    assert all(tp.topic == topic for m in description.members for tp in m.assignment.topic_partitions)

    document = wait_for(lambda: settled(cluster, group, 2), "a Stable group")
    assert document["type"] == "consumer" and document["assignment_epoch"] == document["group_epoch"]
    assert {m["client_id"]: m["member_epoch"] for m in document["members"]} == {
        "member-0": document["group_epoch"], "member-1": document["group_epoch"]}
    assert {m["client_id"]: m["assignment"] for m in document["members"]} == {
        f"member-{i}": sorted([topic, p] for p in members[i].assigned) for i in range(2)}
    listed_text = kraftwerk("group", "list", data_dir=cluster.data_dir).stdout
    assert any(group in line and "consumer" in line for line in listed_text.splitlines())
    assert any(classic in line and "classic" in line and "Empty" in line for line in listed_text.splitlines())


# A member in a process of its own, which the test can stop (SIGSTOP) as a stuck member would be.
MEMBER_PROGRAM = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                     "client.id": "member-0", "enable.auto.commit": False})
consumer.subscribe([sys.argv[3]])
while True:
    consumer.poll(0.1)
"""


def test_rebalance_bumps_the_epoch_and_remove_member_hands_its_partitions_over(cluster):
    topic = f"removal-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    group = f"shrunk-{uuid.uuid4().hex[:6]}"
    stuck = subprocess.Popen([sys.executable, "-c", MEMBER_PROGRAM, cluster.bootstrap_servers, group, topic])
    member = Member(cluster, group, topic, "member-1")
    try:
        before = wait_for(lambda: settled(cluster, group, 2), "a Stable group of two")["group_epoch"]
        out = kraftwerk("group", "rebalance", group, data_dir=cluster.data_dir).stdout
        assert f"(group epoch now {before + 1}, 2 members to reconcile)" in out
        assert wait_for(lambda: settled(cluster, group, 2), "a Stable group again")["group_epoch"] == before + 1

        stuck.send_signal(signal.SIGSTOP)  # it heartbeats no more, but its session has not run out
        gone = next(m for m in cli_describe(cluster, group)["members"] if m["client_id"] == "member-0")
        out = kraftwerk("group", "remove-member", group, gone["member_id"], data_dir=cluster.data_dir).stdout
        assert out == f"consumer group {group}: removed member {gone['member_id']} (group epoch now {before + 2})\n"
        document = wait_for(lambda: settled(cluster, group, 1), "the other member alone")
        assert document["group_epoch"] == before + 2
        assert [(m["client_id"], m["assignment"]) for m in document["members"]] == [
            ("member-1", [[topic, p] for p in range(PARTITIONS)])]
        wait_for(lambda: member.assigned == set(range(PARTITIONS)), "member-1 to hold every partition")
    finally:
        stuck.kill()
        stuck.wait()
        member.close()


def test_a_consumer_group_is_deleted_only_once_empty_and_keeps_subscribed_offsets(cluster, admin, consumer_group):
    group, topic, members = consumer_group
    [future] = admin.delete_consumer_groups([group]).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=WAIT_S)
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    coordinator = cluster.node_control(min(cluster.nodes), "group_coordinator", group_id=group)["coordinator"]
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    answer = exchange_once(address(cluster, coordinator), OffsetDeleteRequest[0](group_id=group, topics=[
        T(name=topic, partitions=[T.OffsetDeleteRequestPartition(partition_index=0)])]), OffsetDeleteResponse, 0)
    assert answer.error_code == 0
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [
        (0, KafkaError.GROUP_SUBSCRIBED_TO_TOPIC)]
    wait_for(lambda: settled(cluster, group, 2), "a Stable group")
    refused = subprocess.run([*KRAFTWERK, "group", "reset-offsets", group, "--topic", topic, "--to-earliest",
                              "--data-dir", str(cluster.data_dir)], capture_output=True, text=True, timeout=120)
    assert (refused.returncode, refused.stderr) == (1, f"Error: offsets of consumer group '{group}' can only be "
                                                       f"reset while it is inactive, but its state is Stable.\n")

    for member in members:
        member.close()  # each leaves the group
    wait_for(lambda: cli_describe(cluster, group)["state"] == "Empty", "an Empty group")
    [future] = admin.delete_consumer_groups([group]).values()
    assert future.result(timeout=WAIT_S) is None
    listed = admin.list_consumer_groups().result(timeout=WAIT_S).valid
    assert group not in {g.group_id for g in listed}
    refused = subprocess.run([*KRAFTWERK, "group", "describe", group, "--data-dir", str(cluster.data_dir)],
                             capture_output=True, text=True, timeout=120)
    assert (refused.returncode, refused.stderr) == (1, f"Error: consumer group '{group}' does not exist.\n")


def test_a_consumer_groups_coordinator_moves_and_the_new_one_describes_it(cluster, consumer_group):
    group, topic, members = consumer_group
    before = wait_for(lambda: settled(cluster, group, 2), "a Stable group")
    old = coordinator_of(cluster, group)
    out = kraftwerk("group", "move-coordinator", group, data_dir=cluster.data_dir).stdout
    assert out.startswith(f"consumer group {group}: coordinator moved from node {old} to node ")
    assert coordinator_of(cluster, group) != old
    after = wait_for(lambda: settled(cluster, group, 2), "the group Stable at its new coordinator")
    assert {m["member_id"] for m in after["members"]} == {m["member_id"] for m in before["members"]}
    assert {m["client_id"]: m["assignment"] for m in after["members"]} == {
        f"member-{i}": sorted([topic, p] for p in members[i].assigned) for i in range(2)}


def test_consumer_group_describe_v1_tells_a_groups_classic_member_from_its_consumer_one(cluster):
    from tests.integration.test_consumer_groups import MemberProcess, all_assigned, new_topic

    topic, group = new_topic(cluster, PARTITIONS), f"mixed-{uuid.uuid4().hex[:6]}"
    members = [MemberProcess(cluster, group, topic, protocol="classic")]
    try:
        wait_for(lambda: all_assigned(members, topic, PARTITIONS), "the classic member's partitions")
        members.append(MemberProcess(cluster, group, topic, protocol="consumer"))  # upgrades the group
        wait_for(lambda: members[1].owned() and all_assigned(members, topic, PARTITIONS), "both members' partitions")
        coordinator = address(cluster, coordinator_of(cluster, group))
        request = ConsumerGroupDescribeRequest[1](group_ids=[group], include_authorized_operations=False)
        [described] = exchange_once(coordinator, request, ConsumerGroupDescribeResponse, 1).groups
        assert described.error_code == 0
        assert sorted((m.member_type, len(m.assignment.topic_partitions[0].partitions)) for m in described.members) \
            == [(CLASSIC_MEMBER, 2), (CONSUMER_MEMBER, 2)]
    finally:
        for member in members:
            member.kill()


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


def coordinator_of(cluster, group: str) -> int:
    """The group's coordinator, found with FindCoordinator (which creates `__consumer_offsets` first)."""
    def found():
        answer = exchange_once(address(cluster), FindCoordinatorRequest[2](key=group, key_type=0),
                               FindCoordinatorResponse, 2)
        return answer.node_id if answer.error_code == 0 else None
    return wait_for(found, f"a coordinator of {group}")


def test_a_member_is_told_its_groups_own_heartbeat_interval(cluster, admin):
    topic = f"paced-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1)
    group = f"paced-{uuid.uuid4().hex[:6]}"
    coordinator = coordinator_of(cluster, group)

    def heartbeat(member_id: str, epoch: int):
        return exchange_once(address(cluster, coordinator), ConsumerGroupHeartbeatRequest[1](
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=[topic] if epoch == 0 else None,
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=[] if epoch == 0 else None),
            ConsumerGroupHeartbeatResponse, 1)

    def told_interval() -> int:
        """The interval a member joining now is told; it leaves again at once."""
        member_id = uuid.uuid4().hex[:22]
        joined = heartbeat(member_id, 0)
        assert joined.error_code == 0
        assert heartbeat(member_id, -1).error_code == 0
        return joined.heartbeat_interval_ms

    assert told_interval() == 500  # group.consumer.heartbeat.interval.ms
    alter(admin, group, ("consumer.heartbeat.interval.ms", "2000"))
    # The coordinator reads the group config from its metadata image, which follows the controller's
    # log a moment behind the node that answered the change.
    wait_for(lambda: told_interval() == 2000, "the group's own interval")
    alter(admin, group, ("consumer.heartbeat.interval.ms", None))
    wait_for(lambda: told_interval() == 500, "the broker's interval again")


# --- share groups (KIP-932) ---

def test_a_share_group_is_listed_as_share_and_described_with_its_members(cluster):
    from confluent_kafka import ShareConsumer

    topic = f"shared-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    group = f"share-{uuid.uuid4().hex[:6]}"
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                              "client.id": "sharer"})
    try:
        consumer.subscribe([topic])
        stop = threading.Event()
        poller = threading.Thread(target=lambda: [consumer.poll(0.1) for _ in iter(stop.is_set, True)], daemon=True)
        poller.start()
        try:
            document = wait_for(lambda: (d := cli_describe(cluster, group)) and d["members"]
                                and d["members"][0]["assignment"] and d, "the share member's assignment")
        finally:
            stop.set()
            poller.join(timeout=WAIT_S)
        assert document["type"] == "share" and document["state"] == "Stable"
        assert [(m["client_id"], m["assignment"]) for m in document["members"]] == [
            ("sharer", [[topic, 0], [topic, 1]])]
        client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            shares = client.list_groups(types_filter=["share"])
            consumers = client.list_groups(types_filter=["consumer"])
        finally:
            client.close()
        assert [(g["group_id"], g["group_type"], g["protocol_type"]) for g in shares if g["group_id"] == group] == [
            (group, "share", "share")]
        assert group not in {g["group_id"] for g in consumers}
    finally:
        consumer.close()


def test_a_share_group_is_described_with_its_records_in_flight(cluster, admin):
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

    topic, group = f"inflight-{uuid.uuid4().hex[:8]}", f"share-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    alter(admin, group, ("share.auto.offset.reset", "earliest"))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 100})
    for i in range(10):  # one batch: a share fetch acquires it whole
        producer.produce(topic, value=f"m{i}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    try:
        consumer.subscribe([topic])
        messages = wait_for(lambda: consumer.poll(0.5), "the share consumer's first records")
        assert [m.offset() for m in messages] == list(range(10))
        # Offsets 0-3 accepted, 4-5 rejected, 6-9 still held by the consumer.
        for message in messages[:6]:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT if message.offset() < 4 else AcknowledgeType.REJECT)
        consumer.commit_sync()
        document = wait_for(lambda: (d := cli_describe(cluster, group))["partitions"]
                            and d["partitions"][0]["start_offset"] == 6 and d, "the acknowledgements")
        assert document["partitions"] == [{
            "topic": topic, "partition": 0, "leader": leader_of(cluster, topic, 0), "start_offset": 6,
            "end_offset": 10, "available": 0, "acquired": 4, "acknowledged": 0, "archived": 0}]
        text = kraftwerk("group", "describe", group, data_dir=cluster.data_dir).stdout
        assert "records in flight" in text
    finally:
        consumer.close()
