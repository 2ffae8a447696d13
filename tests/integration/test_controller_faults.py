"""The controller as a fault target: killed, stopped, paused and started again while the nodes serve
real clients. Without a controller the nodes serve on with the metadata they have; back, it takes
the nodes' registrations again and changes nothing that did not need changing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.launch import pid_alive

pytestmark = pytest.mark.kraftwerk(nodes=3)


def produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "message.timeout.ms": 20000})
    failures = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(30) == 0 and failures == []


def read_all(cluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values = []
    try:
        while len(values) < count:
            message = consumer.poll(10)
            assert message is not None, f"only {len(values)} of {count} read"
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values


def leaders(cluster, topic: str) -> list[tuple[int, int]]:
    """(leader, leader epoch) of each partition, as the controller has them."""
    [found] = [t for t in cluster.status()["topics"] if t["name"] == topic]
    return [(p["leader"], p["leader_epoch"]) for p in found["partitions"]]


def kraftwerk(cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cluster.cli", *args, "--data-dir", str(cluster.data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done


def test_the_nodes_serve_on_without_the_controller_and_register_with_it_again(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    cluster.create_topic("orders", partitions=3, replication_factor=3)
    produce(cluster, "orders", [b"before-%d" % i for i in range(10)])
    before = leaders(cluster, "orders")
    group, killed = os.getpgid(cluster.controller_pid), cluster.controller_pid

    cluster.kill_controller()
    assert cluster.controller_state() == "dead" and not pid_alive(killed)
    produce(cluster, "orders", [b"during-%d" % i for i in range(10)])  # acks=all: the ISR is as it was
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    [creation] = admin.create_topics([NewTopic("while-down", 1, 3)], request_timeout=5).values()
    with pytest.raises(KafkaException):
        creation.result(15)
    time.sleep(1.5)  # several of the nodes' reconnection attempts
    node_log = cluster.data_dir / "logs" / "node-1.log"
    assert node_log.read_text().count("cannot reach the controller") == 1  # once per outage, not per attempt

    cluster.start_controller()
    assert cluster.controller_state() == "running" and cluster.controller_pid != killed
    assert os.getpgid(cluster.controller_pid) == group  # `down` still stops every process with one killpg
    assert leaders(cluster, "orders") == before
    cluster.create_topic("after", partitions=1, replication_factor=3)
    assert cluster.wait_in_sync("after")
    assert sorted(read_all(cluster, "orders", 20)) == sorted([b"before-%d" % i for i in range(10)]
                                                           + [b"during-%d" % i for i in range(10)])
    assert "registered with the controller at" in node_log.read_text()
    assert " ERROR " not in node_log.read_text()


def test_a_paused_controller_fences_nobody_when_it_resumes(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    cluster.create_topic("steady", partitions=3, replication_factor=3)
    before = leaders(cluster, "steady")
    cluster.pause_controller()
    assert cluster.controller_state() == "paused"
    produce(cluster, "steady", [b"paused-%d" % i for i in range(5)])
    time.sleep(3)  # past the 2 s session timeout: the nodes' heartbeats wait in the controller's sockets
    cluster.resume_controller()
    cluster.wait_ready()
    assert leaders(cluster, "steady") == before
    assert all(not b["fenced"] for b in cluster.status()["brokers"])
    assert "fencing" not in (cluster.data_dir / "logs" / "controller.log").read_text()


def test_the_controller_commands_and_status(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    assert "controller 0: kill done" in kraftwerk(cluster, "controller", "kill").stdout
    document = json.loads(kraftwerk(cluster, "status", "--json").stdout)
    assert document["controllers"] == [{"node_id": 0, "pid": cluster.controller_pid,
                                        "address": cluster.controller_address, "process": "dead", "role": None,
                                        "leader_epoch": None, "lag": None}]
    assert [n["process"] for n in document["nodes"]] == ["running"] * 3 and document["topics"] == []
    assert "the controller is not running" in kraftwerk(cluster, "controller", "pause", ok=False).stderr
    assert "no controller 2 in this cluster" in kraftwerk(cluster, "controller", "start", "2", ok=False).stderr
    kraftwerk(cluster, "controller", "start", "0")
    restarted = json.loads((cluster.data_dir / "cluster.json").read_text())["controller"]["pid"]
    document = json.loads(kraftwerk(cluster, "status", "--json").stdout)
    # Started again, it leads a new epoch of its quorum of one.
    assert document["controllers"][0] | {"address": None} == {
        "node_id": 0, "pid": restarted, "address": None, "process": "running", "role": "leader", "leader_epoch": 2,
        "lag": 0}
    assert "already running" in kraftwerk(cluster, "controller", "start", ok=False).stderr
    kraftwerk(cluster, "controller", "kill")
    pids = json.loads((cluster.data_dir / "cluster.json").read_text())["pids"]
    assert "stopped" in kraftwerk(cluster, "down").stdout  # the nodes outlived their controller: down ends them
    assert not any(pid_alive(pid) for pid in pids)
