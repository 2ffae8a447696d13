import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

from cluster.formats.control import ControlError, call_sync
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage
from cluster.formats.topic_ids import topic_id_to_kafka_string
from controller import topics
from controller.placement import assign_replicas

DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1}


def test_six_partitions_on_three_nodes_give_two_leaders_each():
    for start in range(3):
        assignment = assign_replicas([1, 2, 3], 6, 3, start_index=start)
        assert Counter(r[0] for r in assignment) == {1: 2, 2: 2, 3: 2}
        assert all(len(set(r)) == 3 for r in assignment)
        assert len({tuple(r) for r in assignment}) == 6  # followers shift too


def test_replication_factor_above_broker_count_is_refused():
    with pytest.raises(ValueError):
        assign_replicas([1, 2], 1, 3)


@pytest.mark.parametrize("request_fields, code", [
    ({"name": "bad name!"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "." * 1}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "x" * 250}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "t", "num_partitions": 0}, ErrorCode.INVALID_PARTITIONS),
    ({"name": "t", "replication_factor": 4}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"name": "t", "configs": {"no.such.config": "1"}}, ErrorCode.INVALID_CONFIG),
    ({"name": "t", "configs": {"retention.ms": "soon"}}, ErrorCode.INVALID_CONFIG),
    ({"name": "t", "assignments": {0: [1, 1]}}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ({"name": "t", "assignments": {0: [9]}}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
])
def test_create_topic_validation(request_fields, code):
    request = {"num_partitions": -1, "replication_factor": -1, "assignments": None, "configs": {}, **request_fields}
    outcome = asyncio.run(topics.create_topics(MetadataImage(), [1, 2, 3], [request], DEFAULTS))
    assert [r["error_code"] for r in outcome.results] == [code]
    assert outcome.records == []


def test_create_topic_records():
    outcome = asyncio.run(topics.create_topics(MetadataImage(), [1, 2, 3], [{
        "name": "orders", "num_partitions": 6, "replication_factor": 2, "assignments": None,
        "configs": {"retention.ms": "1000"}}], DEFAULTS))
    names = [name for name, _ in outcome.records]
    assert names == ["TopicRecord"] + ["PartitionRecord"] * 6 + ["ConfigRecord"]
    assert outcome.results[0]["num_partitions"] == 6 and outcome.results[0]["replication_factor"] == 2


def start_controller(data_dir, *options: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-m", "controller", "--data-dir", str(data_dir), "--port", "0",
                                *options],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    ready, _, _ = select.select([process.stdout], [], [], 30)
    assert ready
    return process, json.loads(process.stdout.readline())["port"]


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def register(port: int, node_id: int) -> int:
    reply = call_sync("127.0.0.1", port, "register", node_id=node_id,
                      incarnation_id=topic_id_to_kafka_string(uuid.uuid4()), host="127.0.0.1", port=9000 + node_id,
                      rack=None)
    return reply["broker_epoch"]


def two_live_nodes_and_a_topic(port: int) -> dict[int, int]:
    """Nodes 1 and 2 registered and unfenced, topic "t" with one partition on both; their broker epochs."""
    epochs = {n: register(port, n) for n in (1, 2)}
    for node_id, epoch in epochs.items():
        call_sync("127.0.0.1", port, "heartbeat", node_id=node_id, broker_epoch=epoch, applied_offset=1 << 30)
    created = call_sync("127.0.0.1", port, "create_topics", validate_only=False, topics=[
        {"name": "t", "num_partitions": 1, "replication_factor": 2, "assignments": None, "configs": {}}])
    assert created["results"][0]["error_code"] == 0
    return epochs


def partition_0(port: int) -> dict:
    return next(t for t in call_sync("127.0.0.1", port, "status")["topics"] if t["name"] == "t")["partitions"][0]


def test_a_restarted_controller_fences_a_node_that_never_heartbeats_to_it(tmp_path):
    process, port = start_controller(tmp_path)
    try:
        epochs = two_live_nodes_and_a_topic(port)
        silent = partition_0(port)["leader"]
        other = 3 - silent
    finally:
        stop(process)

    process, port = start_controller(tmp_path, "--heartbeat-timeout-ms", "2000")
    try:
        deadline = time.monotonic() + 20
        while partition_0(port)["leader"] == silent:  # the other node keeps heartbeating
            assert time.monotonic() < deadline, "the silent node kept its leadership"
            call_sync("127.0.0.1", port, "heartbeat", node_id=other, broker_epoch=epochs[other],
                      applied_offset=1 << 30)
            time.sleep(0.1)
        assert partition_0(port)["leader"] == other and partition_0(port)["isr"] == [other]
    finally:
        stop(process)


def test_a_second_live_process_for_a_node_id_is_refused_and_a_dead_ones_successor_takes_over(tmp_path):
    process, port = start_controller(tmp_path, "--heartbeat-timeout-ms", "60000")
    try:
        two_live_nodes_and_a_topic(port)
        leader = partition_0(port)["leader"]
        with pytest.raises(ControlError, match="another live process"):
            register(port, leader)  # the old process heartbeats: the id is taken
        assert partition_0(port)["leader"] == leader
    finally:
        stop(process)

    # A restarted controller has heard from no process yet: a new one for the id takes over at once.
    process, port = start_controller(tmp_path, "--heartbeat-timeout-ms", "60000")
    try:
        register(port, leader)
        state = partition_0(port)
        assert state["leader"] == 3 - leader and state["isr"] == [3 - leader] and state["leader_epoch"] == 1
    finally:
        stop(process)


def image_with_topic(replicas_by_partition: list[list[int]], live: list[int], configs: dict | None = None
                     ) -> MetadataImage:
    """Brokers 1-3 registered (only `live` unfenced) and topic "t" with the given replica lists."""
    from controller.brokers import register_broker_record

    image = MetadataImage()
    records = []
    for node_id in (1, 2, 3):
        records.append(register_broker_record({"node_id": node_id, "incarnation_id": topic_id_to_kafka_string(
            uuid.uuid4()), "host": "127.0.0.1", "port": 9091 + node_id}, node_id))
        if node_id in live:
            records.append(("UnfenceBrokerRecord", {"id": node_id, "epoch": node_id}))
    assignments = dict(enumerate(replicas_by_partition))
    records += asyncio.run(topics.create_topics(image, [1, 2, 3], [{
        "name": "t", "num_partitions": -1, "replication_factor": -1, "assignments": assignments,
        "configs": configs or {}}], DEFAULTS)).records
    for offset, (name, fields) in enumerate(records):
        image.apply(offset, name, fields)
    return image


def test_preferred_election_outcomes():
    from controller.brokers import PREFERRED, elect_leader, imbalanced_leader_changes

    image = image_with_topic([[1, 2, 3], [2, 3, 1]], live=[1, 2, 3])
    image.apply(100, "PartitionChangeRecord", {"partition_id": 0, "topic_id": image.topics["t"].topic_id,
                                               "leader": 2})
    outcome, record = elect_leader(image, "t", 0, PREFERRED)
    assert outcome == ErrorCode.NONE and record[1]["leader"] == 1
    assert elect_leader(image, "t", 1, PREFERRED) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    assert elect_leader(image, "t", 7, PREFERRED) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    assert [r[1]["partition_id"] for r in imbalanced_leader_changes(image)] == [0]

    image.apply(101, "PartitionChangeRecord", {"partition_id": 0, "topic_id": image.topics["t"].topic_id,
                                               "isr": [2, 3]})
    assert elect_leader(image, "t", 0, PREFERRED) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    assert imbalanced_leader_changes(image) == []


def test_unclean_election_takes_a_live_replica_only_without_a_leader():
    from controller.brokers import UNCLEAN, elect_leader

    image = image_with_topic([[1, 2, 3]], live=[3])
    topic_id = image.topics["t"].topic_id
    assert elect_leader(image, "t", 0, UNCLEAN) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    image.apply(100, "PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "leader": -1, "isr": [1]})
    outcome, record = elect_leader(image, "t", 0, UNCLEAN)
    assert outcome == ErrorCode.NONE and record[1]["leader"] == 3 and record[1]["isr"] == [3]


def test_fenced_leaders_are_replaced_in_replica_order():
    from controller.brokers import changes_for_fenced_broker

    image = image_with_topic([[3, 2, 1]], live=[1, 2, 3])
    image.apply(100, "PartitionChangeRecord", {"partition_id": 0, "topic_id": image.topics["t"].topic_id,
                                               "isr": [1, 2, 3]})  # as a leader's ISR change lists it
    (_, change), = changes_for_fenced_broker(image, 3)
    assert change["leader"] == 2 and sorted(change["isr"]) == [1, 2]


def test_an_unclean_topic_keeps_its_last_isr_member_until_a_replica_returns():
    from controller.brokers import changes_for_fenced_broker, leaderless_partition_changes

    unclean = {"unclean.leader.election.enable": "true"}
    image = image_with_topic([[1, 2, 3]], live=[1], configs=unclean)
    topic_id = image.topics["t"].topic_id
    image.apply(100, "PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "isr": [1]})
    (_, change), = changes_for_fenced_broker(image, 1)  # the last live replica goes too
    assert change["leader"] == -1 and "isr" not in change  # nobody to elect: the ISR still says who has the data
    image.apply(101, "PartitionChangeRecord", change)
    image.apply(102, "FenceBrokerRecord", {"id": 1, "epoch": 1})

    (_, change), = leaderless_partition_changes(image, 3)  # an out-of-sync replica comes back first
    assert change["leader"] == 3 and change["isr"] == [3]
    clean = image_with_topic([[1, 2, 3]], live=[1])
    clean.apply(100, "PartitionChangeRecord", {"partition_id": 0, "topic_id": clean.topics["t"].topic_id,
                                               "leader": -1, "isr": [1]})
    assert leaderless_partition_changes(clean, 3) == []
    assert [c["leader"] for _, c in leaderless_partition_changes(clean, 1)] == [1]


def test_leadership_moves_to_another_live_in_sync_replica_which_becomes_preferred():
    from controller.brokers import PREFERRED, elect_leader, move_leadership

    image = image_with_topic([[1, 2, 3]], live=[1, 2, 3])
    topic_id = image.topics["t"].topic_id
    outcome, record = move_leadership(image, "t", 0, None)
    assert outcome == ErrorCode.NONE
    assert record == ("PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "leader": 2,
                                                "replicas": [2, 1, 3]})
    image.apply(100, *record)
    assert elect_leader(image, "t", 0, PREFERRED) == (ErrorCode.ELECTION_NOT_NEEDED, None)  # balancing keeps it
    assert move_leadership(image, "t", 0, 3)[1][1] == {"partition_id": 0, "topic_id": topic_id, "leader": 3,
                                                       "replicas": [3, 2, 1]}
    assert move_leadership(image, "t", 0, 2) == (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)  # leads already
    assert move_leadership(image, "t", 5, None) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    image.apply(101, "PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "isr": [2]})
    assert move_leadership(image, "t", 0, None) == (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)
    image.apply(102, "PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "isr": [2, 1, 3],
                                               "adding_replicas": [3]})
    assert move_leadership(image, "t", 0, None) == (ErrorCode.REASSIGNMENT_IN_PROGRESS, None)


def test_a_fenced_replica_cannot_take_over_a_leadership():
    from controller.brokers import move_leadership

    image = image_with_topic([[1, 2, 3]], live=[1, 3])
    assert move_leadership(image, "t", 0, 2) == (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)
    assert move_leadership(image, "t", 0, None)[1][1]["leader"] == 3


def test_a_metadata_fetch_is_woken_once_a_batch_is_durable_not_after_the_controller_applied_it(tmp_path):
    from controller.metadata_writer import MetadataWriter

    async def scenario():
        writer = MetadataWriter(tmp_path, "cluster")
        outcome = await topics.create_topics(writer.image, [1, 2, 3], [
            {"name": f"t{i}", "num_partitions": 3, "replication_factor": 3, "assignments": None, "configs": {}}
            for i in range(300)], DEFAULTS)
        start = writer.end_offset
        fetch = asyncio.create_task(writer.wait_for_records_from(start, 30))
        async with writer.exclusive:
            append = asyncio.create_task(writer.append(outcome.records))
            await fetch
            applied_when_woken = writer.image.offset
            last = await append
        writer.close()
        return start, applied_when_woken, last

    start, applied_when_woken, last = asyncio.run(scenario())
    assert last == start + 1200 - 1  # a topic record and three partition records per topic
    assert applied_when_woken < last
