"""Admin requests are validated and bounded before the controller does any work.

Any client can send a CreatePartitions for two billion partitions or a CreateTopics for ten
thousand topics; Kafka refuses an operation of more than 10,000 records with POLICY_VIOLATION
and checks counts and replication factors first. Control frames that are not what the
controller expects get an error reply or a closed connection, and the controller serves on.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import uuid

import msgpack
import pytest
from kafka.admin import NewPartitions, NewTopic

from cluster.formats.control import ControlError, call_sync
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_to_kafka_string
from tests.integration.test_admin import admin, cluster, unique  # noqa: F401 (fixtures)

TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def create(admin, *topics: NewTopic) -> list[tuple[str, int, str | None]]:
    response = admin.create_topics(list(topics), raise_errors=False)
    return [(t["name"], t["error_code"], t["error_message"]) for t in response["topics"]]


def grow(admin, counts: dict[str, int]) -> list[tuple[str, int, str | None]]:
    response = admin.create_partitions({name: NewPartitions(count) for name, count in counts.items()},
                                       raise_errors=False)
    return [(r.name, r.error_code, r.error_message) for r in response.results]


def partition_count(cluster, name: str) -> int | None:
    topic = next((t for t in cluster.status()["topics"] if t["name"] == name), None)
    return None if topic is None else len(topic["partitions"])


def test_huge_create_partitions_is_refused_and_the_cluster_still_creates_topics(cluster, admin):
    name = unique("grow")
    assert create(admin, NewTopic(name, 2, 1)) == [(name, 0, None)]
    assert grow(admin, {name: 2**31 - 1}) == [(name, ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)]
    assert partition_count(cluster, name) == 2
    after = unique("after")
    assert create(admin, NewTopic(after, 3, 2)) == [(after, 0, None)]
    assert partition_count(cluster, after) == 3


def test_create_partitions_over_the_limit_in_all_is_refused_whole(cluster, admin):
    first, second = unique("grow"), unique("grow")
    create(admin, NewTopic(first, 1, 1), NewTopic(second, 1, 1))
    assert sorted(grow(admin, {first: 6_000, second: 6_000})) == sorted(
        [(first, ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS), (second, ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)])
    assert partition_count(cluster, first) == partition_count(cluster, second) == 1


def test_huge_create_topics_is_refused(cluster, admin):
    name = unique("huge")
    assert create(admin, NewTopic(name, 2**31 - 1, 3)) == [(name, ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)]
    other = unique("huge")
    assert create(admin, NewTopic(other, 10_001, 3)) == [(other, ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)]
    assert partition_count(cluster, name) is None and partition_count(cluster, other) is None


def test_many_topics_in_one_request_over_the_record_limit_are_refused_whole(cluster, admin):
    # 5,001 topics of one partition: 10,002 records (a TopicRecord and a PartitionRecord each).
    names = [unique("many") for _ in range(5_001)]
    results = create(admin, *(NewTopic(n, 1, 1) for n in names))
    assert sorted(results) == sorted((n, ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS) for n in names)
    assert not {t["name"] for t in cluster.status()["topics"]} & set(names)


def test_counts_and_replication_factors_are_checked_as_kafka_checks_them(cluster, admin):
    zero, negative, no_copies, too_many_copies = (unique("bad") for _ in range(4))
    assert create(admin, NewTopic(zero, 0, 1), NewTopic(negative, -5, 1), NewTopic(no_copies, 1, 0),
                  NewTopic(too_many_copies, 1, 4)) == [
        (zero, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (negative, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
        (no_copies, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Replication factor must be larger than 0, or -1 to use the default value."),
        (too_many_copies, ErrorCode.INVALID_REPLICATION_FACTOR,
         "Unable to replicate the partition 4 time(s): The target replication factor of 4 cannot be reached "
         "because only 3 broker(s) are registered."),
    ]
    name = unique("grow")
    create(admin, NewTopic(name, 2, 1))
    assert grow(admin, {name: 2}) == [(name, ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partition(s).")]
    for count in (0, -1):
        assert grow(admin, {name: count}) == [(name, ErrorCode.INVALID_PARTITIONS,
                                               f"The topic {name} currently has 2 partition(s); {count} would not "
                                               f"be an increase.")]
    assert partition_count(cluster, name) == 2


def test_manual_assignments_are_checked(cluster, admin):
    unknown_broker, repeated, uneven = unique("placed"), unique("placed"), unique("placed")
    assert create(admin, NewTopic(unknown_broker, -1, -1, replica_assignments={0: [1, 9]}),
                  NewTopic(repeated, -1, -1, replica_assignments={0: [2, 2]}),
                  NewTopic(uneven, -1, -1, replica_assignments={0: [1, 2], 1: [3]})) == [
        (unknown_broker, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 9, but no such broker is registered."),
        (repeated, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 2 more than once."),
        (uneven, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent "
         "with previous partitions, which have 2 replica(s)."),
    ]


# --- malformed control frames, straight to the controller's port ---

def controller_port(cluster) -> int:
    return cluster.controller_port


def exchange(port: int, frame: bytes) -> dict | None:
    """Send raw bytes; the reply, or None if the controller closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame)
        stream = sock.makefile("rb")
        header = stream.read(4)
        if len(header) < 4:
            return None
        (length,) = struct.unpack(">I", header)
        return msgpack.unpackb(stream.read(length), raw=False)


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def request(op, **args) -> bytes:
    return framed(msgpack.packb({"v": 1, "id": 7, "op": op, **args}))


@pytest.mark.parametrize("frame", [
    pytest.param(framed(b"\xc1\xc1\xc1 not msgpack"), id="garbage"),
    pytest.param(framed(msgpack.packb([1, 2, 3])), id="not-a-map"),
    pytest.param(framed(msgpack.packb({"v": 1, "id": 1}) + b"\x00"), id="trailing-bytes"),
    pytest.param(struct.pack(">I", 1 << 30) + b"\x80", id="oversized"),
    pytest.param(framed(b"\x81"), id="truncated-map"),
])
def test_undecodable_control_frames_close_the_connection(cluster, frame):
    assert exchange(controller_port(cluster), frame) is None
    assert call_sync("127.0.0.1", controller_port(cluster), "status")["brokers"]


@pytest.mark.parametrize("frame, error", [
    (request("no_such_op"), "unknown op"),
    (framed(msgpack.packb({"v": 1, "id": 7, "op": ["create_topics"]})), "unknown op"),
    (request("create_topics", topics="not a list"), "bad request: topics"),
    (request("create_topics", topics=[{"num_partitions": 1}]), "bad request: topic name"),
    (request("create_topics", topics=[{"name": "t", "num_partitions": "many"}]), "bad request: num_partitions"),
    (request("create_topics", topics=[{"name": "t", "assignments": {0: "x"}}]), "bad request: replicas"),
    (request("create_partitions", topics=[{"name": "t", "count": None}]), "bad request: count"),
    (request("delete_topics", topics=[{"topic_id": 5}]), "bad request: topic_id"),
    (request("alter_configs", resources=[{"resource_type": 2, "resource_name": "t", "configs": [{"op": 0}]}]),
     "bad request: config name"),
    (request("elect_leaders", election_type=0, partitions=[["t"]]), "bad request"),
    (request("heartbeat", node_id="1", broker_epoch=0, applied_offset=0), "bad request: node_id"),
    (request("register", node_id=9, incarnation_id="no uuid", host="h", port=1), "bad request: topic id"),
    (request("alter_partition", node_id=1, topic_id="AAAAAAAAAAAAAAAAAAAAAA", partition=0, leader_epoch=0,
             partition_epoch=0, isr=["1"]), "bad request: isr member"),
    (request("fetch_metadata"), "bad request: offset"),
    (request("alter_reassignments", topics=[{"name": "t", "partitions": "all"}]), "bad request: partitions"),
    (request("alter_reassignments", topics=[{"name": "t", "partitions": [{"partition": "0", "replicas": None}]}]),
     "bad request: partition"),
    (request("list_reassignments", topics=[["t"]]), "bad request: topic"),
    (request("wait_reassigned", partitions=[["t", "0"]], timeout_ms=1), "bad request: partition"),
    (framed(msgpack.packb({"v": 9, "id": 7, "op": "status"})), "unsupported control protocol version"),
])
def test_control_requests_of_the_wrong_shape_get_an_error_reply(cluster, frame, error):
    reply = exchange(controller_port(cluster), frame)
    assert reply is not None and reply["ok"] is False and reply["id"] == 7
    assert error in reply["error"]
    assert call_sync("127.0.0.1", controller_port(cluster), "status")["brokers"]


def test_a_large_control_frame_is_decoded_and_answered(cluster, admin):
    # 20,000 topics of a megabyte-sized frame: decoded in slices, then refused as too large a batch.
    topics = [{"name": f"bulk-{i}-" + "x" * 40, "num_partitions": 1, "replication_factor": 1} for i in range(20_000)]
    reply = exchange(controller_port(cluster), request("create_topics", topics=topics))
    assert reply["ok"] and reply["error_code"] == ErrorCode.POLICY_VIOLATION
    name = unique("after")
    assert create(admin, NewTopic(name, 1, 1)) == [(name, 0, None)]


# --- a controller that is busy still answers SIGTERM ---

def start_controller(data_dir) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-m", "controller", "--data-dir", str(data_dir), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    ready, _, _ = select.select([process.stdout], [], [], 30)
    assert ready
    return process, json.loads(process.stdout.readline())["port"]


def live_brokers(port: int, node_ids) -> None:
    for node_id in node_ids:
        epoch = call_sync("127.0.0.1", port, "register", node_id=node_id, host="127.0.0.1", port=9000 + node_id,
                          incarnation_id=topic_id_to_kafka_string(uuid.uuid4()))["broker_epoch"]
        call_sync("127.0.0.1", port, "heartbeat", node_id=node_id, broker_epoch=epoch, applied_offset=1 << 30)


def test_a_controller_building_large_topics_exits_on_sigterm(tmp_path):
    process, port = start_controller(tmp_path / "controller")
    try:
        live_brokers(port, (1, 2, 3))
        with socket.create_connection(("127.0.0.1", port)) as sock:
            # Twenty legal 9,000-partition topics queued at once: seconds of work for the controller.
            for i in range(20):
                sock.sendall(request("create_topics", topics=[
                    {"name": f"big-{i}", "num_partitions": 9_000, "replication_factor": 3}]))
            first = sock.makefile("rb").read(4)  # the first topic is written: the controller is at work
            assert len(first) == 4
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_controller_without_live_brokers_cannot_place_replicas(tmp_path):
    process, port = start_controller(tmp_path / "controller")
    try:
        reply = call_sync("127.0.0.1", port, "create_topics", topics=[{"name": "t", "num_partitions": 1,
                                                                       "replication_factor": 1}])
        assert reply["results"] == [{"name": "t", "error_code": ErrorCode.INVALID_REPLICATION_FACTOR,
                                     "error_message": "Unable to replicate the partition 1 time(s): All brokers "
                                                      "are currently fenced."}]
        with pytest.raises(ControlError, match="unknown op"):
            call_sync("127.0.0.1", port, "no_such_op")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()



REFUSED, BAD_ASSIGNMENT = "refused whole", "INVALID_REPLICA_ASSIGNMENT"


@pytest.mark.parametrize("op, args, outcome", [
    ("create_topics", {"topics": [{"name": "t", "assignments": {i: [1] for i in range(200_000)}}]}, REFUSED),
    ("create_topics", {"topics": [{"name": "t", "assignments": {0: [1] * 1_000_000}}]}, BAD_ASSIGNMENT),
    ("create_topics", {"topics": [{"name": "t", "configs": {f"c{i}": "1" for i in range(200_000)}}]}, REFUSED),
    ("create_partitions", {"topics": [{"name": "existing", "count": 2, "assignments": [[1] * 1_000_000]}]},
     BAD_ASSIGNMENT),
    ("alter_configs", {"resources": [{"resource_type": 2, "resource_name": "existing",
                                      "configs": [{"name": "retention.ms", "op": 0, "value": "1"}] * 200_000}]},
     REFUSED),
    ("elect_leaders", {"election_type": 0, "partitions": [["existing", 0]] * 200_000}, REFUSED),
    ("delete_topics", {"topics": [{"name": "existing"}] * 200_000}, REFUSED),
])
def test_oversized_admin_requests_are_refused_before_they_are_read(cluster, admin, op, args, outcome):
    existing = unique("existing")
    create(admin, NewTopic(existing, 1, 1))
    frame = request(op, **json.loads(json.dumps(args).replace('"existing"', json.dumps(existing))))
    reply = exchange(controller_port(cluster), frame)
    assert reply["ok"]
    if outcome == REFUSED:
        assert reply["error_code"] == ErrorCode.POLICY_VIOLATION
    else:
        assert [r["error_code"] for r in reply["results"]] == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        assert "1000000 replicas, but only 3 broker(s) are registered" in reply["results"][0]["error_message"]
    assert partition_count(cluster, existing) == 1
