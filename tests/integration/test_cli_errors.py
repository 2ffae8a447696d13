"""Every failing `kraftwerk` command prints one line on stderr, in the words of Kafka's own tools,
and exits with status 1."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import pytest

from tests.integration.test_cli import KRAFTWERK, kraftwerk


def failing(*args: str) -> str:
    """Run a command that must fail; its one stderr line."""
    result = subprocess.run([*KRAFTWERK, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli-errors") / "cluster"
    kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", "--set", "auto.create.topics.enable=false",
              data_dir=directory)
    kraftwerk("topic", "create", "orders", "--partitions", "3", data_dir=directory)
    yield directory
    subprocess.run([*KRAFTWERK, "down", "--data-dir", str(directory)], capture_output=True, timeout=120)
    state = directory / "cluster.json"
    try:  # whatever down could not stop goes, with its whole process group
        os.killpg(json.loads(state.read_text())["process_group"], signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("args, message", [
    (["topic", "create", "orders"], "Error: topic 'orders' already exists."),
    (["topic", "describe", "nope"], "Error: topic 'nope' does not exist."),
    (["topic", "delete", "nope"], "Error: topic 'nope' does not exist."),
    (["topic", "create", "wide", "--replication-factor", "5"],
     "Error: topic 'wide': Unable to replicate the partition 5 time(s): The target replication factor of 5 cannot "
     "be reached because only 3 broker(s) are registered. (INVALID_REPLICATION_FACTOR)"),
    (["topic", "create", "bad name"], "Error: topic 'bad name': Topic name \"bad name\" is illegal, it contains a character other than "
                                     "ASCII alphanumerics, '.', '_' and '-' (INVALID_TOPIC)"),
    (["topic", "create", "kept", "--config", "retention.ms=soon"],
     "Error: topic 'kept': Invalid value soon for configuration retention.ms: Not a number of type LONG (INVALID_CONFIG)"),
    (["topic", "create", "kept", "--config", "retention.ms"],
     "Error: Invalid value for --config: 'retention.ms' is not key=value. See 'kraftwerk topic create --help'."),
    (["group", "describe", "nobody"], "Error: consumer group 'nobody' does not exist."),
    (["group", "delete", "nobody"], "Error: consumer group 'nobody' does not exist."),
    (["group", "reset-offsets", "nobody", "--topic", "nope", "--to-earliest"], "Error: topic 'nope' does not exist."),
    (["produce", "orders", "--partition", "7", "lost"],
     "Error: topic 'orders' has no partition 7 (its partitions are 0-2)."),
    (["produce", "missing", "lost"], "Error: topic 'missing' does not exist."),
    (["consume", "orders", "--partition", "3"], "Error: topic 'orders' has no partition 3 (its partitions are 0-2)."),
    (["consume", "missing"], "Error: topic 'missing' does not exist."),
    (["node", "kill", "9"], "Error: no node 9 in this cluster (nodes [1, 2, 3])"),
    (["node", "start", "1"], "Error: node 1 is already running (kraftwerk node restart 1 restarts it)"),
    (["node", "isolate", "1", "--from", "everyone"],
     "Error: Invalid value for --from: 'everyone': expected controller, clients or a node id. "
     "See 'kraftwerk node isolate --help'."),
    (["topic", "create"], "Error: Missing argument 'NAME'. See 'kraftwerk topic create --help'."),
    (["topic", "create", "orders", "--partitions", "many"],
     "Error: Invalid value for '--partitions': 'many' is not a valid integer. See 'kraftwerk topic create --help'."),
    (["status", "--verbose"], "Error: No such option '--verbose'. See 'kraftwerk status --help'."),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_error_is_one_line(data_dir, args, message):
    assert failing(*args, "--data-dir", str(data_dir)) == message


def test_unknown_command():
    assert failing("bogus") == "Error: No such command 'bogus'. See 'kraftwerk --help'."


def test_commands_without_a_cluster(tmp_path):
    empty = str(tmp_path / "nothing-here")
    for command in (["status"], ["down"], ["topic", "list"], ["node", "kill", "1"], ["check-failover"]):
        assert failing(*command, "--data-dir", empty) == \
            f"Error: no cluster in {empty} (start one with kraftwerk up)"


def test_unreachable_bootstrap_server():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert failing("topic", "list", "--bootstrap-server", f"127.0.0.1:{port}") == \
        f"Error: cannot reach a Kafka broker at 127.0.0.1:{port} " \
        f"(KafkaTimeoutError: Unable to bootstrap from 127.0.0.1:{port})"


def test_node_commands_need_the_node_in_the_right_state(data_dir):
    kraftwerk("node", "kill", "3", data_dir=data_dir)
    try:
        for action in ("kill", "stop", "pause", "resume"):
            assert failing("node", action, "3", "--data-dir", str(data_dir)) == \
                "Error: node 3 is not running (kraftwerk node start 3 starts it)"
    finally:
        kraftwerk("node", "start", "3", data_dir=data_dir)
