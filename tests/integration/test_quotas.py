"""Client quotas with real clients: AlterClientQuotas and DescribeClientQuotas, a producer and a
consumer held near their byte rates and told so in throttle_time_ms, request-time throttling,
connection creation rates, and clients without a quota left alone.

The nodes keep 2 samples of 1 s (quota.window.num=2), so a rate is taken over 1 to 2 s: a test
sees a quota hold after a second rather than after Kafka's default 11.
"""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from cluster.cli.quotas import alter_client_quotas, describe_client_quotas
from cluster.launch import Cluster

INVALID_REQUEST = 42
QUOTA_CONFIG = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
PRODUCE_RATE = 200_000  # bytes per second
FETCH_RATE = 300_000
VALUE = b"v" * 1000
# Requests of 50 kB, a quarter of a second's quota each, and no more than 500 kB queued: the rate
# is seen request by request, and a test's end does not wait for a long queue.
SMALL_BATCHES = {"linger.ms": 5, "batch.size": 50_000, "queue.buffering.max.messages": 500}


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=1, node_config=QUOTA_CONFIG) as running:
        yield running


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    # every quota a test set is removed, so that the next test starts with none
    described = describe_client_quotas(client)
    alter_client_quotas(client, [(entity, [(key, 0.0, True) for key in values]) for entity, values in described])
    client.close()


def set_quota(client, entity: list, **values) -> None:
    results = alter_client_quotas(client, [(entity, [(key, float(value), False) for key, value in values.items()])])
    assert [(code, message) for _, code, message in results] == [(0, None)]


def test_alter_and_describe_client_quotas(admin):
    client = admin
    results = alter_client_quotas(client, [
        ([("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 1024.0, False),
                                                     ("request_percentage", 50.5, False)]),
        ([("client-id", None)], [("consumer_byte_rate", 2048.0, False)]),
        ([("ip", "10.0.0.7")], [("connection_creation_rate", 5.0, False)]),
    ])
    assert [(code, message) for _, code, message in results] == [(0, None)] * 3
    assert describe_client_quotas(client) == [
        ([("client-id", None)], {"consumer_byte_rate": 2048.0}),
        ([("client-id", "app"), ("user", "alice")], {"producer_byte_rate": 1024.0, "request_percentage": 50.5}),
        ([("ip", "10.0.0.7")], {"connection_creation_rate": 5.0}),
    ]
    # filters: alice's exactly; any client id (the default too, as Kafka matches it), strictly alone;
    # the default client id
    assert describe_client_quotas(client, [("user", 0, "alice")]) == [
        ([("client-id", "app"), ("user", "alice")], {"producer_byte_rate": 1024.0, "request_percentage": 50.5})]
    assert describe_client_quotas(client, [("client-id", 2, None)], strict=True) == [
        ([("client-id", None)], {"consumer_byte_rate": 2048.0})]
    assert describe_client_quotas(client, [("client-id", 0, "app")], strict=True) == []
    assert describe_client_quotas(client, [("client-id", 1, None)]) == [
        ([("client-id", None)], {"consumer_byte_rate": 2048.0})]
    # removed, one key at a time
    alter_client_quotas(client, [([("user", "alice"), ("client-id", "app")], [("request_percentage", 0.0, True)])])
    assert describe_client_quotas(client, [("user", 0, "alice")]) == [
        ([("client-id", "app"), ("user", "alice")], {"producer_byte_rate": 1024.0})]


def test_alter_client_quotas_refuses_what_kafka_refuses(admin):
    client = admin
    refusals = [
        ([("user", "bob")], [("connection_creation_rate", 5.0, False)], "Invalid configuration key connection_creation_rate"),
        ([("user", "bob")], [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
        ([("user", "bob")], [("producer_byte_rate", 10.5, False)], "producer_byte_rate cannot be a fractional value."),
        ([("ip", "10.0.0.8"), ("user", "bob")], [("connection_creation_rate", 5.0, False)],
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        ([("ip", "not an address")], [("connection_creation_rate", 5.0, False)],
         "not an address is not a valid IP or resolvable host."),
        ([("group", "g")], [("producer_byte_rate", 5.0, False)], "Unhandled client quota entity type: group"),
        ([("user", "")], [("producer_byte_rate", 5.0, False)], "Empty user not supported"),
    ]
    for entity, ops, message in refusals:
        (_, code, got), = alter_client_quotas(client, [(entity, ops)])
        assert (code, got) == (INVALID_REQUEST, message)
    # validate_only checks and writes nothing
    (_, code, _), = alter_client_quotas(client, [([("user", "bob")], [("producer_byte_rate", 5.0, False)])],
                                        validate_only=True)
    assert code == 0
    assert describe_client_quotas(client) == []


class Throttles:
    """What librdkafka's throttle_cb reports: the broker's throttle_time_ms of each throttled answer."""

    def __init__(self):
        self.times: list[int] = []

    def __call__(self, event) -> None:
        self.times.append(event.throttle_time)


def produce_for(producer: Producer, topic: str, seconds: float, delivered: list) -> None:
    def on_delivery(error, message):
        if error is None:
            delivered.append((time.monotonic(), len(message.value())))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge()  # what is still queued is not waited for
    producer.flush(10)


def bytes_per_second(events: list, start: float, end: float) -> float:
    return sum(size for at, size in events if start <= at < end) / (end - start)


def new_topic(cluster) -> str:
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic)
    return topic


def test_a_producer_is_held_near_its_byte_rate(cluster, admin):
    topic = new_topic(cluster)
    set_quota(admin, [("client-id", "slow-producer")], producer_byte_rate=PRODUCE_RATE)
    throttles = Throttles()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "slow-producer",
                         **SMALL_BATCHES, "throttle_cb": throttles})
    delivered: list = []
    started = time.monotonic()
    produce_for(producer, topic, 7.0, delivered)
    # steady state, after the first window's burst
    rate = bytes_per_second(delivered, started + 2, started + 7)
    assert 0.4 * PRODUCE_RATE < rate < 1.6 * PRODUCE_RATE, rate
    assert throttles.times and max(throttles.times) > 0

    # a client id without a quota is not throttled, and goes far faster
    free = Throttles()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "free-producer",
                         **SMALL_BATCHES, "throttle_cb": free})
    delivered = []
    started = time.monotonic()
    produce_for(producer, topic, 3.0, delivered)
    assert free.times == []
    assert bytes_per_second(delivered, started, started + 3) > 3 * PRODUCE_RATE


def test_a_consumer_is_held_near_its_byte_rate(cluster, admin):
    topic = new_topic(cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20})
    for _ in range(4000):  # 4 MB: more than the consumer may read in the test's time
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(30)
    set_quota(admin, [("client-id", None)], consumer_byte_rate=FETCH_RATE)  # every client id's default
    throttles = Throttles()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "slow-consumer",
                         "group.id": f"quotas-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "throttle_cb": throttles})
    consumer.subscribe([topic])
    received: list = []
    try:
        while not received:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append((time.monotonic(), len(message.value())))
        started = time.monotonic()
        while time.monotonic() < started + 6:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append((time.monotonic(), len(message.value())))
    finally:
        consumer.close()
    rate = bytes_per_second(received, started + 1, started + 6)
    assert 0.4 * FETCH_RATE < rate < 1.6 * FETCH_RATE, rate
    assert throttles.times and max(throttles.times) > 0


def request(sock: socket.socket, message, response_class, version: int, client_id: str, correlation_id: int):
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    payload = bytes(message.encode(version=version, header=True))
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", receive(sock, 4))[0]
    body = receive(sock, size)
    assert struct.unpack(">i", body[:4])[0] == correlation_id
    return response_class.decode(body[4:], version=version)


def receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return data


def metadata(sock: socket.socket, client_id: str, correlation_id: int) -> int:
    """A Metadata request's throttle_time_ms."""
    return request(sock, MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                            include_cluster_authorized_operations=False,
                                            include_topic_authorized_operations=False),
                   MetadataResponse, 8, client_id, correlation_id).throttle_time_ms


def first_throttle(sock: socket.socket, client_id: str, requests: int = 2000) -> int:
    """The first throttle time in the answers to a stream of Metadata requests (0: none)."""
    for correlation_id in range(1, requests):
        throttle = metadata(sock, client_id, correlation_id)
        if throttle:
            return throttle
    return 0


def test_request_time_is_throttled_and_the_connection_muted(cluster, admin):
    set_quota(admin, [("client-id", "busy")], request_percentage=0.5)  # 5 ms of a thread per second
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        throttle = first_throttle(sock, "busy")
        # capped at one window, as Kafka caps request-time throttles
        assert 0 < throttle <= 1000
        # the node reads nothing more from the connection until the throttle time has passed
        sent = time.monotonic()
        request(sock, ApiVersionsRequest[0](), ApiVersionsResponse, 0, "busy", 9999)
        assert time.monotonic() - sent >= throttle / 1000 - 0.05
    # another client id is not throttled
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert first_throttle(sock, "idle", requests=300) == 0


def test_a_users_quota_comes_before_a_client_ids(cluster, admin):
    """PLAINTEXT clients are User:ANONYMOUS; user + default client id is tried before the client id."""
    set_quota(admin, [("client-id", "roomy")], request_percentage=1000)
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert first_throttle(sock, "roomy", requests=300) == 0
    set_quota(admin, [("user", "ANONYMOUS"), ("client-id", None)], request_percentage=0.5)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert 0 < first_throttle(sock, "roomy") <= 1000


def answered(address: tuple[str, int]) -> bool:
    """Whether a new connection's ApiVersions is answered (else the node closed it unread)."""
    with socket.create_connection(address, timeout=10) as sock:
        try:
            request(sock, ApiVersionsRequest[0](), ApiVersionsResponse, 0, "connector", 1)
            return True
        except ConnectionError:
            return False


def test_connection_creation_rate_of_an_ip(cluster, admin):
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    set_quota(admin, [("ip", "127.0.0.1")], connection_creation_rate=3)
    outcomes = [answered((host, int(port))) for _ in range(8)]
    # three a second: the first ones are served, those over the rate are closed unread
    assert outcomes[:3] == [True, True, True]
    assert False in outcomes[3:]
    # raised, the quota lets them all in
    set_quota(admin, [("ip", "127.0.0.1")], connection_creation_rate=1000)
    time.sleep(2.1)  # (the rate of those refused has passed)
    assert all(answered((host, int(port))) for _ in range(8))


@pytest.mark.kraftwerk(nodes=1, config={**QUOTA_CONFIG, "max.connection.creation.rate": "4"})
def test_max_connection_creation_rate_delays_new_connections(kraftwerk_cluster):
    host, port = kraftwerk_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    time.sleep(2.1)  # the rate of the cluster's own start-up connections has passed
    started = time.monotonic()
    assert all(answered((host, int(port))) for _ in range(12))
    # 12 connections at 4 a second: served, but not at once
    assert time.monotonic() - started >= 1.0


def kraftwerk(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "quota", *args, "--bootstrap-server",
                           cluster.bootstrap_servers.split(",")[0]], capture_output=True, text=True, timeout=60)


def test_the_quota_commands(cluster, admin):
    done = kraftwerk(cluster, "set", "--user", "alice", "--client-id-default", "producer_byte_rate=1048576",
                     "request_percentage=25.5")
    assert (done.returncode, done.stdout) == (0, "set quota of user=alice client-id=<default>\n"), done.stderr
    assert kraftwerk(cluster, "set", "--ip", "10.0.0.9", "connection_creation_rate=7").returncode == 0
    assert kraftwerk(cluster, "set", "--user", "alice", "--client-id-default", "--delete",
                     "request_percentage").returncode == 0
    listed = kraftwerk(cluster, "list", "--json")
    assert json.loads(listed.stdout) == [
        {"entity": {"client-id": None, "user": "alice"}, "quotas": {"producer_byte_rate": 1048576.0}},
        {"entity": {"ip": "10.0.0.9"}, "quotas": {"connection_creation_rate": 7.0}},
    ]
    refused = kraftwerk(cluster, "set", "--user", "alice", "producer_byte_rate=1.5")
    assert (refused.returncode, refused.stderr) == (
        1, "Error: quota of user=alice refused: producer_byte_rate cannot be a fractional value.\n")


@pytest.mark.kraftwerk(nodes=1, config=QUOTA_CONFIG, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-256", users=["alice", "bob"])
def test_a_sasl_users_quota_holds_that_user_only(kraftwerk_cluster):
    from confluent_kafka.admin import AdminClient

    admin = KafkaAdminClient(bootstrap_servers=kraftwerk_cluster.bootstrap_servers,
                             **kraftwerk_cluster.kafka_python_config())
    try:
        set_quota(admin, [("user", "alice")], request_percentage=0.05)  # 0.5 ms of a thread per second
        assert describe_client_quotas(admin) == [([("user", "alice")], {"request_percentage": 0.05})]
    finally:
        admin.close()
    throttled = {}
    for user in ("alice", "bob"):
        throttles = Throttles()
        client = AdminClient({"bootstrap.servers": kraftwerk_cluster.bootstrap_servers,
                              **kraftwerk_cluster.client_config(user), "throttle_cb": throttles})
        for _ in range(3000):  # Metadata requests, each a little of a handler's time
            client.list_topics(timeout=10)
            client.poll(0)
            if throttles.times:
                break
        throttled[user] = bool(throttles.times) and max(throttles.times) > 0
    assert throttled == {"alice": True, "bob": False}
