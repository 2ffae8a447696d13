"""kcat in a KIP-848 consumer group (`-X group.protocol=consumer`): two kcat processes of one group
share the topic's partitions, every message is read by exactly one of them, and the group is a
consumer group, not a classic one.

kcat links the system librdkafka, which before 2.4 does not know `group.protocol`; it runs here
against the librdkafka that the confluent-kafka wheel ships (same ABI), as docs/groups.md tells
users to.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
PARTITIONS = 4
MESSAGES = 400


def _wheel_librdkafka() -> Path | None:
    try:
        import confluent_kafka
    except ImportError:
        return None
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    return found[0] if found else None


LIBRDKAFKA = _wheel_librdkafka()
pytestmark = [
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)"),
    pytest.mark.skipif(LIBRDKAFKA is None, reason="the confluent-kafka wheel's librdkafka is not there"),
]


@pytest.fixture
def kcat_env():
    """An environment in which kcat loads the wheel's librdkafka."""
    with tempfile.TemporaryDirectory(prefix="kcat-lib-") as lib_dir:
        os.symlink(LIBRDKAFKA, Path(lib_dir) / "librdkafka.so.1")
        yield {**os.environ, "LD_LIBRARY_PATH": lib_dir}


def _start_member(bootstrap: str, group: str, topic: str, out: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([KCAT, "-b", bootstrap, "-G", group, "-X", "group.protocol=consumer",
                             "-X", "auto.offset.reset=earliest", "-f", "%p %o %s\n", "-u", topic],
                            stdout=out.open("wb"), stderr=subprocess.DEVNULL, env=env, start_new_session=True)


def _stop(member: subprocess.Popen) -> None:
    if member.poll() is None:
        os.killpg(member.pid, signal.SIGTERM)
        try:
            member.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(member.pid, signal.SIGKILL)
            member.wait(15)


def _group_view(bootstrap: str, group: str) -> tuple[str, str, list[int]]:
    """The group's type and state, and how many partitions each member holds; or the error that
    describing it met while the group and `__consumer_offsets` come up (librdkafka does not retry)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        described = admin.describe_consumer_groups([group])[group].result(30)
    except KafkaException as exc:
        return exc.args[0].name(), "", []
    return (described.type.name, described.state.name,
            [len(m.assignment.topic_partitions) for m in described.members])


def test_two_kcat_members_share_a_topic_under_the_consumer_protocol(cluster, tmp_path, kcat_env):
    from confluent_kafka import Producer

    bootstrap = cluster.bootstrap_servers
    topic = f"kcat-consumer-protocol-{time.monotonic_ns()}"
    group = f"{topic}-group"
    cluster.create_topic(topic, partitions=PARTITIONS)
    outputs = [tmp_path / "a.out", tmp_path / "b.out"]
    members = [_start_member(bootstrap, group, topic, out, kcat_env) for out in outputs]
    try:
        # Messages are written once the partitions are split and settled, so that none moves while read.
        deadline = time.monotonic() + 30
        while _group_view(bootstrap, group) != ("CONSUMER", "STABLE", [PARTITIONS // 2] * 2):
            assert time.monotonic() < deadline, _group_view(bootstrap, group)
            time.sleep(0.2)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(MESSAGES):
            producer.produce(topic, value=f"m{i}".encode(), partition=i % PARTITIONS)
        producer.flush(30)
        deadline = time.monotonic() + 30
        while sum(len(out.read_text().splitlines()) for out in outputs) < MESSAGES:
            assert time.monotonic() < deadline, "the kcat members did not read every message"
            time.sleep(0.2)
    finally:
        for member in members:
            _stop(member)
    lines = [line.split() for out in outputs for line in out.read_text().splitlines()]
    assert sorted(value for _, _, value in lines) == sorted(f"m{i}" for i in range(MESSAGES))
    by_member = [{int(line.split()[0]) for line in out.read_text().splitlines()} for out in outputs]
    assert all(by_member), f"a member read nothing: partitions read {by_member}"
    assert not by_member[0] & by_member[1], f"a partition was read by both members: {by_member}"
