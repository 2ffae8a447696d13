"""SCRAM credentials through the admin APIs with confluent-kafka's AdminClient: added, replaced,
described on every node, deleted, and each refusal with Kafka's error code."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion,
)
from kafka.protocol.admin import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse

from cluster.launch import Cluster
from tests.integration.wire import exchange_once

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=2) as running:
        yield running


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def upsert(user: str, mechanism=SHA256, iterations: int = 4096, password: bytes = b"secret"):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)


def alter(admin, alterations) -> dict[str, int]:
    """user -> error code (0: done)."""
    outcome = {}
    for user, future in admin.alter_user_scram_credentials(alterations, request_timeout=15).items():
        try:
            future.result()
            outcome[user] = 0
        except KafkaException as exc:
            outcome[user] = exc.args[0].code()
    return outcome


def described(admin, users=None) -> dict:
    """user -> sorted [(mechanism, iterations)], or the error code of that user."""
    if users is None:
        found = admin.describe_user_scram_credentials(request_timeout=15).result()
        return {user: sorted((i.mechanism, i.iterations) for i in d.scram_credential_infos)
                for user, d in found.items()}
    outcome = {}
    for user, future in admin.describe_user_scram_credentials(users, request_timeout=15).items():
        try:
            outcome[user] = sorted((i.mechanism, i.iterations) for i in future.result().scram_credential_infos)
        except KafkaException as exc:
            outcome[user] = exc.args[0].code()
    return outcome


def described_on(cluster, node_id: int, user: str):
    host, port = cluster.address(cluster.nodes[node_id]).rsplit(":", 1)
    R = DescribeUserScramCredentialsRequest
    response = exchange_once((host, int(port)), R[0](users=[R.UserName(name=user)]),
                             DescribeUserScramCredentialsResponse, 0)
    (result,) = response.results
    return result.error_code, [(i.mechanism, i.iterations) for i in result.credential_infos]


def test_credentials_added_replaced_described_and_deleted(admin, cluster):
    assert alter(admin, [upsert("alice"), upsert("bob", SHA512, 8192)]) == {"alice": 0, "bob": 0}
    assert described(admin, ["alice", "bob"]) == {"alice": [(SHA256, 4096)], "bob": [(SHA512, 8192)]}
    assert alter(admin, [upsert("alice", SHA512, 10000)]) == {"alice": 0}
    assert alter(admin, [upsert("alice", SHA256, 5000)]) == {"alice": 0}
    assert described(admin)["alice"] == [(SHA256, 5000), (SHA512, 10000)]
    # Every node answers from its own image, which the controller's records reached.
    for node_id in cluster.nodes:
        assert described_on(cluster, node_id, "alice") == (0, [(1, 5000), (2, 10000)])
    assert alter(admin, [UserScramCredentialDeletion("alice", SHA256)]) == {"alice": 0}
    assert described(admin, ["alice"]) == {"alice": [(SHA512, 10000)]}
    assert alter(admin, [UserScramCredentialDeletion("alice", SHA512), UserScramCredentialDeletion("bob", SHA512)]) \
        == {"alice": 0, "bob": 0}
    assert "alice" not in described(admin) and "bob" not in described(admin)
    assert described(admin, ["alice"]) == {"alice": KafkaError.RESOURCE_NOT_FOUND}
    assert described_on(cluster, 1, "alice") == (91, [])


def test_refusals_have_kafkas_codes(admin):
    outcome = alter(admin, [
        UserScramCredentialDeletion("ghost", SHA256),  # no such credential
        upsert("few", iterations=4095),
        upsert("many", iterations=16385),
        upsert("twice"), upsert("twice", SHA512),
        # Kafka checks deletions first: the failed one settles the user, its upsertion is not tried.
        UserScramCredentialDeletion("gone", SHA512), upsert("gone"),
        upsert("fine"),
    ])
    assert outcome == {
        "ghost": KafkaError.RESOURCE_NOT_FOUND,
        "few": KafkaError.UNACCEPTABLE_CREDENTIAL,
        "many": KafkaError.UNACCEPTABLE_CREDENTIAL,
        "twice": KafkaError.DUPLICATE_RESOURCE,
        "gone": KafkaError.RESOURCE_NOT_FOUND,
        "fine": 0,
    }
    assert described(admin, ["fine", "few", "twice", "gone"]) == {
        "fine": [(SHA256, 4096)], "few": KafkaError.RESOURCE_NOT_FOUND, "twice": KafkaError.RESOURCE_NOT_FOUND,
        "gone": KafkaError.RESOURCE_NOT_FOUND}
    assert alter(admin, [UserScramCredentialDeletion("fine", SHA256)]) == {"fine": 0}


def test_error_messages_on_the_wire(cluster):
    from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    R = AlterUserScramCredentialsRequest
    request = R[0](deletions=[R.ScramCredentialDeletion(name="ghost", mechanism=1)], upsertions=[
        R.ScramCredentialUpsertion(name="odd", mechanism=3, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        R.ScramCredentialUpsertion(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32)])
    response = exchange_once((host, int(port)), request, AlterUserScramCredentialsResponse, 0)
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
        ("ghost", 91, "Attempt to delete a user credential that does not exist"),
        ("odd", 33, "Unknown SCRAM mechanism"),
        ("", 93, "Username must not be empty"),
    ]
    D = DescribeUserScramCredentialsRequest
    response = exchange_once((host, int(port)), D[0](users=[D.UserName(name="x"), D.UserName(name="x")]),
                             DescribeUserScramCredentialsResponse, 0)
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
        ("x", 92, "Cannot describe SCRAM credentials for the same user twice in a single request: x")]


def test_the_user_commands(cluster, admin):
    import subprocess
    import sys

    def kraftwerk(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cluster.cli", "user", *args, "--bootstrap-server",
                               cluster.bootstrap_servers], capture_output=True, text=True, timeout=60)

    added = kraftwerk("add", "carol", "--password", "carol-secret", "--mechanism", "SCRAM-SHA-512",
                      "--iterations", "8192")
    assert (added.returncode, added.stdout) == (0, "Added user 'carol' (SCRAM-SHA-512, 8192 iterations).\n")
    generated = kraftwerk("add", "dan")
    assert generated.returncode == 0
    assert generated.stdout.startswith("Added user 'dan' (SCRAM-SHA-256, 4096 iterations). Password: ")
    assert len(generated.stdout.split("Password: ")[1].strip()) == 24
    assert described(admin, ["carol", "dan"]) == {"carol": [(SHA512, 8192)], "dan": [(SHA256, 4096)]}
    listed = kraftwerk("list")
    assert listed.stdout.splitlines() == ["USER   MECHANISM      ITERATIONS",
                                          "carol  SCRAM-SHA-512  8192",
                                          "dan    SCRAM-SHA-256  4096"]
    too_few = kraftwerk("add", "erin", "--iterations", "100")
    assert (too_few.returncode, too_few.stderr) == (
        1, "Error: Invalid value for '--iterations': 100 is not in the range 4096<=x<=16384. "
           "See 'kraftwerk user add --help'.\n")
    assert kraftwerk("remove", "carol").stdout == "Removed user 'carol' (SCRAM-SHA-512).\n"
    assert kraftwerk("remove", "dan").returncode == 0
    missing = kraftwerk("remove", "carol")
    assert (missing.returncode, missing.stderr) == (1, "Error: user 'carol' has no SCRAM credential.\n")
    assert kraftwerk("list").stdout == "USER  MECHANISM      ITERATIONS\n"
