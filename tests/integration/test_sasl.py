"""SASL on SASL_PLAINTEXT and SASL_SSL listeners with real clients: confluent-kafka (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512, OAUTHBEARER with librdkafka's unsecured JWTs), kafka-python and aiokafka (PLAIN,
SCRAM), KafkaJS (PLAIN, SCRAM), kcat and Sarama 1.22 (PLAIN after a v0 handshake, raw tokens)
produce and read back exact messages. Bad input: a wrong password, an unknown mechanism, a SCRAM
exchange cut halfway, a request before authentication, thousands of failed logins (the node keeps
serving and does not grow); re-authentication with connections.max.reauth.ms."""
from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
)

from tests.integration import go_programs
from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.observe import logged_errors
from tests.integration.wire import exchange, send_request

LISTENER = "sasl_plaintext"  # the SASL listener's name, as listener.name.<listener>.* configs spell it
JAAS_PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
JAAS_OAUTHBEARER = 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;'
REAUTH_MS = 2000  # SCRAM-SHA-512 logins only: the other tests' logins do not expire
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
         "SCRAM-SHA-512": ("carol", "carol-secret")}
SASL_CONFIG = {
    # The launcher reaches the node on the first listener; clients on the SASL one.
    "listeners": "INTERNAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": "INTERNAL",
    "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS_PLAIN,
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    f"listener.name.{LISTENER}.plain.sasl.jaas.config": JAAS_PLAIN,
    f"listener.name.{LISTENER}.oauthbearer.sasl.jaas.config": JAAS_OAUTHBEARER,
    f"listener.name.{LISTENER}.scram-sha-512.connections.max.reauth.ms": str(REAUTH_MS),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from cluster.launch import Cluster

    from cluster.launch.certificates import make_certificates

    data_dir = tmp_path_factory.mktemp("sasl")
    certificates = make_certificates(data_dir, ["127.0.0.1"])
    config = {**SASL_CONFIG, **certificates.broker_settings()}
    with Cluster(nodes=1, data_dir=data_dir, node_config=config) as running:
        admin = AdminClient(client_config(running, "PLAIN", "admin", "admin-secret"))
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret"),
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"carol-secret")])
        assert {user: f.result(15) for user, f in futures.items()} == {"bob": None, "carol": None}
        yield running
    logged = logged_errors(running)
    assert logged == {name: [] for name in logged}, "errors logged while refusing bad logins"


def client_config(cluster, mechanism: str, user: str = "", password: str = "",
                  protocol: str = "SASL_PLAINTEXT") -> dict:
    config = {"bootstrap.servers": bootstrap(cluster, protocol), "security.protocol": protocol,
              "sasl.mechanism": mechanism}
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(ca_file(cluster))
    if mechanism == "OAUTHBEARER":
        return {**config, "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={user}"}
    return {**config, "sasl.username": user, "sasl.password": password}


def bootstrap(cluster, protocol: str = "SASL_PLAINTEXT") -> str:
    """The node's address on the listener of that name (each listener is named after its protocol)."""
    return ",".join(f"127.0.0.1:{node.ports[protocol]}" for node in cluster.nodes.values())


def ca_file(cluster):
    return cluster.data_dir / "ca.pem"


def address(cluster) -> tuple[str, int]:
    host, port = bootstrap(cluster).split(",")[0].rsplit(":", 1)
    return host, int(port)


def new_topic(cluster) -> str:
    name = f"sasl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(cluster, "PLAIN", "admin", "admin-secret"))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def confluent_roundtrip(config: dict, topic: str, values: list[str]) -> list[str]:
    producer = Producer(config)
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, deadline = [], time.time() + 20
    try:
        while len(read) < len(values) and time.time() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                read.append(message.value().decode())
    finally:
        consumer.close()
    return read


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_confluent_kafka(cluster, mechanism, protocol):
    user, password = USERS.get(mechanism, ("dave", ""))
    topic = new_topic(cluster)
    values = [f"{mechanism} {protocol} {i}" for i in range(5)]
    assert confluent_roundtrip(client_config(cluster, mechanism, user, password, protocol), topic, values) == values


@pytest.mark.parametrize("mechanism, protocol", [("PLAIN", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_PLAINTEXT"),
                                                 ("SCRAM-SHA-512", "SASL_PLAINTEXT"), ("SCRAM-SHA-512", "SASL_SSL")])
def test_kafka_python(cluster, mechanism, protocol):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    user, password = USERS[mechanism]
    security = {"bootstrap_servers": bootstrap(cluster, protocol), "security_protocol": protocol,
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password,
                **({"ssl_cafile": str(ca_file(cluster))} if protocol == "SASL_SSL" else {})}
    topic = new_topic(cluster)
    producer = KafkaProducer(**security)
    offsets = [producer.send(topic, f"kafka-python {i}".encode(), partition=0).get(10).offset for i in range(3)]
    producer.close()
    assert offsets == [0, 1, 2]
    consumer = KafkaConsumer(**security, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert [r.value for r in consumer] == [b"kafka-python 0", b"kafka-python 1", b"kafka-python 2"]
    consumer.close()


@pytest.mark.parametrize("mechanism, protocol", [("PLAIN", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_PLAINTEXT"),
                                                 ("SCRAM-SHA-256", "SASL_SSL")])
def test_aiokafka(cluster, mechanism, protocol):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    user, password = USERS[mechanism]
    security = {"bootstrap_servers": bootstrap(cluster, protocol), "security_protocol": protocol,
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    if protocol == "SASL_SSL":
        security["ssl_context"] = create_ssl_context(cafile=str(ca_file(cluster)))
    topic = new_topic(cluster)

    async def roundtrip():
        producer = AIOKafkaProducer(**security)
        await producer.start()
        try:
            offsets = [(await producer.send_and_wait(topic, f"aiokafka {i}".encode(), partition=0)).offset
                       for i in range(3)]
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **security, auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            read = [(await consumer.getone()).value for _ in range(3)]
        finally:
            await consumer.stop()
        return offsets, read
    assert asyncio.run(asyncio.wait_for(roundtrip(), 30)) == ([0, 1, 2], [b"aiokafka 0", b"aiokafka 1", b"aiokafka 2"])


@pytest.mark.parametrize("mechanism, protocol", [("PLAIN", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_PLAINTEXT"),
                                                 ("SCRAM-SHA-512", "SASL_PLAINTEXT"), ("SCRAM-SHA-256", "SASL_SSL")])
def test_kafkajs(cluster, mechanism, protocol):
    if kafkajs_missing():
        pytest.skip(kafkajs_missing())
    user, password = USERS[mechanism]
    topic = new_topic(cluster)
    tls = [str(ca_file(cluster))] if protocol == "SASL_SSL" else []
    result = subprocess.run(["node", "sasl.js", bootstrap(cluster, protocol), topic, mechanism, user, password, "3",
                             *tls], cwd=JS_DIR, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == [{"offset": i, "value": f"kafkajs {mechanism} {i}"} for i in range(3)]


def test_kafkajs_wrong_password(cluster):
    if kafkajs_missing():
        pytest.skip(kafkajs_missing())
    result = subprocess.run(["node", "sasl.js", bootstrap(cluster), "never", "PLAIN", "alice", "wrong", "1"],
                            cwd=JS_DIR, capture_output=True, text=True, timeout=90)
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "error": "KafkaJSSASLAuthenticationError",
        "message": "SASL PLAIN authentication failed: Authentication failed: Invalid username or password"}


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kcat(cluster, protocol):
    topic = new_topic(cluster)
    login = ["-b", bootstrap(cluster, protocol), "-X", f"security.protocol={protocol}",
             "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=bob", "-X", "sasl.password=bob-secret",
             *(["-X", f"ssl.ca.location={ca_file(cluster)}"] if protocol == "SASL_SSL" else [])]
    produced = subprocess.run(["kcat", *login, "-P", "-t", topic, "-p", "0"], input="one\ntwo\nthree\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", *login, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n"],
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout == "0 one\n1 two\n2 three\n", consumed.stderr


def test_sarama_raw_tokens_after_a_v0_handshake(cluster):
    with go_programs.built() as binaries:
        for version in ("", "1.0.0"):  # 0.8.2: handshake v0, then the token raw; 1.0: v1 and SaslAuthenticate
            topic = new_topic(cluster)
            read = go_programs.run(binaries["sarama-sasl"], "-brokers", bootstrap(cluster), "-topic", topic,
                                   "-user", "alice", "-password", "alice-secret", "-count", "3",
                                   *(["-version", version] if version else []))
            assert read == [{"offset": i, "value": f"sarama sasl {i}"} for i in range(3)]
        refused = subprocess.run([str(binaries["sarama-sasl"]), "-brokers", bootstrap(cluster), "-topic", topic,
                                  "-user", "alice", "-password", "wrong", "-count", "1"],
                                 capture_output=True, text=True, timeout=90)
        assert refused.returncode == 1 and "run out of available brokers" in refused.stderr


# --- the wire, as a client that misbehaves speaks it ---

def handshake(sock: socket.socket, mechanism: str, version: int = 1):
    return exchange(sock, SaslHandshakeRequest[version](mechanism=mechanism), SaslHandshakeResponse, version)


def authenticate(sock: socket.socket, token: bytes, version: int = 1):
    return exchange(sock, SaslAuthenticateRequest[version](auth_bytes=token), SaslAuthenticateResponse, version)


def closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_wrong_password_is_answered_then_the_connection_closed(cluster):
    with socket.create_connection(address(cluster), timeout=10) as sock:
        assert handshake(sock, "PLAIN").error_code == 0
        answer = authenticate(sock, b"\0alice\0wrong")
        assert (answer.error_code, answer.error_message) == (58, "Authentication failed: Invalid username or password")
        assert closed(sock)
    with socket.create_connection(address(cluster), timeout=10) as sock:
        assert handshake(sock, "SCRAM-SHA-256").error_code == 0
        first = authenticate(sock, b"n,,n=bob,r=0123456789abcdef")
        assert first.error_code == 0 and first.auth_bytes.startswith(b"r=0123456789abcdef")
        nonce = first.auth_bytes.split(b",")[0][2:]
        answer = authenticate(sock, b"c=biws,r=" + nonce + b",p=" + base64.b64encode(b"x" * 32))
        assert (answer.error_code, answer.error_message) == (
            58, "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-256")
        assert closed(sock)


def test_unknown_mechanism(cluster):
    with socket.create_connection(address(cluster), timeout=10) as sock:
        answer = handshake(sock, "GSSAPI")
        assert (answer.error_code, answer.mechanisms) == (
            33, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
        assert closed(sock)


def test_a_request_before_authentication_closes_the_connection(cluster):
    request = MetadataRequest[1](topics=None)
    with socket.create_connection(address(cluster), timeout=10) as sock:
        send_request(sock, request, 1)
        assert closed(sock)
    with socket.create_connection(address(cluster), timeout=10) as sock:  # mid-exchange
        assert handshake(sock, "SCRAM-SHA-512").error_code == 0
        assert authenticate(sock, b"n,,n=carol,r=abc").error_code == 0
        send_request(sock, request, 1)
        assert closed(sock)


def test_a_scram_exchange_cut_halfway_leaves_the_node_serving(cluster):
    for _ in range(20):
        with socket.create_connection(address(cluster), timeout=10) as sock:
            assert handshake(sock, "SCRAM-SHA-256").error_code == 0
            assert authenticate(sock, b"n,,n=bob,r=abc").error_code == 0
    topic = new_topic(cluster)
    assert confluent_roundtrip(client_config(cluster, "SCRAM-SHA-256", *USERS["SCRAM-SHA-256"]), topic, ["after"]) \
        == ["after"]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def failed_logins(cluster, count: int) -> None:
    for i in range(count):
        with socket.create_connection(address(cluster), timeout=10) as sock:
            mechanism, token = (("PLAIN", b"\0alice\0wrong") if i % 2 else ("SCRAM-SHA-256", b"n,,n=nobody,r=abc"))
            assert handshake(sock, mechanism).error_code == 0
            assert authenticate(sock, token).error_code == 58
            assert closed(sock)


def test_thousands_of_failed_logins(cluster):
    (node,) = cluster.nodes.values()
    failed_logins(cluster, 200)  # what the allocator keeps after its first use is not growth
    before = rss_kb(node.pid)
    failed_logins(cluster, 2000)
    assert rss_kb(node.pid) - before < 4096
    topic = new_topic(cluster)
    assert confluent_roundtrip(client_config(cluster, "PLAIN", *USERS["PLAIN"]), topic, ["still served"]) \
        == ["still served"]
    lines = [line for line in node.log_path.read_text().splitlines() if "authentication of" in line]
    assert len(lines) >= 2200 and all(" INFO " in line for line in lines)


# --- re-authentication (KIP-368) ---

def scram_login(sock: socket.socket, user: str, password: str, mechanism: str = "SCRAM-SHA-512"):
    """A SCRAM login with the node's own client code path, over a blocking socket: the final answer."""
    from cluster.formats.scram import MECHANISM_CODES, digest, hmac_digest, salted_password

    code = MECHANISM_CODES[mechanism]
    assert handshake(sock, mechanism).error_code == 0
    first = authenticate(sock, f"n,,n={user},r=clientnonce".encode())
    fields = dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))
    salted = salted_password(password, code, base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"n={user},r=clientnonce,{first.auth_bytes.decode()},{without_proof}".encode()
    client_key = hmac_digest(code, salted, b"Client Key")
    proof = bytes(a ^ b for a, b in zip(client_key, hmac_digest(code, digest(code, client_key), auth_message)))
    return authenticate(sock, f"{without_proof},p={base64.b64encode(proof).decode()}".encode())


def test_session_lifetime_and_reauthentication(cluster):
    with socket.create_connection(address(cluster), timeout=10) as sock:
        final = scram_login(sock, "carol", "carol-secret")
        assert final.error_code == 0 and final.auth_bytes.startswith(b"v=")
        assert REAUTH_MS - 500 < final.session_lifetime_ms <= REAUTH_MS
        again = scram_login(sock, "carol", "carol-secret")  # on the same connection, before it expires
        assert again.error_code == 0 and REAUTH_MS - 500 < again.session_lifetime_ms <= REAUTH_MS
        assert exchange(sock, MetadataRequest[1](topics=None), MetadataResponse, 1).brokers
    with socket.create_connection(address(cluster), timeout=10) as sock:  # PLAIN logins do not expire
        assert handshake(sock, "PLAIN").error_code == 0
        assert authenticate(sock, b"\0alice\0alice-secret").session_lifetime_ms == 0


def test_reauthentication_as_another_principal_is_refused(cluster):
    with socket.create_connection(address(cluster), timeout=10) as sock:
        assert handshake(sock, "PLAIN").error_code == 0
        assert authenticate(sock, b"\0alice\0alice-secret").error_code == 0
        assert handshake(sock, "PLAIN").error_code == 0
        answer = authenticate(sock, b"\0admin\0admin-secret")
        assert (answer.error_code, answer.error_message) == (
            58, "Cannot change principals during re-authentication from User.alice: User.admin")
        assert closed(sock)


def test_an_expired_login_closes_the_connection(cluster):
    with socket.create_connection(address(cluster), timeout=10) as sock:
        assert scram_login(sock, "carol", "carol-secret").error_code == 0
        time.sleep(REAUTH_MS / 1000 + 0.5)
        send_request(sock, MetadataRequest[1](topics=None), 1)
        assert closed(sock)


def test_librdkafka_reauthenticates(cluster):
    """librdkafka logs in again before the session lifetime the node gave it ends, and keeps producing."""
    topic = new_topic(cluster)
    errors = []
    producer = Producer({**client_config(cluster, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"]),
                         "error_cb": errors.append})
    for i in range(6):
        producer.produce(topic, f"reauth {i}".encode(), partition=0)
        assert producer.flush(10) == 0
        time.sleep(REAUTH_MS / 2000)
    assert errors == []
    consumer_config = client_config(cluster, "PLAIN", *USERS["PLAIN"])
    consumer = Consumer({**consumer_config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, deadline = [], time.time() + 20
    while len(read) < 6 and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read.append(message.value().decode())
    consumer.close()
    assert read == [f"reauth {i}" for i in range(6)]


# --- a node's own login (node/security/sasl_client.py), as replication and peer connections use it ---

@pytest.mark.parametrize("mechanism, user, password, refusal", [
    ("PLAIN", "admin", "admin-secret", None),
    ("SCRAM-SHA-512", "carol", "carol-secret", None),
    ("SCRAM-SHA-256", "bob", "wrong", (58, "Authentication failed during authentication due to invalid credentials "
                                           "with SASL mechanism SCRAM-SHA-256")),
])
def test_the_nodes_client_logs_in(cluster, mechanism, user, password, refusal):
    from node.security import sasl_client

    async def login_then_metadata():
        reader, writer = await asyncio.open_connection(*address(cluster))
        try:
            try:
                await sasl_client.authenticate(reader, writer, mechanism, user, password)
            except sasl_client.SaslClientError as exc:
                return exc.error_code, str(exc)
            request = MetadataRequest[1](topics=None)
            request.with_header(correlation_id=99, client_id="peer")
            writer.write(bytes(request.encode(version=1, header=True, framed=True)))
            size = int.from_bytes(await reader.readexactly(4), "big")
            body = await reader.readexactly(size)
            return MetadataResponse.decode(body[4:], version=1).brokers[0].port
        finally:
            writer.close()
    outcome = asyncio.run(asyncio.wait_for(login_then_metadata(), 20))
    assert outcome == (refusal or address(cluster)[1])


# --- a cluster launched with SASL (the marker's options, as `kraftwerk up` takes them) ---

@pytest.mark.kraftwerk(nodes=2, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512")
def test_a_scram_cluster_and_its_users(kraftwerk_cluster):
    """The nodes log in to each other with SCRAM to replicate; `kraftwerk user` adds a user with the
    super user's client_config from cluster.json, and the new user logs in."""
    import sys

    cluster = kraftwerk_cluster
    admin_config = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()}
    admin = AdminClient(admin_config)
    admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(15)
    values = [f"replicated {i}" for i in range(5)]
    assert confluent_roundtrip({**admin_config, "acks": "all"}, "replicated", values) == values
    assert cluster.wait_in_sync("replicated")

    def kraftwerk(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cluster.cli", "user", *args,
                               "--data-dir", str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    added = kraftwerk("add", "erin", "--password", "erin-secret", "--mechanism", "SCRAM-SHA-512")
    assert (added.returncode, added.stdout) == (0, "Added user 'erin' (SCRAM-SHA-512, 4096 iterations).\n")
    assert "erin   SCRAM-SHA-512  4096" in kraftwerk("list").stdout.splitlines()
    erin = {**admin_config, "sasl.username": "erin", "sasl.password": "erin-secret"}
    assert set(AdminClient(erin).list_topics(timeout=10).brokers) == {1, 2}
    errors = []
    wrong = AdminClient({**erin, "sasl.password": "wrong", "error_cb": errors.append})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=3)
    wrong.poll(1)
    refusal = re.compile(r"sasl_plaintext://127\.0\.0\.1:\d+/\w+: SASL authentication error: Authentication failed "
                         r"during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
                         r"\(after \d+ms in state AUTH_REQ\)")
    assert [e for e in errors if e.code() == KafkaError._AUTHENTICATION and refusal.fullmatch(e.str())], errors
