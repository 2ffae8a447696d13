"""docker/compose.yaml: a controller and three nodes from server.properties, each in its own
container; `down` and `up` keep topics and messages in the named volumes.

Runs `docker compose` (v2) or `docker-compose` (v1) on the image built from this checkout, under
a project name and subnet of its own; `down -v` removes everything it made. Skipped, with the
reason, where there is no docker daemon or no compose.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from cluster.launch import ClusterError

docker_backend = pytest.importorskip("cluster.launch.docker_backend")
pytest.importorskip("docker", reason="the docker SDK is not installed (pip install 'kraftwerk[docker]')")

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"
READY_TIMEOUT_S = 60


def compose_command() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return [shutil.which("docker-compose")] if shutil.which("docker-compose") else None


@pytest.fixture(scope="module")
def compose():
    """Runs compose commands for one project; the project's containers, network and volumes go at the end."""
    try:
        client = docker_backend.docker_client()
    except ClusterError as exc:
        pytest.skip(str(exc))
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    subnet = next(docker_backend.free_subnets(client, start=int(uuid.uuid4().hex[:4], 16)))
    prefix = str(subnet.network_address).rsplit(".", 1)[0]
    env = {**os.environ, "KRAFTWERK_IMAGE": docker_backend.ensure_image(), "KRAFTWERK_SUBNET": prefix}
    project = f"kraftwerk-test-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([*command, "-f", str(COMPOSE_FILE), "-p", project, *args], env=env,
                                capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    run.bootstrap = f"{prefix}.21:9092,{prefix}.22:9092,{prefix}.23:9092"
    try:
        yield run
    finally:
        run("down", "-v")


def create_topic_when_ready(bootstrap: str, topic: str) -> None:
    """Create the topic once the nodes have registered: right after `up` they may still be starting."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, bootstrap_timeout_ms=5000)
            try:
                admin.create_topics([NewTopic(topic, 3, 3)])
                return
            finally:
                admin.close()
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # a node still registering refuses replication factor 3


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000, bootstrap_timeout_ms=READY_TIMEOUT_S * 1000)
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


def test_compose_cluster_serves_and_keeps_messages_across_down_and_up(compose):
    from kafka import KafkaProducer

    compose("up", "-d")
    create_topic_when_ready(compose.bootstrap, "orders")
    producer = KafkaProducer(bootstrap_servers=compose.bootstrap, acks="all")
    values = [f"order {i}".encode() for i in range(20)]
    for value in values:
        producer.send("orders", value)
    producer.flush()
    producer.close()
    assert sorted(consume_all(compose.bootstrap, "orders", len(values))) == sorted(values)

    compose("down")
    compose("up", "-d")
    assert sorted(consume_all(compose.bootstrap, "orders", len(values))) == sorted(values)
