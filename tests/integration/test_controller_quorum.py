"""A quorum of three controllers: started by `kraftwerk up --controllers 3` and the fixture, found by
the launcher and by the nodes, and losing its active controller while real clients use the cluster.
A topic created through a Kafka admin client after the failover exists on every node, the one
created before still does, and a node started again afterwards registers with the new leader. Three
controllers and a broker started from Kafka's own server.properties do the same."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.formats.control import NotController, call_sync
from cluster.formats.metadata_log import write_meta_properties
from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.launch import pid_alive
from cluster.launch.local_backend import free_port
from tests.integration.test_controller_faults import produce, read_all
from tests.integration.test_kafka_fixture import start_process

QUORUM = [3000, 3001, 3002]
FAILOVER_TIMEOUT_S = 30
LOST_CONTROLLER = re.compile(r" WARNING .*(cannot reach the controller|is no longer the active one)")


def kraftwerk(data_dir, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cluster.cli", *args, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done


def create_topic(bootstrap: str, name: str, partitions: int = 3, replication_factor: int = 3) -> None:
    """CreateTopics through a Kafka admin client, asked again while the quorum elects a leader (the
    nodes answer a retriable error meanwhile). A retry may find the topic its predecessor created."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline, attempts = time.monotonic() + FAILOVER_TIMEOUT_S, 0
    while True:
        attempts += 1
        [creation] = admin.create_topics([NewTopic(name, partitions, replication_factor)],
                                         request_timeout=10).values()
        try:
            creation.result(20)
            return
        except KafkaException as exc:
            if attempts > 1 and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            assert time.monotonic() < deadline, f"{name} not created in {FAILOVER_TIMEOUT_S} s: {exc}"
            time.sleep(0.2)


def hosted_topics(cluster, node_id: int) -> set[str]:
    """The topics whose partitions node_id hosts, as the node itself says."""
    return {p["topic"] for p in cluster.node_control(node_id, "replica_states")["partitions"]}


def new_leader(cluster, old: int) -> int:
    """The quorum's leader once it is another controller than old."""
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while True:
        leader = cluster.active_controller_id(timeout=FAILOVER_TIMEOUT_S)
        if leader != old:
            return leader
        assert time.monotonic() < deadline, f"controller {old} still leads"
        time.sleep(0.1)


def test_up_starts_a_quorum_of_three_controllers_and_status_lists_each(tmp_path):
    data_dir = tmp_path / "cluster"
    try:
        kraftwerk(data_dir, "up", "--controllers", "3", "--nodes", "3", "--port", "0", "--detach")
        state = json.loads((data_dir / "cluster.json").read_text())
        controllers = state["controllers"]
        assert [c["id"] for c in controllers] == QUORUM
        assert len({c["port"] for c in controllers}) == 3 and all(c["port"] for c in controllers)
        assert [c["data_dir"] for c in controllers] == [str(data_dir / f"controller-{i}") for i in QUORUM]
        assert all(pid_alive(c["pid"]) for c in controllers) and sorted(state["nodes"]) == ["1", "2", "3"]
        assert state["controller"] == {"pid": controllers[0]["pid"], "port": controllers[0]["port"]}

        document = json.loads(kraftwerk(data_dir, "status", "--json").stdout)
        listed = document["controllers"]
        assert [(c["node_id"], c["pid"], c["address"], c["process"]) for c in listed] == [
            (c["id"], c["pid"], f"127.0.0.1:{c['port']}", "running") for c in controllers]
        assert sorted(c["role"] for c in listed) == ["follower", "follower", "leader"]
        assert len({c["leader_epoch"] for c in listed}) == 1 and listed[0]["leader_epoch"] >= 1
        assert [(n["process"], n["fenced"]) for n in document["nodes"]] == [("running", False)] * 3

        refused = kraftwerk(data_dir, "controller", "kill", ok=False).stderr
        assert "name a controller: this cluster runs 3000, 3001, 3002" in refused
        assert "no controller 0 in this cluster" in kraftwerk(data_dir, "controller", "kill", "0", ok=False).stderr
        assert "controller 3001: pause done" in kraftwerk(data_dir, "controller", "pause", "3001").stdout
        assert "controller 3001: resume done" in kraftwerk(data_dir, "controller", "resume", "3001").stdout
        assert "controller 3002: kill done" in kraftwerk(data_dir, "controller", "kill", "3002").stdout
        document = json.loads(kraftwerk(data_dir, "status", "--json").stdout)
        assert [c["process"] for c in document["controllers"]] == ["running", "running", "dead"]
        assert document["controllers"][2] | {"pid": None} == {
            "node_id": 3002, "pid": None, "address": f"127.0.0.1:{controllers[2]['port']}", "process": "dead",
            "role": None, "leader_epoch": None, "lag": None}
        assert "controller 3002: start done" in kraftwerk(data_dir, "controller", "start", "3002").stdout
        restarted = json.loads((data_dir / "cluster.json").read_text())["controllers"][2]
        assert restarted["port"] == controllers[2]["port"] and restarted["pid"] != controllers[2]["pid"]
    finally:
        if (data_dir / "cluster.json").exists():
            kraftwerk(data_dir, "down")
    pids = json.loads((data_dir / "cluster.json").read_text())["pids"]
    assert len(pids) == 6 and not any(pid_alive(pid) for pid in pids)
    for controller_id in QUORUM:
        assert " ERROR " not in (data_dir / "logs" / f"controller-{controller_id}.log").read_text()


@pytest.mark.kraftwerk(nodes=3, controllers=3)
def test_control_requests_reach_the_leader_and_followers_name_it(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    assert cluster.controller_ids == QUORUM
    assert [b["node_id"] for b in cluster.status()["brokers"] if not b["fenced"]] == [1, 2, 3]
    leader = cluster.active_controller_id()
    assert leader in QUORUM
    probe = [{"name": "probe", "num_partitions": 1, "replication_factor": 3, "assignments": None, "configs": {}}]
    for follower in (c for c in QUORUM if c != leader):
        with pytest.raises(NotController) as refused:
            call_sync("127.0.0.1", cluster.controllers[follower].port, "create_topics", topics=probe,
                      validate_only=True, timeout=10)
        assert refused.value.leader == (leader, "127.0.0.1", cluster.controllers[leader].port)
    assert cluster.control("create_topics", topics=probe, validate_only=True)["results"][0]["error_code"] == 0
    for node_id in (1, 2, 3):
        assert not LOST_CONTROLLER.search((cluster.data_dir / "logs" / f"node-{node_id}.log").read_text())


@pytest.mark.kraftwerk(nodes=3, controllers=3)
def test_a_killed_leader_is_replaced_and_no_topic_is_lost(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    create_topic(cluster.bootstrap_servers, "before")
    produce(cluster, "before", [b"before-%d" % i for i in range(10)])
    killed = cluster.active_controller_id()

    cluster.kill_controller(killed)
    assert cluster.controller_state(killed) == "dead"
    create_topic(cluster.bootstrap_servers, "after")
    leader = new_leader(cluster, killed)
    assert cluster.wait_in_sync("after") and cluster.wait_in_sync("before")
    for node_id in (1, 2, 3):  # replication factor 3 on 3 nodes: every node hosts every partition
        assert {"before", "after"} <= hosted_topics(cluster, node_id)
    assert {t["name"] for t in cluster.status()["topics"]} >= {"before", "after"}
    produce(cluster, "before", [b"after-%d" % i for i in range(10)])
    assert sorted(read_all(cluster, "before", 20)) == sorted([b"before-%d" % i for i in range(10)]
                                                           + [b"after-%d" % i for i in range(10)])

    leader_address = f"127.0.0.1:{cluster.controllers[leader].port}"
    for node_id in (1, 2, 3):
        node_log = (cluster.data_dir / "logs" / f"node-{node_id}.log").read_text()
        assert len(LOST_CONTROLLER.findall(node_log)) == 1  # once per outage
        assert f"registered with the controller at {leader_address} again" in node_log
        assert " ERROR " not in node_log

    cluster.start_controller(killed)  # back as a follower, on its port and data dir
    assert [cluster.controller_state(c) for c in QUORUM] == ["running"] * 3
    assert cluster.active_controller_id() == leader


@pytest.mark.kraftwerk(nodes=3, controllers=3)
def test_a_node_started_again_after_a_failover_registers_with_the_new_leader(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    killed = cluster.active_controller_id()
    cluster.kill_controller(killed)
    leader = new_leader(cluster, killed)

    cluster.restart_node(2)  # returns once the active controller has it registered and caught up
    [registered] = [b for b in cluster.status()["brokers"] if b["node_id"] == 2]
    incarnation = topic_id_to_kafka_string(uuid.UUID(cluster.nodes[2].incarnation_id))  # the one started again
    assert (registered["incarnation_id"], registered["fenced"]) == (incarnation, False)
    assert cluster.active_controller_id() == leader
    create_topic(cluster.bootstrap_servers, "afterwards", partitions=1)
    assert cluster.wait_in_sync("afterwards")
    assert "afterwards" in hosted_topics(cluster, 2)
    assert " ERROR " not in (cluster.data_dir / "logs" / "node-2.log").read_text()


def properties(path, **settings: str):
    path.write_text("".join(f"{key.replace('_', '.')}={value}\n" for key, value in settings.items()))
    return path


def test_a_quorum_of_controllers_from_kafkas_server_properties_serves_a_broker_through_a_failover(tmp_path):
    ports = {voter_id: free_port("127.0.0.1") for voter_id in QUORUM}
    voters = ",".join(f"{voter_id}@127.0.0.1:{port}" for voter_id, port in ports.items())
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"  # the id of Kafka's quickstart
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    processes = {}
    try:
        for voter_id, port in ports.items():
            log_dir = tmp_path / f"controller-{voter_id}"
            log_dir.mkdir()  # formatted as `kafka-storage.sh format -t <cluster id>` formats each voter's
            write_meta_properties(log_dir, {"cluster.id": cluster_id, "node.id": str(voter_id), "version": "1"})
            config = properties(tmp_path / f"controller-{voter_id}.properties", process_roles="controller",
                                node_id=str(voter_id), controller_quorum_voters=voters,
                                listeners=f"CONTROLLER://127.0.0.1:{port}", controller_listener_names="CONTROLLER",
                                listener_security_protocol_map=protocols, log_dirs=str(log_dir))
            processes[voter_id], _ = start_process([sys.executable, "-m", "node", str(config)],
                                                   tmp_path / f"controller-{voter_id}.log")
        broker_config = properties(
            tmp_path / "broker.properties", process_roles="broker", node_id="1",
            controller_quorum_bootstrap_servers=",".join(f"127.0.0.1:{port}" for port in ports.values()),
            listeners="PLAINTEXT://127.0.0.1:0", controller_listener_names="CONTROLLER",
            listener_security_protocol_map=protocols, log_dirs=str(tmp_path / "broker"))
        processes[1], ready = start_process([sys.executable, "-m", "node", str(broker_config)], tmp_path / "broker.log")
        bootstrap = f"127.0.0.1:{ready['port']}"
        create_topic(bootstrap, "from-properties", partitions=1, replication_factor=1)

        leader = call_sync("127.0.0.1", ports[QUORUM[0]], "quorum_role", timeout=10)["leader_id"]
        assert leader in QUORUM
        os.killpg(processes[leader].pid, signal.SIGKILL)
        processes[leader].wait()
        create_topic(bootstrap, "after-failover", partitions=1, replication_factor=1)
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert {"from-properties", "after-failover"} <= set(topics)
        assert " ERROR " not in (tmp_path / "broker.log").read_text()
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.kraftwerk(nodes=3, controllers=3)
def test_an_isolated_leader_is_replaced_and_follows_once_healed(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    isolated = cluster.active_controller_id()
    assert kraftwerk(cluster.data_dir, "controller", "isolate", "active").stdout == \
        f"controller {isolated}: isolated; delay 0 ms\n"
    leader = new_leader(cluster, isolated)
    assert cluster.controller_state(isolated) == "running"  # cut off, not dead
    create_topic(cluster.bootstrap_servers, "while-isolated")
    assert cluster.wait_in_sync("while-isolated")

    assert kraftwerk(cluster.data_dir, "controller", "heal", str(isolated)).stdout == \
        f"controller {isolated}: not isolated; delay 0 ms\n"
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while (role := cluster.controller_control(isolated, "quorum_role"))["leader_id"] != leader:
        assert time.monotonic() < deadline, role
        time.sleep(0.1)
    assert role["role"] == "follower" and cluster.active_controller_id() == leader
    assert "no controller 7 in this cluster" in kraftwerk(cluster.data_dir, "controller", "delay", "7", "10",
                                                          ok=False).stderr
    for node_id in (1, 2, 3):
        assert " ERROR " not in (cluster.data_dir / "logs" / f"node-{node_id}.log").read_text()


@pytest.mark.kraftwerk(nodes=3, controllers=3)
def test_a_paused_leader_is_replaced_and_the_nodes_leave_it_for_the_new_one(kraftwerk_cluster):
    """A paused leader holds its connections open and answers nothing: the nodes give up on it after
    a broker session (broker.session.timeout.ms) and register with the controller the others elected,
    before that one fences any of them."""
    cluster = kraftwerk_cluster
    paused = cluster.active_controller_id()
    cluster.pause_controller(paused)
    try:
        leader = new_leader(cluster, paused)
        create_topic(cluster.bootstrap_servers, "while-paused")
        assert cluster.wait_in_sync("while-paused")
        produce(cluster, "while-paused", [b"v%d" % i for i in range(10)])
        leader_address = f"127.0.0.1:{cluster.controllers[leader].port}"
        for node_id in (1, 2, 3):
            node_log = (cluster.data_dir / "logs" / f"node-{node_id}.log").read_text()
            assert f"registered with the controller at {leader_address} again" in node_log
            assert " ERROR " not in node_log
        # They reached it before it would fence them for silence.
        assert "missed heartbeats" not in (cluster.data_dir / "logs" / f"controller-{leader}.log").read_text()
    finally:
        cluster.resume_controller(paused)
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while (role := cluster.controller_control(paused, "quorum_role"))["leader_id"] != leader:
        assert time.monotonic() < deadline, role
        time.sleep(0.1)
    assert role["role"] == "follower"
    assert sorted(read_all(cluster, "while-paused", 10)) == sorted(b"v%d" % i for i in range(10))


def test_a_quorum_whose_cluster_id_begins_with_a_dash_starts(tmp_path):
    """Kafka's cluster ids are URL-safe base64, so one in 64 begins with "-": the launcher hands it to
    each voter in a form no argument parser takes for an option."""
    from cluster.launch import Cluster

    cluster_id = "-" + "A" * 21
    log_dir = tmp_path / "cluster" / "controller-3000"
    log_dir.mkdir(parents=True)
    write_meta_properties(log_dir, {"cluster.id": cluster_id, "node.id": "3000", "version": "1"})
    with Cluster(nodes=1, controllers=3, data_dir=tmp_path / "cluster") as cluster:
        assert cluster.active_controller_id() in QUORUM
        for controller_id in QUORUM:
            properties = (tmp_path / "cluster" / f"controller-{controller_id}" / "meta.properties").read_text()
            assert f"cluster.id={cluster_id}" in properties
