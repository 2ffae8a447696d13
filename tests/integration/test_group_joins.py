"""Classic consumer groups joined by real clients, as a matrix: every assignment strategy each
client library offers × three ways of joining × each library.

- together: three members start at once, so that all of them join a new group while its
  first rebalance is still preparing (the cluster holds it for group.initial.rebalance.delay.ms,
  as Kafka does, whose default is 3 s);
- staggered: three members start one after another, each once the one before it is reading;
- restarting: of three members reading, one closes as a new one joins.

A producer writes to every partition all along. Each case asserts that no member saw an
error (an exception, an error callback, event or log line of its client: members refused
with INCONSISTENT_GROUP_PROTOCOL while the first rebalance was preparing, issue 24, showed
as such errors), that every member read (so every one was given partitions), that every
message written was read exactly as written and none twice (each member commits what it
read before it reads on, and closes cleanly), and that the group's committed offsets are
the ends of the partitions.
"""
from __future__ import annotations

import functools
import uuid
from collections import Counter
from contextlib import ExitStack

import pytest

from cluster.launch import Cluster
from tests.integration import go_programs
from tests.integration.group_members import (
    AIOKAFKA_ASSIGNORS, KAFKA_PYTHON_ASSIGNORS, AiokafkaMember, ConfluentMember, KafkaJSMember, KafkaPythonMember,
    Producer, SaramaMember, assignor, client_errors, wait_for_coordinator, wait_until,
)
from tests.integration.js_programs import kafkajs_missing
from tests.integration.observe import committed, logged_errors

PARTITIONS = 6
MEMBERS = 3
# Long enough that members started together all join while the first rebalance is preparing.
INITIAL_REBALANCE_DELAY_MS = 1000

STRATEGIES = {
    "confluent-kafka": ["range", "roundrobin", "cooperative-sticky"],
    "kafka-python": list(KAFKA_PYTHON_ASSIGNORS),
    "aiokafka": list(AIOKAFKA_ASSIGNORS),
    "kafkajs": ["roundrobin"],  # KafkaJS has one assigner of its own
    "sarama": ["range", "roundrobin"],  # Sarama 1.22 has no sticky strategy (later releases do)
}
SCENARIOS = ["together", "staggered", "restarting"]
MATRIX = [pytest.param(client, strategy, scenario, id=f"{client}-{strategy}-{scenario}")
          for client, strategies in STRATEGIES.items() for strategy in strategies for scenario in SCENARIOS]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # A data dir of our own outlives stop(), so the logs are read to the end of the shutdown.
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("cluster"),
                 node_config={"group.initial.rebalance.delay.ms": str(INITIAL_REBALANCE_DELAY_MS)}) as running:
        yield running
    logged = logged_errors(running)
    assert logged == {name: [] for name in logged}, "errors logged while serving these groups"


@pytest.fixture(scope="module")
def go_bin():
    with go_programs.built() as binaries:
        yield binaries


@pytest.fixture
def member_class(request, client: str, strategy: str):
    """What makes a member of this client library; skips when the library is not installed."""
    if client == "confluent-kafka":
        pytest.importorskip("confluent_kafka")
        return ConfluentMember
    if client == "kafka-python":
        if assignor(KAFKA_PYTHON_ASSIGNORS[strategy]) is None:
            pytest.skip(f"the installed kafka-python has no {strategy} assignor")
        return KafkaPythonMember
    if client == "aiokafka":
        pytest.importorskip("aiokafka")
        if assignor(AIOKAFKA_ASSIGNORS[strategy]) is None:
            pytest.skip(f"the installed aiokafka has no {strategy} assignor")
        return AiokafkaMember
    if client == "kafkajs":
        reason = kafkajs_missing()
        if reason:
            pytest.skip(reason)
        return KafkaJSMember
    return functools.partial(SaramaMember, binary=request.getfixturevalue("go_bin")["sarama-group"])


def reading(*members) -> bool:
    return all(member.records() for member in members)


def start_together(start, members) -> None:
    for _ in range(MEMBERS):
        start()
    wait_until(lambda: reading(*members), "every member reading", members)


def start_staggered(start, members) -> None:
    for _ in range(MEMBERS):
        member = start()
        wait_until(lambda: reading(member), f"{member.name} reading", members)


def restart_one(start, members) -> None:
    start_together(start, members)
    leaving, staying = members[0], members[1:]
    joining = start()
    leaving.stop()
    before = {member.name: len(member.records()) for member in staying}
    wait_until(lambda: reading(joining) and all(len(m.records()) > before[m.name] for m in staying),
               f"{joining.name} reading, and the others reading on", members)


SCENARIO_STEPS = {"together": start_together, "staggered": start_staggered, "restarting": restart_one}


@pytest.mark.parametrize("client, strategy, scenario", MATRIX)
def test_every_member_reads_its_share_without_error(cluster, member_class, client, strategy, scenario, caplog):
    tag = uuid.uuid4().hex[:8]
    topic, group = f"joins-{tag}", f"joins-{client}-{strategy}-{scenario}-{tag}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    wait_for_coordinator(cluster, group)
    members = []
    with ExitStack() as running:
        def start():
            member = member_class(f"{client}-{len(members)}", cluster.bootstrap_servers, topic, group, strategy)
            members.append(member)
            running.callback(member.stop)
            member.start()
            return member

        producer = Producer(cluster.bootstrap_servers, topic, PARTITIONS)
        try:
            SCENARIO_STEPS[scenario](start, members)
        finally:
            written = producer.stop()
        wait_until(lambda: {(r.partition, r.offset) for m in members for r in m.records()} >= set(written),
                   "every message read", members)
    # Every member has closed: what each read and reported is complete.
    assert {m.name: m.errors() for m in members} == {m.name: [] for m in members}
    assert client_errors(caplog.records) == []
    assert [m.name for m in members if not m.records()] == [], "members that were given no partition"
    read = [record for member in members for record in member.records()]
    assert {(r.partition, r.offset): r.value for r in read} == written
    assert [position for position, times in Counter((r.partition, r.offset) for r in read).items() if times > 1] == []
    # The producer is the partitions' only writer, so each one ends at the count written to it.
    ends = Counter(partition for partition, _ in written)
    assert committed(cluster, group) == dict(ends)
