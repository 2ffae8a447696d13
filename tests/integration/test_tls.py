"""TLS listeners served to real clients: confluent-kafka, kafka-python, aiokafka, KafkaJS, kcat and
Sarama produce and consume over TLS; mutual TLS names the client by its certificate; a plaintext
client on the TLS port, a TLS client on the plaintext port, and certificates the node must not
accept get a closed connection while the node serves everyone else."""
from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import socket
import ssl
import struct
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
)
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from cluster.cli.quotas import alter_client_quotas
from cluster.formats.control import ControlError, call_sync
from cluster.launch import Cluster
from cluster.launch.certificates import (
    certificate_authority, client_certificate, issue, make_certificates, new_key,
)
from tests.integration import go_programs
from tests.integration.js_programs import JS_DIR, kafkajs_missing

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
MESSAGES = 20
# Clients on the SSL listener; the nodes replicate among themselves over INTERNAL.
TWO_LISTENERS = {
    "listeners": "SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "SSL:SSL,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


@contextmanager
def tls_cluster(data_dir: Path, nodes: int, **settings):
    """A cluster serving TLS on its first listener with certificates made for it in `data_dir`."""
    certs = make_certificates(data_dir, [])
    config = {**TWO_LISTENERS, **certs.broker_settings(), **settings}
    with Cluster(nodes=nodes, data_dir=data_dir, node_config=config) as cluster:
        cluster.certs = certs
        yield cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nodes serving TLS without client certificates, shared by the tests of this module that
    leave it as they found it."""
    with tls_cluster(tmp_path_factory.mktemp("tls") / "kraftwerk", nodes=3) as running:
        yield running


@pytest.fixture(scope="module")
def go_bin():
    with go_programs.built() as binaries:
        yield binaries


def new_topic(cluster, prefix: str, **tls) -> str:
    """A new topic of one partition on every node, created over TLS."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(confluent_config(cluster, **tls))
    [future] = admin.create_topics([NewTopic(topic, 1, len(cluster.nodes))]).values()
    future.result(10)
    return topic


def expected(prefix: str) -> list[tuple[bytes, bytes]]:
    return [(f"{prefix}-key-{i}".encode(), f"{prefix} value {i}".encode()) for i in range(MESSAGES)]


def confluent_config(cluster, **more) -> dict:
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "ssl",
            "ssl.ca.location": str(cluster.certs.ca), **more}


def produce(config: dict, topic: str, prefix: str) -> None:
    """The prefix's messages, each acknowledged by every in-sync replica."""
    producer = Producer({**config, "acks": "all"})
    failures = []
    for key, value in expected(prefix):
        producer.produce(topic, value, key, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(30) == 0 and failures == []


def confluent_round_trip(config: dict, topic: str, prefix: str) -> list[tuple[bytes, bytes, int]]:
    """Produces the prefix's messages with acks=all and reads them back: (key, value, offset)."""
    produce(config, topic, prefix)
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = []
    try:
        while len(read) < MESSAGES:
            message = consumer.poll(10)
            assert message is not None, f"only {len(read)} of {MESSAGES} messages read"
            assert message.error() is None, message.error()
            read.append((message.key(), message.value(), message.offset()))
    finally:
        consumer.close()
    return read


def exact(prefix: str) -> list[tuple[bytes, bytes, int]]:
    return [(key, value, offset) for offset, (key, value) in enumerate(expected(prefix))]


# Clients over TLS

def test_confluent_kafka_over_tls(cluster):
    topic = new_topic(cluster, "confluent")
    assert confluent_round_trip(confluent_config(cluster), topic, "confluent") == exact("confluent")


def test_kafka_python_over_tls(cluster):
    topic = new_topic(cluster, "kafka-python")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SSL",
                             ssl_cafile=str(cluster.certs.ca), acks="all")
    offsets = [producer.send(topic, value, key).get(10).offset for key, value in expected("kp")]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SSL",
                             ssl_cafile=str(cluster.certs.ca), enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    read = []
    while len(read) < MESSAGES:
        batches = consumer.poll(timeout_ms=10000)
        assert batches, f"only {len(read)} of {MESSAGES} messages read"
        read += [(r.key, r.value, r.offset) for records in batches.values() for r in records]
    consumer.close()
    assert offsets == list(range(MESSAGES))
    assert read == exact("kp")


def test_aiokafka_over_tls(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = new_topic(cluster, "aiokafka")
    context = ssl.create_default_context(cafile=str(cluster.certs.ca))

    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SSL",
                                             ssl_context=context, acks="all")
        await producer.start()
        try:
            offsets = [(await producer.send_and_wait(topic, value, key)).offset for key, value in expected("aio")]
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, security_protocol="SSL",
                                             ssl_context=context, enable_auto_commit=False, group_id=None)
        await consumer.start()
        read = []
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            while len(read) < MESSAGES:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                read += [(r.key, r.value, r.offset) for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return offsets, read

    offsets, read = asyncio.run(run())
    assert offsets == list(range(MESSAGES))
    assert read == exact("aio")


def test_kafkajs_over_tls(cluster):
    reason = kafkajs_missing()
    if reason:
        pytest.skip(reason)
    topic = new_topic(cluster, "kafkajs")
    assert kafkajs_round_trip(cluster, topic) == kafkajs_answer()


def kafkajs_round_trip(cluster, topic: str, *client_certificate: Path) -> dict:
    result = subprocess.run(["node", str(JS_DIR / "tls.js"), cluster.bootstrap_servers, topic, f"g-{topic}",
                             str(MESSAGES), str(cluster.certs.ca), *map(str, client_certificate)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def kafkajs_answer() -> dict:
    return {"delivered": [{"partition": 0, "offset": i} for i in range(MESSAGES)],
            "consumed": [{"partition": 0, "offset": i, "key": f"kafkajs-key-{i}", "value": f"kafkajs value {i}"}
                         for i in range(MESSAGES)]}


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_kcat_over_tls(cluster):
    topic = new_topic(cluster, "kcat")
    tls = ["-b", cluster.bootstrap_servers, "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={cluster.certs.ca}"]
    payload = b"".join(key + b"\t" + value + b"\n" for key, value in expected("kcat"))
    subprocess.run([KCAT, *tls, "-P", "-t", topic, "-K", "\t", "-X", "acks=all"], input=payload, check=True,
                   timeout=60)
    out = subprocess.run([KCAT, *tls, "-C", "-t", topic, "-o", "beginning", "-e", "-c", str(MESSAGES),
                          "-f", "%k\t%s\t%o\n"], capture_output=True, check=True, timeout=60).stdout
    read = [tuple(line.split(b"\t")) for line in out.splitlines()]
    assert read == [(key, value, str(offset).encode()) for key, value, offset in exact("kcat")]


def test_sarama_over_tls(cluster, go_bin):
    topic = new_topic(cluster, "sarama")
    lines = go_programs.run(go_bin["sarama-tls"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                            "-count", str(MESSAGES), "-ca", str(cluster.certs.ca))
    assert lines == sarama_lines()


def sarama_lines() -> list[dict]:
    """What sarama-tls prints when every message went to partition 0 in order and was read back."""
    records = [{"key": f"sarama-key-{i}", "value": f"sarama value {i}", "partition": 0, "offset": i}
               for i in range(MESSAGES)]
    return [{"event": "delivered", **r} for r in records] + [{"event": "consumed", **r} for r in records]


def test_a_client_that_does_not_trust_the_ca_is_not_served(cluster):
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "ssl",
                         "message.timeout.ms": 3000})
    errors = []
    producer.produce("untrusted", b"never", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(10)
    assert [e.code() for e in errors] == [-192]  # _MSG_TIMED_OUT: no broker would take it


# Bad input

def api_versions_request() -> bytes:
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def test_a_plaintext_client_on_the_tls_port_is_closed_and_the_node_serves_others(cluster):
    with socket.create_connection(("127.0.0.1", cluster.nodes[1].ports["SSL"]), timeout=10) as plain:
        plain.sendall(api_versions_request())
        try:
            answer = plain.recv(1024)
        except ConnectionResetError:
            answer = b""
    # what a TLS server answers a ClientHello it cannot read: an alert or nothing, then the end
    assert answer == b"" or answer[0] == 0x15
    topic = new_topic(cluster, "after-plain")
    assert confluent_round_trip(confluent_config(cluster), topic, "after") == exact("after")


def test_a_tls_client_on_the_plaintext_port_is_closed_and_the_node_serves_others(cluster):
    context = ssl.create_default_context(cafile=str(cluster.certs.ca))
    with socket.create_connection(("127.0.0.1", cluster.nodes[1].ports["INTERNAL"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            context.wrap_socket(raw, server_hostname="127.0.0.1")
    topic = new_topic(cluster, "after-tls")
    assert confluent_round_trip(confluent_config(cluster), topic, "after") == exact("after")


def resident_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_a_thousand_failed_handshakes_leave_the_node_serving_and_its_memory_as_it_was(cluster):
    node = cluster.nodes[1]
    address = ("127.0.0.1", node.ports["SSL"])
    untrusting = ssl.create_default_context()  # the system's CAs: not this cluster's

    def fail_once(i: int) -> None:
        with socket.create_connection(address, timeout=10) as raw:
            if i % 2:
                raw.sendall(api_versions_request())  # plaintext on the TLS port
                try:
                    raw.recv(64)
                except ConnectionResetError:
                    pass
            else:
                with pytest.raises(ssl.SSLCertVerificationError):
                    untrusting.wrap_socket(raw, server_hostname="127.0.0.1")

    for i in range(100):  # (the node's memory settles first)
        fail_once(i)
    before = resident_kib(node.pid)
    for i in range(1000):
        fail_once(i)
    assert resident_kib(node.pid) - before < 8 * 1024
    topic = new_topic(cluster, "after-many")
    assert confluent_round_trip(confluent_config(cluster), topic, "after") == exact("after")


def test_the_nodes_log_nothing_worse_than_info(cluster):
    """Everything above (TLS clients, and the bad ones) is served without a warning."""
    for node in cluster.nodes.values():
        bad = [line for line in node.log_path.read_text().splitlines() if " WARNING " in line or " ERROR " in line]
        assert bad == [], f"node {node.node_id}"


# Mutual TLS

@pytest.fixture
def mtls_cluster(tmp_path):
    with tls_cluster(tmp_path / "kraftwerk", nodes=1, **{
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+)$/$1/,RULE:^CN=(.*),O=Example$/$1/U"}) as running:
        yield running


def test_mtls_serves_clients_with_a_certificate_from_the_ca(mtls_cluster, go_bin):
    cert, key = client_certificate(mtls_cluster.data_dir, "alice")
    tls = {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    topic = new_topic(mtls_cluster, "mtls", **tls)
    assert confluent_round_trip(confluent_config(mtls_cluster, **tls), topic, "mtls") == exact("mtls")

    producer = KafkaProducer(bootstrap_servers=mtls_cluster.bootstrap_servers, security_protocol="SSL",
                             ssl_cafile=str(mtls_cluster.certs.ca), ssl_certfile=str(cert), ssl_keyfile=str(key))
    assert producer.send(topic, b"kafka-python value", b"kafka-python-key").get(10).offset == MESSAGES
    producer.close()

    lines = go_programs.run(go_bin["sarama-tls"], "-brokers", mtls_cluster.bootstrap_servers,
                            "-topic", new_topic(mtls_cluster, "sarama", **tls), "-count", str(MESSAGES),
                            "-ca", str(mtls_cluster.certs.ca), "-cert", str(cert), "-key", str(key))
    assert lines == sarama_lines()
    if kafkajs_missing() is None:
        assert kafkajs_round_trip(mtls_cluster, new_topic(mtls_cluster, "kafkajs", **tls), cert, key) \
            == kafkajs_answer()


def librdkafka_error(cluster, cert: Path | None, key: Path | None) -> int:
    """The error librdkafka reports when it asks for metadata with this certificate (or none)."""
    more = {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)} if cert else {}
    consumer = Consumer(confluent_config(cluster, **more, **{"group.id": "refused"}))
    try:
        with pytest.raises(KafkaException) as failure:
            consumer.list_topics(timeout=5)
        return failure.value.args[0].code()
    finally:
        consumer.close()


def tls_connection(cluster, cert: Path | None, key: Path | None) -> str:
    """How the node answers an ApiVersions request on a connection with this client certificate
    (or none): "served", or "closed" (the node closes a connection whose handshake fails without
    an alert, so the client sees the end of the connection or a reset)."""
    context = ssl.create_default_context(cafile=str(cluster.certs.ca))
    if cert:
        context.load_cert_chain(cert, key)
    with socket.create_connection(("127.0.0.1", cluster.nodes[1].ports["SSL"]), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(api_versions_request())
                return "served" if tls.recv(4) else "closed"
        except (ssl.SSLEOFError, ConnectionResetError):
            return "closed"


def write_certificate(directory: Path, name: str, cert, key) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_mtls_refuses_clients_without_a_good_certificate_and_serves_the_others(mtls_cluster, tmp_path):
    stranger = client_certificate(tmp_path / "other-ca", "mallory")
    ca_cert, ca_key = certificate_authority(mtls_cluster.data_dir)
    key = new_key()
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=10)
    expired = write_certificate(tmp_path, "expired", issue(ca_cert, ca_key, key, "old", [], server=False, days=1,
                                                            not_valid_before=long_ago), key)
    unmapped = client_certificate(mtls_cluster.data_dir, "Eve Smith")  # no mapping rule takes this name
    good_cert, good_key = client_certificate(mtls_cluster.data_dir, "bob")
    answers = {name: tls_connection(mtls_cluster, *pair) for name, pair in (
        ("none", (None, None)), ("other CA", stranger), ("expired", expired), ("unmapped", unmapped),
        ("good", (good_cert, good_key)))}
    assert answers == {"none": "closed", "other CA": "closed", "expired": "closed", "unmapped": "closed",
                       "good": "served"}
    assert [librdkafka_error(mtls_cluster, *pair) for pair in ((None, None), stranger, expired, unmapped)] \
        == [KafkaError._TRANSPORT] * 4
    tls = {"ssl.certificate.location": str(good_cert), "ssl.key.location": str(good_key)}
    topic = new_topic(mtls_cluster, "after", **tls)
    assert confluent_round_trip(confluent_config(mtls_cluster, **tls), topic, "after") == exact("after")
    log = mtls_cluster.nodes[1].log_path.read_text().splitlines()
    assert [line for line in log if " WARNING " in line or " ERROR " in line] == []
    # the name the node read from the certificate, in Java's RFC 2253 rendering, and the rules it tried
    assert any(line.endswith(" INFO node.server: closing connection from 127.0.0.1: No rules apply to CN=Eve Smith, "
                             "rules [RULE:^CN=([a-z]+)$/$1, RULE:^CN=(.*),O=Example$/$1/U]") for line in log)


# The product's own path: `kraftwerk up --tls` (the marker's tls=True) makes the certificates and
# serves TLS on the only listener, which the nodes also replicate over.

@pytest.mark.kraftwerk(nodes=3, tls=True)
def test_a_tls_cluster_replicates_over_tls_through_a_node_s_restart(kraftwerk_cluster):
    cluster = kraftwerk_cluster
    config = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()}
    assert config == {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SSL",
                      "ssl.ca.location": str(cluster.data_dir / "ca.pem")}
    cluster.create_topic("replicated", partitions=1, replication_factor=3)
    produce(config, "replicated", "before")
    assert cluster.wait_in_sync("replicated")
    cluster.kill_node(2)
    produce(config, "replicated", "during")
    cluster.restart_node(2)
    assert cluster.wait_in_sync("replicated")
    cluster.kill_node(1)
    cluster.kill_node(3)
    # node 2 alone now: it holds what it fetched over TLS before its restart and after it
    consumer = KafkaConsumer(bootstrap_servers=cluster.address(cluster.nodes[2]), enable_auto_commit=False,
                             **cluster.kafka_python_config())
    consumer.assign([TopicPartition("replicated", 0)])
    consumer.seek_to_beginning()
    read = []
    while len(read) < 2 * MESSAGES:
        batches = consumer.poll(timeout_ms=15000)
        assert batches, f"only {len(read)} of {2 * MESSAGES} messages read"
        read += [(r.key, r.value, r.offset) for records in batches.values() for r in records]
    consumer.close()
    assert read == exact("before") + [(k, v, o + MESSAGES) for k, v, o in exact("during")]


@pytest.mark.kraftwerk(nodes=2, tls=True)
def test_a_tls_cluster_s_control_channel_admits_only_the_control_certificate(kraftwerk_cluster):
    """The controller's port and the nodes' admin ports speak mutual TLS with the control channel's own
    CA: kraftwerk's commands work; a plaintext request, and a TLS one presenting no certificate or a
    Kafka user's certificate from the cluster's CA, are closed unanswered."""
    cluster = kraftwerk_cluster
    assert [b["node_id"] for b in cluster.control("status")["brokers"]] == [1, 2]
    assert cluster.node_control(1, "faults")["isolated_from"] == []
    user_cert = client_certificate(cluster.data_dir, "alice")
    trusting_the_channel = str(cluster.data_dir / "tls" / "control-ca.pem")
    strangers = {"plaintext": None, "no certificate": ssl.create_default_context(cafile=trusting_the_channel),
                 "a user's certificate": ssl.create_default_context(cafile=trusting_the_channel)}
    strangers["a user's certificate"].load_cert_chain(*map(str, user_cert))
    ports = {"controller": cluster.controller_port, "node 1's admin port": cluster.nodes[1].admin_port}
    for what, port in ports.items():
        for who, context in strangers.items():
            with pytest.raises((ControlError, ssl.SSLError, ConnectionError), match=r"closed|alert|reset|EOF"):
                call_sync("127.0.0.1", port, "status" if what == "controller" else "faults", timeout=5, tls=context)
    cluster.restart_node(2)  # re-registers over the secured channel
    cluster.wait_ready()
    cluster.create_topic("after-restart", partitions=2, replication_factor=2)
    assert cluster.wait_in_sync("after-restart")


@pytest.mark.kraftwerk(nodes=1, security_protocol="SSL", super_user="admin")
def test_an_mtls_client_is_the_user_its_certificate_names(kraftwerk_cluster):
    """`up --security-protocol SSL --super-user` asks for client certificates and maps CN=NAME to
    User:NAME; a quota on User:alice then holds the client whose certificate says CN=alice, not bob's."""
    cluster = kraftwerk_cluster
    alice = cluster.client_config("alice")
    assert x509.load_pem_x509_certificate(Path(alice["ssl.certificate.location"]).read_bytes()).subject \
        .rfc4514_string() == "CN=alice"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, **cluster.kafka_python_config())
    try:
        results = alter_client_quotas(admin, [([("user", "alice")], [("request_percentage", 0.05, False)])])
        assert [code for _, code, _ in results] == [0]
    finally:
        admin.close()
    throttled = {}
    for user in ("alice", "bob"):
        times = []
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config(user),
                              "throttle_cb": lambda event: times.append(event.throttle_time)})
        for _ in range(3000):  # Metadata requests, each a little of a handler's time
            client.list_topics(timeout=10)
            client.poll(0)
            if times:
                break
        throttled[user] = bool(times) and max(times) > 0
    assert throttled == {"alice": True, "bob": False}


CUSTOM_RULES = {"ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1@kraftwerk/U",
                "super.users": "User:ADMIN@KRAFTWERK;User:KRAFTWERK-NODE@KRAFTWERK"}


@pytest.mark.parametrize("principal", [
    pytest.param("User:alice", marks=pytest.mark.kraftwerk(nodes=1, security_protocol="SSL", super_user="admin"),
                 id="up's rule"),
    pytest.param("User:ALICE@KRAFTWERK", marks=pytest.mark.kraftwerk(
        nodes=1, security_protocol="SSL", super_user="admin", config=CUSTOM_RULES), id="custom rule"),
])
def test_acls_hold_an_mtls_client_as_its_mapped_certificate_name(kraftwerk_cluster, principal):
    cluster = kraftwerk_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()})
    for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(10)
    grant = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, principal, "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([grant]).values():
        assert future.result(10) is None

    def delivery_error(user: str) -> int | None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config(user),
                             "message.timeout.ms": 5000})
        outcome = []
        producer.produce("orders", b"hello", on_delivery=lambda error, _m: outcome.append(error))
        producer.flush(10)
        return outcome[0] and outcome[0].code()

    assert {user: delivery_error(user) for user in ("alice", "bob")} == {
        "alice": None, "bob": KafkaError.TOPIC_AUTHORIZATION_FAILED}
