"""The kraftwerk command line, as a user runs it from a shell."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import shutil
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks.timeline import CRITICAL_PATH
from cluster.launch import pid_alive

# The installed console script, as users run it; the module when kraftwerk is not pip-installed.
KRAFTWERK = [shutil.which("kraftwerk")] if shutil.which("kraftwerk") else [sys.executable, "-m", "cluster.cli"]


def kraftwerk(*args: str, data_dir, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([*KRAFTWERK, *args, "--data-dir", str(data_dir)],
                            input=input, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture
def data_dir(tmp_path):
    directory = tmp_path / "cluster"
    yield directory
    state = directory / "cluster.json"
    if state.exists():  # whatever a failed test left running goes, with its whole process group
        try:
            os.killpg(json.loads(state.read_text())["process_group"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_up_use_down_up_again(data_dir):
    started = kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", data_dir=data_dir)
    assert "bootstrap servers: 127.0.0.1:" in started.stdout

    status = kraftwerk("status", data_dir=data_dir).stdout
    assert status.count("running") == 4 and status.count("unfenced") == 3  # the controller and 3 nodes

    # No --replication-factor: the cluster's default.replication.factor, min(3, nodes), as Kafka clients get.
    created = kraftwerk("topic", "create", "greetings", "--partitions", "3", data_dir=data_dir).stdout
    assert created == "created topic greetings with 3 partitions and replication factor 3\n"
    assert kraftwerk("topic", "list", data_dir=data_dir).stdout.split() == ["greetings"]
    kraftwerk("produce", "greetings", "--partition", "1", "hello", "world", data_dir=data_dir)
    kraftwerk("produce", "greetings", "--partition", "2", "--key", "k", "--header", "origin=cli", data_dir=data_dir,
              input="from\nstdin\n")
    described = kraftwerk("topic", "describe", "greetings", data_dir=data_dir).stdout
    topic_id = described.split("(")[1].split(")")[0]
    assert_status_json(data_dir, topic_id)
    ports = {node_id: node["port"] for node_id, node in json.loads((data_dir / "cluster.json").read_text())["nodes"].items()}

    def consume(partition: str) -> list[str]:
        return kraftwerk("consume", "greetings", "--from-beginning", "--partition", partition, "--timeout", "3",
                         data_dir=data_dir).stdout.split()

    assert consume("1") == ["hello", "world"]
    assert consume("2") == ["from", "stdin"]
    formatted = kraftwerk("consume", "greetings", "--from-beginning", "--partition", "2", "--timeout", "3",
                          "--format", r"{partition}/{offset}\t{key}={value} [{headers}]", data_dir=data_dir).stdout
    assert formatted.splitlines() == ["2/0\tk=from [origin=cli]", "2/1\tk=stdin [origin=cli]"]

    pids = json.loads((data_dir / "cluster.json").read_text())["pids"]
    kraftwerk("down", data_dir=data_dir)
    assert not any(pid_alive(pid) for pid in pids)

    kraftwerk("up", "--port", "0", "--detach", data_dir=data_dir)
    assert {node_id: node["port"] for node_id, node in json.loads((data_dir / "cluster.json").read_text())["nodes"]
            .items()} == ports  # the ports it first got: the bootstrap list printed then still works
    assert topic_id in kraftwerk("topic", "describe", "greetings", data_dir=data_dir).stdout
    assert consume("1") == ["hello", "world"]
    assert consume("2") == ["from", "stdin"]
    kraftwerk("topic", "delete", "greetings", data_dir=data_dir)
    assert kraftwerk("topic", "list", data_dir=data_dir).stdout.split() == []
    kraftwerk("down", data_dir=data_dir)


def test_produce_is_quiet_unless_asked_for_offsets(data_dir):
    """A successful produce prints nothing, as kcat and kafka-console-producer.sh do, so a pipeline into it
    stays quiet; --print-offsets shows where each message went."""
    kraftwerk("up", "--nodes", "1", "--port", "0", "--detach", data_dir=data_dir)
    kraftwerk("topic", "create", "quiet", "--partitions", "1", data_dir=data_dir)

    from_stdin = kraftwerk("produce", "quiet", data_dir=data_dir, input="one\ntwo\nthree\n")
    from_arguments = kraftwerk("produce", "quiet", "four", "five", data_dir=data_dir)
    assert (from_stdin.stdout, from_stdin.stderr) == ("", "")
    assert (from_arguments.stdout, from_arguments.stderr) == ("", "")

    shown = kraftwerk("produce", "quiet", "--print-offsets", "six", "seven", data_dir=data_dir)
    assert (shown.stdout, shown.stderr) == ("", "quiet-0@5\nquiet-0@6\n")

    consumed = kraftwerk("consume", "quiet", "--from-beginning", "--max-messages", "7", "--timeout", "10",
                         data_dir=data_dir).stdout
    assert consumed.splitlines() == ["one", "two", "three", "four", "five", "six", "seven"]
    kraftwerk("down", data_dir=data_dir)


def assert_status_json(data_dir, topic_id: str) -> None:
    """`status --json` and `topic describe --json` of a 3-node cluster holding topic greetings, 3 partitions of 3
    replicas, with 0, 2 and 2 messages."""
    state = json.loads((data_dir / "cluster.json").read_text())
    status = json.loads(kraftwerk("status", "--json", data_dir=data_dir).stdout)
    assert [(n["node_id"], n["pid"], n["port"], n["admin_port"], n["process"], n["fenced"], n["partitions_led"])
            for n in status["nodes"]] == [
        (int(node_id), node["pid"], node["port"], node["admin_port"], "running", False, 1)
        for node_id, node in sorted(state["nodes"].items())]
    [topic] = status["topics"]
    assert (topic["name"], topic["topic_id"]) == ("greetings", topic_id)
    partitions = topic["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert sorted(p["leader"] for p in partitions) == [1, 2, 3]  # leaders spread evenly
    for p in partitions:
        assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3]
        assert p["leader"] == p["replicas"][0] and p["leader_epoch"] == 0
        assert p["lag"] == {str(node): 0 for node in p["replicas"]}
    assert [p["high_watermark"] for p in partitions] == [0, 2, 2]

    described = json.loads(kraftwerk("topic", "describe", "greetings", "--json", data_dir=data_dir).stdout)
    assert described == {"name": "greetings", "topic_id": topic_id, "partitions": [
        {key: p[key] for key in ("partition", "leader", "leader_epoch", "replicas", "isr")} for p in partitions]}


def test_group_commands(data_dir):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    kraftwerk("up", "--nodes", "2", "--port", "0", "--detach", data_dir=data_dir)
    bootstrap = json.loads((data_dir / "cluster.json").read_text())["bootstrap_servers"]
    kraftwerk("topic", "create", "events", "--partitions", "2", data_dir=data_dir)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send("events", f"e{i}".encode(), partition=0)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer("events", bootstrap_servers=bootstrap, group_id="readers", client_id="reader-1",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        # Metadata first: a leader that joins before it knows the topic assigns nothing and must
        # rejoin, a path where kafka-python 3.0.12 can wait forever on a lost wakeup.
        assert consumer.partitions_for_topic("events") == {0, 1}
        while not consumer.assignment():
            consumer.poll(200)
        consumer.commit({TopicPartition("events", 0): OffsetAndMetadata(4, "", -1)})
        listed = kraftwerk("group", "list", data_dir=data_dir).stdout
        assert "readers" in listed and "Stable" in listed
        described = kraftwerk("group", "describe", "readers", data_dir=data_dir).stdout
        row = next(line for line in described.splitlines() if "events" in line and "│ 0 " in line)
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[:5] == ["events", "0", "4", "10", "6"]
        assert cells[7] == "reader-1"
        described = json.loads(kraftwerk("group", "describe", "readers", "--json", data_dir=data_dir).stdout)
        member_id = described["members"][0]["member_id"]
        assert member_id.startswith("reader-1-")  # Kafka's member ids: the client id and a uuid
        assert described == {
            "group_id": "readers", "type": "classic", "state": "Stable", "protocol": "range",
            "members": [{"member_id": member_id, "client_id": "reader-1", "host": "/127.0.0.1",
                         "assignment": [["events", 0], ["events", 1]]}],
            "partitions": [
                {"topic": "events", "partition": 0, "committed": 4, "log_end": 10, "lag": 6, "member_id": member_id,
                 "host": "/127.0.0.1", "client_id": "reader-1"},
                {"topic": "events", "partition": 1, "committed": None, "log_end": 0, "lag": None,
                 "member_id": member_id, "host": "/127.0.0.1", "client_id": "reader-1"}]}
        # Offsets of a live group cannot be moved, as with kafka-consumer-groups.sh.
        refused = subprocess.run([*KRAFTWERK, "group", "reset-offsets", "readers", "--topic",
                                  "events", "--to-earliest", "--data-dir", str(data_dir)], capture_output=True, text=True)
        assert refused.returncode == 1
        assert refused.stderr == "Error: offsets of consumer group 'readers' can only be reset while it is " \
                                 "inactive, but its state is Stable.\n"
    finally:
        consumer.close()

    def reset(*how):
        out = kraftwerk("group", "reset-offsets", "readers", "--topic", "events", *how, data_dir=data_dir).stdout
        return dict(line.split("\t") for line in out.splitlines())

    assert reset("--to-earliest") == {"events-0": "0", "events-1": "0"}
    assert reset("--to-offset", "7") == {"events-0": "7", "events-1": "0"}
    assert reset("--to-latest") == {"events-0": "10", "events-1": "0"}
    assert "Empty" in kraftwerk("group", "list", data_dir=data_dir).stdout
    kraftwerk("group", "delete", "readers", data_dir=data_dir)
    assert "readers" not in kraftwerk("group", "list", data_dir=data_dir).stdout
    kraftwerk("down", data_dir=data_dir)


def wait_for_preferred_leaders(data_dir, topic: str, timeout_s: float = 30) -> None:
    """Until every partition of topic is led by its first replica with all replicas in sync."""
    deadline = time.monotonic() + timeout_s
    while True:
        document = json.loads(kraftwerk("status", "--json", data_dir=data_dir).stdout)
        partitions = next(t["partitions"] for t in document["topics"] if t["name"] == topic)
        if all(p["leader"] == p["replicas"][0] and sorted(p["isr"]) == sorted(p["replicas"]) for p in partitions):
            return
        assert time.monotonic() < deadline, f"preferred leaders of {topic} not back within {timeout_s} s: {partitions}"
        time.sleep(0.2)


def test_node_fault_commands(data_dir):
    kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", "--set", "default.replication.factor=3",
              data_dir=data_dir)
    kraftwerk("topic", "create", "faults", "--partitions", "3", "--replication-factor", "3", data_dir=data_dir)
    state = json.loads((data_dir / "cluster.json").read_text())
    killed = state["nodes"]["2"]["pid"]
    kraftwerk("node", "kill", "2", data_dir=data_dir)
    assert not pid_alive(killed)
    assert kraftwerk("status", data_dir=data_dir).stdout.count("dead") == 1
    kraftwerk("node", "start", "2", data_dir=data_dir)
    kraftwerk("node", "pause", "3", data_dir=data_dir)
    assert kraftwerk("status", data_dir=data_dir).stdout.count("paused") == 1
    kraftwerk("node", "resume", "3", data_dir=data_dir)
    kraftwerk("node", "stop", "1", data_dir=data_dir)
    status = kraftwerk("status", data_dir=data_dir).stdout
    assert status.count("dead") == 1
    # Node 1 handed its leaderships over when it stopped.
    leaders = [line.split("│")[3].strip() for line in status.splitlines() if "│ faults " in line]
    assert len(leaders) == 3 and "1" not in leaders
    kraftwerk("node", "restart", "1", data_dir=data_dir)
    assert kraftwerk("status", data_dir=data_dir).stdout.count("running") == 4  # the controller and 3 nodes
    # Node 1 takes its preferred leaderships back (leader.imbalance.check.interval.seconds, 5 s): write
    # once it has, or a new leader may not know yet that its followers have both messages when asked.
    wait_for_preferred_leaders(data_dir, "faults")
    kraftwerk("produce", "faults", "--partition", "0", "still", "works", data_dir=data_dir)
    partition_0 = next(line for line in kraftwerk("status", data_dir=data_dir).stdout.splitlines()
                       if line.startswith("│ faults │ 0 "))
    cells = [cell.strip() for cell in partition_0.split("│")[1:-1]]
    assert cells[6] == "2"  # the high watermark: both messages are on every replica
    assert sorted(cells[7].split()) == ["1:0", "2:0", "3:0"]

    isolated = kraftwerk("node", "isolate", "3", "--from", "controller", "--from", "1", data_dir=data_dir).stdout
    assert "node 3: isolated from 1, controller;" in isolated
    assert "isolated from nobody" in kraftwerk("node", "heal", "3", data_dir=data_dir).stdout
    assert "delay 150 ms" in kraftwerk("node", "delay", "2", "150", data_dir=data_dir).stdout
    injected = kraftwerk("node", "inject-error", "1", "Produce", "NOT_LEADER_OR_FOLLOWER", "--count", "2",
                         data_dir=data_dir).stdout
    assert "injected errors api 0: [6, 6]" in injected
    refused = subprocess.run([*KRAFTWERK, "node", "inject-error", "1", "Bogus", "6", "--data-dir", str(data_dir)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "does not serve API 'Bogus'" in refused.stderr
    kraftwerk("node", "heal", "1", data_dir=data_dir)
    kraftwerk("node", "heal", "2", data_dir=data_dir)
    kraftwerk("down", data_dir=data_dir)


SAMPLE_SUITE = """
    import pytest
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    def test_default_cluster_has_three_nodes(kraftwerk_cluster):
        assert sorted(kraftwerk_cluster.nodes) == [1, 2, 3]
        producer = KafkaProducer(bootstrap_servers=kraftwerk_cluster.bootstrap_servers)
        producer.send("plugin-topic", b"through the fixture", partition=0).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=kraftwerk_cluster.bootstrap_servers, consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("plugin-topic", 0)])
        consumer.seek_to_beginning()
        assert [r.value for r in consumer] == [b"through the fixture"]
        consumer.close()
        with open("pids.txt", "a") as pids:
            pids.write(" ".join(str(n.pid) for n in kraftwerk_cluster.nodes.values()) + "\\n")

    @pytest.mark.kraftwerk(nodes=1, config={"num.partitions": "4"})
    def test_marker_sizes_and_configures_the_cluster(kraftwerk_cluster):
        assert sorted(kraftwerk_cluster.nodes) == [1]
        kraftwerk_cluster.create_topic("four", partitions=4)
        status = kraftwerk_cluster.status()
        assert [len(t["partitions"]) for t in status["topics"] if t["name"] == "four"] == [4]
        with open("pids.txt", "a") as pids:
            pids.write(str(kraftwerk_cluster.nodes[1].pid) + "\\n")
"""


def test_pytest_plugin_fixture_and_marker(pytester):
    pytester.makepyfile(test_sample=textwrap.dedent(SAMPLE_SUITE))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=2)
    pids = [int(pid) for pid in (pytester.path / "pids.txt").read_text().split()]
    assert len(pids) == 4 and not any(pid_alive(pid) for pid in pids)


def test_up_refuses_a_running_cluster_and_down_spares_reused_pids(data_dir):
    kraftwerk("up", "--nodes", "1", "--port", "0", "--detach", data_dir=data_dir)
    again = subprocess.run([*KRAFTWERK, "up", "--nodes", "1", "--port", "0", "--detach", "--data-dir", str(data_dir)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "already running" in again.stderr
    kraftwerk("down", data_dir=data_dir)

    # The pids in a stale cluster.json may since belong to unrelated processes: down must leave them be.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state_path = data_dir / "cluster.json"
        state = json.loads(state_path.read_text())
        state["controller"]["pid"] = state["process_group"] = bystander.pid
        state["nodes"]["1"]["pid"] = bystander.pid
        state_path.write_text(json.dumps(state))
        kraftwerk("down", data_dir=data_dir)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        state_path.unlink()  # the fixture must not killpg the bystander either


def table_rows(output: str, columns: int) -> dict[str, list[str]]:
    """The rows of the rich tables in output that have `columns` columns, by their first cell."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == columns:
            rows[cells[0]] = cells[1:]
    return rows


def test_bench_prints_every_figure():
    result = subprocess.run([*KRAFTWERK, "bench", "--messages", "2000", "--partitions", "3", "--down-runs", "2",
                             "--startup-runs", "2"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table_rows(result.stdout, columns=4)
    for measure in ("cluster start-up", "produce acks=1", "produce acks=-1", "fetch (consume all)",
                    "leader kill -9: writes unavailable", "leader graceful stop: writes unavailable",
                    "cluster down (min of 2)", "cluster down (median of 2)", "cluster down (max of 2)",
                    *(f"cluster start-up, {count} nodes ({spread} of 2)"
                      for count in (3, 9) for spread in ("min", "median", "max"))):
        assert float(rows[measure][0]) >= 0, f"{measure}: {rows[measure]}"
    assert int(rows["produce acks=-1"][1].replace(",", "")) > 0


def test_bench_at_scale_prints_creation_idle_cost_and_metadata(tmp_path):
    result = subprocess.run([*KRAFTWERK, "bench", "--scale", "--scale-nodes", "3", "--scale-topics", "20",
                             "--idle-seconds", "1", "--metadata-requests", "20", "--scale-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table_rows(result.stdout, columns=3)
    for figure in ("CreateTopics, 20 topics in one request", "until every replica is in sync",
                   "nodes' CPU meanwhile, in user space (all nodes)"):
        assert rows[figure][0] == "s" and float(rows[figure][1]) > 0, rows[figure]
    assert float(rows["nodes' CPU meanwhile, in the kernel (all nodes)"][1]) >= 0
    assert float(rows["until every replica is in sync"][1]) >= float(rows["CreateTopics, 20 topics in one request"][1])
    assert list(tmp_path.iterdir()) == []  # the cluster's data went with it
    for figure in ("idle CPU per node, mean over 1 s", "idle CPU per node, max over 1 s"):
        assert rows[figure][0] == "% of a core" and float(rows[figure][1]) >= 0, rows[figure]
    assert float(rows["RSS per idle node, max"][1]) > 0
    for spread in ("p50", "p99", "max"):  # 20 topics x 3 partitions, every one of them answered
        assert float(rows[f"Metadata v12, all 60 partitions, {spread}"][1]) > 0


def test_replication_bench_prints_latency_and_each_nodes_cpu_per_write():
    result = subprocess.run([sys.executable, "-m", "cluster.bench.replication", "--only", "latency", "--rounds", "20"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for rf in (3, 1):
        section = result.stdout.split(f"RF={rf} (20 writes)")[1]
        for spread in ("p50", "p99", "max"):
            assert f"{spread}: kraftwerk" in section
        cpu = section.split("nodes' CPU per write, user + kernel, busiest first: ")[1].split(" ms")[0].split(", ")
        assert len(cpu) == 3 and float(cpu[0]) > 0 and sorted(map(float, cpu), reverse=True) == list(map(float, cpu))


REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (REPOSITORY / ".git").exists(), reason="needs a git checkout")
def test_ab_bench_alternates_a_worktree_of_the_base_with_this_tree_and_removes_it():
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, text=True, check=True).stdout

    before = git("worktree", "list")
    result = subprocess.run([sys.executable, "-m", "benchmarks.ab", "HEAD", "--pairs", "2", "--rounds", "40"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    head = git("rev-parse", "--short", "HEAD").strip()
    runs = [line for line in result.stdout.splitlines() if line.startswith("pair ")]
    assert [line.split(":")[0] for line in runs] == [
        f"pair 1/2 base {head}", "pair 1/2 this tree", f"pair 2/2 base {head}", "pair 2/2 this tree"]
    for line in runs:
        p50 = float(line.split("p50 ")[1].split(" ms")[0])
        p99 = float(line.split("p99 ")[1].split(" ms")[0])
        assert 0 < p50 <= p99, line
    for figure in ("p50", "p99", "leader's CPU per write", "both followers' CPU per write", "client's CPU per write"):
        row = next(line for line in result.stdout.splitlines() if f" {figure} " in line and "│" in line)
        assert row.rstrip(" │").endswith("of 2"), row
    assert git("worktree", "list") == before


def test_fetch_send_bench_prints_both_ways_for_each_size():
    result = subprocess.run([sys.executable, "-m", "benchmarks.fetch_send", "--sizes-kib", "64", "256",
                             "--bytes-per-size", "1"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if "KiB of records" in line]
    assert [(row[0], row[4]) for row in rows] == [("64", "200"), ("256", "200")]
    for row in rows:
        figures = [float(row[i]) for i in (6, 8, 10, 12)]
        assert all(figure > 0 for figure in figures), row


def test_bench_against_the_mock_prints_each_figure_with_its_ratio():
    result = subprocess.run([*KRAFTWERK, "bench", "--against-mock", "--messages", "2000", "--large-values", "3",
                             "--latency-rounds", "20"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = table_rows(result.stdout, columns=5)
    for figure in ("confluent producer acks=all", "confluent consumer", "confluent consumer, after its first message",
                   "kafka-python producer acks=1"):
        unit, ours, mock, ratio = rows[figure]
        assert unit == "msg/s" and int(ours.replace(",", "")) > 0 and int(mock.replace(",", "")) > 0, rows[figure]
        assert float(ratio.rstrip("x")) > 0, rows[figure]
    for figure in (f"acks=all latency {spread}, RF={rf}" for spread in ("p50", "p99") for rf in (3, 1)):
        unit, ours, mock, ratio = rows[figure]
        assert unit == "ms (lower is better)" and float(ours.replace(",", "")) > 0 and float(mock) > 0, rows[figure]
    for figure in ("1 MB values fetch", "1 MB values fetch, after the first value",
                   "1 MB values fetch, default fetch sizes", "1 MB values fetch, default sizes, after the first"):
        unit, ours, mock, _ = rows[figure]
        assert unit == "MB/s" and int(ours.replace(",", "")) > 0 and mock.startswith("n/a"), rows[figure]


def test_timeline_bench_lines_up_the_steps_of_a_write_across_client_leader_and_followers(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.timeline", "--rounds", "60"],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("60 writes: p50 ")
    steps_table, path_table = result.stdout.split("its critical path")
    steps = [(step, where) for step, (where, _, _) in table_rows(steps_table, columns=4).items()]
    assert steps[0] == ("produce called", "client") and steps[-1] == ("delivery reported", "client")
    in_order = [("request read", "leader"), ("request decoded", "leader"), ("produce started", "leader"),
                ("produce validated", "leader"), ("log appended", "leader"),
                ("produce appended", "leader"), ("follower got answer", "followers"),
                ("follower sent fetch", "followers"), ("fetch started", "leader"), ("produce committed", "leader")]
    assert [steps.index(step) for step in in_order] == sorted(steps.index(step) for step in in_order)
    assert ("follower appended (2nd)", "followers") in steps  # both followers, each write
    parts = list(table_rows(path_table, columns=2))
    assert parts == [name for name, _, _ in CRITICAL_PATH] + ["hops, together", "work, together"]
    assert list(tmp_path.iterdir()) == []  # the nodes' timeline files went with the run


def test_timeline_bench_times_the_leaders_own_steps_with_one_replica(tmp_path):
    pin = ["--pin-leader"] if len(os.sched_getaffinity(0)) >= 2 else []
    result = subprocess.run([sys.executable, "-m", "benchmarks.timeline", "--rounds", "60",
                             "--replication-factor", "1", *pin],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "COLUMNS": "200", "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("60 writes: p50 ")
    assert "one acks=all write, RF=1: median of 60 writes" in result.stdout
    assert "its critical path" not in result.stdout  # no follower, no hops to one
    rows = table_rows(result.stdout, columns=4)
    steps = [step for step, (where, _, _) in rows.items() if where == "leader"]
    assert steps == ["request read", "request decoded", "produce started", "produce validated", "log appended",
                     "produce appended", "produce committed", "answer writing", "answer written"]
    assert not any(where == "followers" for where, _, _ in rows.values())
    warm = re.search(r"in a tight loop in this process: ([0-9.]+) us each", result.stdout)
    assert warm and float(warm.group(1)) > 0, result.stdout
    assert list(tmp_path.iterdir()) == []


def test_instruction_bench_writes_to_replicating_nodes_in_one_process(tmp_path):
    # acks=all with three replicas in sync: the write is answered only once both followers fetched it.
    result = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--inside", "30"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind counts the instructions (scripts/dev-setup installs it)")
def test_instruction_bench_counts_what_one_write_costs():
    result = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--writes", "10", "30"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    counted = re.fullmatch(r"acks=all writes, RF=3, all nodes in one process: ([\d,]+) instructions per write "
                           r"\(10 and 30 writes: ([\d,]+) and ([\d,]+)\)\n", result.stdout)
    assert counted, result.stdout
    per_write, fewer, more = (int(group.replace(",", "")) for group in counted.groups())
    assert 0 < fewer < more
    assert abs(per_write - (more - fewer) / 20) <= 1
