"""SASL's server side: JAAS configs, PLAIN, OAUTHBEARER tokens, the session an exchange leaves, and
the node's client side logging in to it."""
from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
)

from cluster.formats.config import BrokerConfig
from cluster.formats.image import MetadataImage
from cluster.formats.scram import scram_credential
from node.security import sasl, sasl_client
from node.security.sasl_common import JaasError, SaslAuthenticationError, parse_jaas
from node.security.session import ListenerInfo, Session

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a \\"quoted\\" pass";')
LISTENER = ListenerInfo("SASL_PLAINTEXT", "SASL_PLAINTEXT")


def broker(**configs) -> SimpleNamespace:
    base = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}
    image = MetadataImage()
    image.scram_credentials["alice"] = {1: scram_credential("alice-secret", 1), 2: scram_credential("s512", 2)}
    return SimpleNamespace(config=BrokerConfig({**base, **configs}), image=image)


def test_jaas_parsing():
    (entry,) = parse_jaas(JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": 'a "quoted" pass'}
    two = parse_jaas("a.B optional x=1; c.D sufficient y=\"2\";")
    assert [(e.login_module, e.flag, e.options) for e in two] == [("a.B", "optional", {"x": "1"}),
                                                                   ("c.D", "sufficient", {"y": "2"})]


@pytest.mark.parametrize("text", ["a.B required x=1", "a.B maybe x=1;", "a.B required x;", "", "a.B required x=\"1;"])
def test_bad_jaas_is_refused(text):
    with pytest.raises(JaasError):
        parse_jaas(text)


def login(node, mechanism: str, *tokens: bytes, session: Session | None = None, version: int = 1):
    session = session or Session.opened(LISTENER, "10.0.0.1")
    assert sasl.handshake(node, session, mechanism, version) == 0
    answers = [asyncio.run(sasl.authenticate(node, session, token)) for token in tokens]
    return session, answers


def test_plain_login():
    session, answers = login(broker(), "PLAIN", b'\0alice\0a "quoted" pass')
    assert answers == [b""]
    assert (session.authenticated, session.principal, session.exchange, session.expires_ms) == (
        True, "User:alice", None, None)


@pytest.mark.parametrize("token, message", [
    (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
    (b"\0nobody\0a", "Authentication failed: Invalid username or password"),
    (b"\0\0a", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"alice\0a", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"admin\0alice\0a \"quoted\" pass",
     "Authentication failed: Client requested an authorization id that is different from username"),
])
def test_plain_refusals(token, message):
    node = broker()
    session = Session.opened(LISTENER, "10.0.0.1")
    with pytest.raises(SaslAuthenticationError) as refused:
        login(node, "PLAIN", token, session=session)
    assert (refused.value.error_code, refused.value.message) == (58, message)
    assert (session.authenticated, session.failed, session.exchange) == (False, True, None)


def test_handshake_answers():
    node = broker(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    session = Session.opened(LISTENER, "")
    assert sasl.handshake(node, session, "PLAIN", 1) == 33
    assert session.failed
    session = Session.opened(LISTENER, "")
    assert sasl.handshake(node, session, "SCRAM-SHA-512", 0) == 0
    assert (session.mechanism, session.raw_tokens) == ("SCRAM-SHA-512", True)
    assert sasl.handshake(node, session, "SCRAM-SHA-512", 1) == 34  # an exchange under way
    assert sasl.handshake(node, Session.opened(ListenerInfo("PLAINTEXT", "PLAINTEXT"), ""), "PLAIN", 1) == 34


def scram_client_tokens(password: str, mechanism: str):
    """Drives sasl_client's SCRAM against the server exchange in-process: what each side said."""
    node = broker()
    session = Session.opened(LISTENER, "")
    assert sasl.handshake(node, session, mechanism, 1) == 0

    class Loop:
        async def token(self, data: bytes) -> bytes:
            return await sasl.authenticate(node, session, data)
    asyncio.run(sasl_client._scram(Loop(), mechanism, "alice", password))
    return session


def test_scram_login_with_the_nodes_client():
    assert scram_client_tokens("alice-secret", "SCRAM-SHA-256").principal == "User:alice"
    assert scram_client_tokens("s512", "SCRAM-SHA-512").principal == "User:alice"


def test_scram_wrong_password_gets_kafkas_generic_message():
    with pytest.raises(SaslAuthenticationError) as refused:
        scram_client_tokens("wrong", "SCRAM-SHA-256")
    assert refused.value.message == ("Authentication failed during authentication due to invalid credentials "
                                     "with SASL mechanism SCRAM-SHA-256")


def test_reauthentication_keeps_the_principal_or_is_refused():
    node = broker(**{"connections.max.reauth.ms": "60000"})
    session, _ = login(node, "PLAIN", b"\0alice\0a \"quoted\" pass")
    assert session.expires_ms - int(time.time() * 1000) in range(59000, 60001)
    assert 59000 <= sasl.session_lifetime_ms(session) <= 60000
    login(node, "PLAIN", b"\0alice\0a \"quoted\" pass", session=session)
    assert session.principal == "User:alice" and session.authenticated
    with pytest.raises(SaslAuthenticationError) as refused:
        login(node, "PLAIN", b"\0admin\0admin-secret", session=session)
    assert refused.value.message == "Cannot change principals during re-authentication from User.alice: User.admin"
    assert not session.authenticated


def test_reauthentication_needs_a_v1_handshake():
    session, _ = login(broker(), "PLAIN", b"\0alice\0a \"quoted\" pass")
    assert sasl.handshake(broker(), session, "PLAIN", 0) == 34
    assert session.failed and not session.authenticated


def test_reauthentication_with_another_mechanism_is_refused():
    session, _ = login(broker(), "PLAIN", b"\0alice\0a \"quoted\" pass")
    with pytest.raises(SaslAuthenticationError) as refused:
        login(broker(), "SCRAM-SHA-256", b"n,,n=alice,r=abc", session=session)
    assert refused.value.message == ("SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for "
                                     "re-authentication of mechanism 'PLAIN'")


def test_authenticate_before_a_handshake_is_an_illegal_state():
    session = Session.opened(LISTENER, "")
    with pytest.raises(SaslAuthenticationError) as refused:
        asyncio.run(sasl.authenticate(broker(), session, b"\0alice\0a"))
    assert refused.value.error_code == 34 and session.failed


def test_inter_broker_credentials():
    assert sasl.inter_broker_credentials(broker().config, "SASL_PLAINTEXT") == ("PLAIN", "admin", "admin-secret")
    scram = broker(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                      "listener.name.internal.scram-sha-512.sasl.jaas.config":
                          'org.apache.kafka.common.security.scram.ScramLoginModule required '
                          'username="n" password="p";'})
    assert sasl.inter_broker_credentials(scram.config, "INTERNAL") == ("SCRAM-SHA-512", "n", "p")
    assert sasl.inter_broker_credentials(BrokerConfig({}), "INTERNAL") is None


# --- OAUTHBEARER ---

def b64(data) -> str:
    raw = json.dumps(data).encode() if isinstance(data, dict) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unsecured(claims: dict, header: dict | None = None) -> str:
    return f"{b64(header or {'alg': 'none'})}.{b64(claims)}."


def bearer(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def now() -> int:
    """The time now, in seconds: asked by each test, since a suite may run for most of an hour after
    this module is collected."""
    return int(time.time())


def timed(claims: dict) -> dict:
    """Claims whose exp, iat and nbf are given as seconds from now."""
    return {key: now() + value if key in ("exp", "iat", "nbf") else value for key, value in claims.items()}


def test_an_unsecured_token_logs_in_as_its_subject_until_it_expires():
    node = broker(**{"connections.max.reauth.ms": "3600000"})
    claims = timed({"sub": "carol", "iat": 0, "exp": 60})
    session, answers = login(node, "OAUTHBEARER", bearer(unsecured(claims)))
    assert answers == [b""] and session.principal == "User:carol"
    assert session.expires_ms == claims["exp"] * 1000  # the token's expiry comes before max.reauth


@pytest.mark.parametrize("claims, header, challenge", [
    ({"sub": "carol", "exp": -10}, None, b'{"status":"invalid_token"}'),
    ({"sub": "carol"}, None, b'{"status":"invalid_token"}'),
    ({"exp": 60}, None, b'{"status":"invalid_token"}'),
    ({"sub": "carol", "exp": 60, "iat": 600}, None, b'{"status":"invalid_token"}'),
    ({"sub": "carol", "exp": 60}, {"alg": "RS256"}, b'{"status":"invalid_token"}'),
    ({"sub": "carol", "exp": 60, "scope": "read"}, None,
     b'{"status":"insufficient_scope", "scope":"[read, write]"}'),
])
def test_a_bad_unsecured_token_gets_the_json_challenge_then_fails(claims, header, challenge):
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredValidatorRequiredScope="read write";') if "scope" in claims else ""
    node = broker(**({"sasl.jaas.config": jaas} if jaas else {}))
    session = Session.opened(LISTENER, "")
    _, answers = login(node, "OAUTHBEARER", bearer(unsecured(timed(claims), header)), session=session)
    assert answers == [challenge] and not session.authenticated
    with pytest.raises(SaslAuthenticationError) as refused:
        asyncio.run(sasl.authenticate(node, session, b"\x01"))
    assert refused.value.message == challenge.decode()


def test_clock_skew_and_principal_claim_options():
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredValidatorPrincipalClaimName="user" unsecuredValidatorAllowableClockSkewMs="30000";')
    node = broker(**{"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas})
    session, _ = login(node, "OAUTHBEARER", bearer(unsecured(timed({"user": "dan", "exp": -5}))))
    assert session.principal == "User:dan"


def test_an_authorization_id_must_be_the_tokens_principal():
    with pytest.raises(SaslAuthenticationError) as refused:
        login(broker(), "OAUTHBEARER", bearer(unsecured(timed({"sub": "carol", "exp": 60})), authzid="admin"))
    assert refused.value.message == ("Authentication failed: Client requested an authorization id (admin) that "
                                     "is different from the token's principal name (carol)")


def test_a_malformed_first_message_gets_the_generic_message():
    with pytest.raises(SaslAuthenticationError) as refused:
        login(broker(), "OAUTHBEARER", b"n,,\x01auth=Basic abc\x01\x01")
    assert refused.value.message == ("Authentication failed during authentication due to invalid credentials "
                                     "with SASL mechanism OAUTHBEARER")


def signed(key, alg: str, kid: str, claims: dict) -> str:
    signing_input = f"{b64({'alg': alg, 'kid': kid})}.{b64(claims)}".encode()
    if alg == "RS256":
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{signing_input.decode()}.{b64(signature)}"


def jwk(key, kid: str) -> dict:
    numbers = key.public_key().public_numbers()
    if isinstance(numbers, rsa.RSAPublicNumbers):
        def n(v): return b64(v.to_bytes((v.bit_length() + 7) // 8, "big"))
        return {"kty": "RSA", "kid": kid, "n": n(numbers.n), "e": n(numbers.e)}
    return {"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(numbers.x.to_bytes(32, "big")),
            "y": b64(numbers.y.to_bytes(32, "big"))}


def test_tokens_signed_by_a_jwks_key(tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk(rsa_key, "r1"), jwk(ec_key, "e1")]}))
    node = broker(**{"sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path}/jwks.json",
                     "sasl.oauthbearer.expected.audience": "kafka"})
    claims = timed({"sub": "svc", "exp": 60, "iat": 0, "aud": "kafka"})
    for key, alg, kid in ((rsa_key, "RS256", "r1"), (ec_key, "ES256", "e1")):
        session, answers = login(node, "OAUTHBEARER", bearer(signed(key, alg, kid, claims)))
        assert answers == [b""] and session.principal == "User:svc"
    refused = [signed(ec_key, "ES256", "r1", claims), signed(rsa_key, "RS256", "r1", {**claims, "aud": "other"}),
               unsecured(claims), signed(rsa_key, "RS256", "nope", claims)]
    for token in refused:
        session, answers = login(node, "OAUTHBEARER", bearer(token))
        assert answers == [b'{"status":"invalid_token"}'] and not session.authenticated


def test_the_nodes_client_over_a_socket():
    """sasl_client against a listener that answers with the server side (the frames as a node frames them)."""
    node = broker()

    async def serve(reader, writer):
        session = Session.opened(LISTENER, "")
        while True:
            try:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
            except asyncio.IncompleteReadError:
                return
            body = await reader.readexactly(size)
            api_key, version, correlation_id = struct.unpack(">hhi", body[:8])
            client_id_length = struct.unpack(">h", body[8:10])[0]
            payload = body[10 + client_id_length:]
            if api_key == 17:
                request = SaslHandshakeRequest.decode(payload, version=version)
                response = SaslHandshakeResponse[version](
                    error_code=sasl.handshake(node, session, request.mechanism, version), mechanisms=["PLAIN"])
            else:
                request = SaslAuthenticateRequest.decode(payload, version=version)
                try:
                    answer = await sasl.authenticate(node, session, request.auth_bytes)
                    response = SaslAuthenticateResponse[version](error_code=0, error_message=None,
                                                                 auth_bytes=answer, session_lifetime_ms=0)
                except SaslAuthenticationError as exc:
                    response = SaslAuthenticateResponse[version](error_code=exc.error_code, error_message=exc.message,
                                                                 auth_bytes=b"", session_lifetime_ms=0)
            data = struct.pack(">i", correlation_id) + bytes(response.encode(version=version))
            writer.write(struct.pack(">i", len(data)) + data)
            await writer.drain()

    async def run():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        outcomes = []
        for mechanism, user, password in (("SCRAM-SHA-512", "alice", "s512"), ("PLAIN", "admin", "admin-secret"),
                                          ("PLAIN", "admin", "wrong"), ("GSSAPI", "admin", "x")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                await sasl_client.authenticate(reader, writer, mechanism, user, password)
                outcomes.append("ok")
            except sasl_client.SaslClientError as exc:
                outcomes.append((exc.error_code, str(exc)))
            writer.close()
        server.close()
        await server.wait_closed()
        return outcomes
    assert asyncio.run(run()) == [
        "ok", "ok", (58, "Authentication failed: Invalid username or password"),
        (33, "SASL mechanism GSSAPI refused; the listener offers PLAIN")]


def test_a_malformed_jwks_refuses_the_token_not_the_node(tmp_path):
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{"kty": "RSA", "kid": "r1", "n": 5, "e": []}]}))
    node = broker(**{"sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path}/jwks.json",
                     "sasl.oauthbearer.clock.skew.seconds": "not a number"})
    token = f"{b64({'alg': 'RS256', 'kid': 'r1'})}.{b64({'sub': 'svc', 'exp': now() + 60})}.{b64(b'sig')}"
    session, answers = login(node, "OAUTHBEARER", bearer(token))
    assert answers == [b'{"status":"invalid_token"}'] and not session.authenticated


def test_an_unforeseen_failure_is_answered_as_bad_credentials():
    node = broker(**{"connections.max.reauth.ms": "soon"})  # no check reads it before a login completes
    session = Session.opened(LISTENER, "")
    with pytest.raises(SaslAuthenticationError) as refused:
        login(node, "PLAIN", b"\0alice\0a \"quoted\" pass", session=session)
    assert refused.value.message == ("Authentication failed during authentication due to invalid credentials "
                                     "with SASL mechanism PLAIN")
    assert session.failed and not session.authenticated
