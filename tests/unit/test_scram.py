"""SCRAM credentials and the SCRAM exchange against RFC 7677's SCRAM-SHA-256 test vector, and the
controller's checks of AlterUserScramCredentials."""
from __future__ import annotations

import asyncio
import base64

import pytest

from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage, ScramCredential
from cluster.formats.scram import ScramError, salted_password, scram_credential
from controller.scram_credentials import alter_scram_credentials
from node.security import sasl_scram
from node.security.sasl_common import SaslAuthenticationError, SaslCredentialsRejected
from node.security.sasl_scram import ScramExchange

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.fixture
def rfc_exchange(monkeypatch):
    monkeypatch.setattr(sasl_scram, "server_nonce", lambda: SERVER_NONCE)
    credential = scram_credential("pencil", "SCRAM-SHA-256", 4096, SALT)
    return ScramExchange("SCRAM-SHA-256", lambda user: {1: credential} if user == "user" else {})


def test_rfc_7677_exchange(rfc_exchange):
    assert rfc_exchange.step(CLIENT_FIRST) == SERVER_FIRST
    assert not rfc_exchange.complete
    assert rfc_exchange.step(CLIENT_FINAL) == SERVER_FINAL
    assert rfc_exchange.complete and rfc_exchange.user == "user"
    assert rfc_exchange.credential is None


def test_a_wrong_proof_is_refused(rfc_exchange):
    rfc_exchange.step(CLIENT_FIRST)
    with pytest.raises(SaslCredentialsRejected, match="Invalid client credentials"):
        rfc_exchange.step(CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb"))
    assert not rfc_exchange.complete


def test_a_final_message_with_another_nonce_is_refused(rfc_exchange):
    rfc_exchange.step(CLIENT_FIRST)
    with pytest.raises(SaslCredentialsRejected, match="Invalid client nonce in the final client message."):
        rfc_exchange.step(CLIENT_FINAL.replace(b"hNlF$k0", b"hNlF$k1"))


@pytest.mark.parametrize("first, reason", [
    (b"n,,n=nobody,r=abc", "Authentication failed: Invalid user credentials"),
    (b"y,,n=user,r=abc", "Invalid SCRAM client first message format"),
    (b"n,,n=user,r=abc,tokenauth=true", "Token Authentication failed: Invalid tokenId : user"),
])
def test_a_first_message_is_refused_without_saying_why(rfc_exchange, first, reason):
    with pytest.raises(SaslCredentialsRejected, match=reason):
        rfc_exchange.step(first)


def test_an_authorization_id_other_than_the_user_is_refused_in_words(rfc_exchange):
    with pytest.raises(SaslAuthenticationError) as refused:
        rfc_exchange.step(b"n,a=admin,n=user,r=abc")
    assert refused.value.message == ("Authentication failed: Client requested an authorization id that is "
                                     "different from username")


def test_saslname_escapes():
    assert sasl_scram.username("a=2Cb=3Dc") == "a,b=c"


def test_rfc_7677_credential():
    salted = salted_password("pencil", "SCRAM-SHA-256", SALT, 4096)
    credential = scram_credential("pencil", "SCRAM-SHA-256", 4096, SALT)
    assert salted.hex() == "c4a49510323ab4f952cac1fa99441939e78ea74d6be81ddf7096e87513dc615d"
    assert (credential.salt, credential.iterations) == (SALT, 4096)
    assert len(credential.stored_key) == len(credential.server_key) == 32


def test_sha_512_keys_are_64_bytes_and_the_salt_random():
    one, two = scram_credential("p", "SCRAM-SHA-512"), scram_credential("p", 2)
    assert len(one.salt) == 32 and one.salt != two.salt
    assert len(one.stored_key) == len(one.server_key) == 64


@pytest.mark.parametrize("mechanism, iterations, message", [
    ("SCRAM-SHA-1", 4096, "Unknown SCRAM mechanism 'SCRAM-SHA-1'"),
    ("SCRAM-SHA-256", 4095, "Too few iterations"),
    ("SCRAM-SHA-256", 16385, "Too many iterations"),
])
def test_bad_credential_arguments(mechanism, iterations, message):
    with pytest.raises(ScramError, match=message):
        scram_credential("p", mechanism, iterations)


def upsertion(name, mechanism=1, iterations=4096):
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": b"salt",
            "salted_password": b"x" * 32}


def test_the_controller_checks_each_user_as_kafka_does():
    image = MetadataImage()
    image.scram_credentials["carol"] = {2: ScramCredential(b"s", b"k", b"k", 4096)}
    outcome = asyncio.run(alter_scram_credentials(
        image,
        deletions=[{"name": "carol", "mechanism": 2}, {"name": "nobody", "mechanism": 1},
                   {"name": "dave", "mechanism": 1}],
        upsertions=[upsertion("alice"), upsertion("alice", 2), upsertion("bob", 3), upsertion("erin", 1, 100),
                    upsertion("frank", 2, 20000), upsertion(""), upsertion("grace", 2, 8192)]))
    assert outcome.results == [
        {"user": "carol", "error_code": 0, "error_message": None},
        {"user": "grace", "error_code": 0, "error_message": None},
        {"user": "nobody", "error_code": ErrorCode.RESOURCE_NOT_FOUND,
         "error_message": "Attempt to delete a user credential that does not exist"},
        {"user": "dave", "error_code": ErrorCode.RESOURCE_NOT_FOUND,
         "error_message": "Attempt to delete a user credential that does not exist"},
        {"user": "alice", "error_code": ErrorCode.DUPLICATE_RESOURCE,
         "error_message": "A user credential cannot be altered twice in the same request"},
        {"user": "bob", "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "error_message": "Unknown SCRAM mechanism"},
        {"user": "erin", "error_code": ErrorCode.UNACCEPTABLE_CREDENTIAL, "error_message": "Too few iterations"},
        {"user": "frank", "error_code": ErrorCode.UNACCEPTABLE_CREDENTIAL, "error_message": "Too many iterations"},
        {"user": "", "error_code": ErrorCode.UNACCEPTABLE_CREDENTIAL, "error_message": "Username must not be empty"},
    ]
    assert [(kind, r["name"], r["mechanism"]) for kind, r in outcome.records] == [
        ("RemoveUserScramCredentialRecord", "carol", 2), ("UserScramCredentialRecord", "grace", 2)]
    grace = outcome.records[1][1]
    assert (grace["salt"], grace["iterations"], len(grace["stored_key"]), len(grace["server_key"])) == (
        b"salt", 8192, 64, 64)
