"""TLS contexts from Kafka's ssl.* settings, handshakes over loopback, and mTLS principals."""
from __future__ import annotations

import datetime
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from cluster.formats.config import BrokerConfig, ConfigError, is_sensitive
from cluster.launch import certificates
from cluster.launch.certificates import client_certificate, issue, make_certificates, new_ca, new_key
from cluster.runtime.tls import client_context, control_channel_tls, openssl_cipher_name, server_context
from node.security.tls import PrincipalMapper, distinguished_name, listener_context, principal_of


@pytest.fixture
def certs(tmp_path):
    return make_certificates(tmp_path, ["node-1.example", "10.1.2.3"])


def pem_config(certs, **more) -> BrokerConfig:
    return BrokerConfig({**certs.broker_settings(), **{k.replace("_", "."): v for k, v in more.items()}})


def trusting(certs, version: ssl.TLSVersion | None = None, cert: tuple | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    if cert:
        ctx.load_cert_chain(*map(str, cert))
    return ctx


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str = "localhost",
              rules: str = "DEFAULT"):
    """One connection over loopback: (what the server saw, what the client saw). The server's side
    is (version, cipher, principal) or the exception its handshake raised; the client's is the
    byte the server echoed or the exception it met."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen = {}

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                seen["server"] = (tls.version(), tls.cipher()[0], principal_of(tls, rules))
                tls.sendall(tls.recv(1))
        except (OSError, ConfigError) as e:
            seen["server"] = e
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=5) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            tls.sendall(b"k")
            client = tls.recv(1) or EOFError("closed")
    except OSError as e:
        client = e
    thread.join(5)
    listener.close()
    return seen["server"], client


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_context_from_generated_certificates_serves_tls_1_2_and_1_3(certs, version):
    server, client = handshake(server_context(pem_config(certs), "SSL"), trusting(certs, version))
    assert client == b"k"
    assert server[0] == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    assert server[2] == "User:ANONYMOUS"


def test_the_certificate_names_every_host_given_and_localhost(certs):
    ctx = server_context(pem_config(certs), "SSL")
    for host in ("node-1.example", "10.1.2.3", "127.0.0.1", "localhost"):
        assert handshake(ctx, trusting(certs), hostname=host)[1] == b"k"
    _, client = handshake(ctx, trusting(certs), hostname="elsewhere.example")
    assert isinstance(client, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in client.verify_message


def test_a_client_that_does_not_trust_the_ca_fails(certs, tmp_path):
    stranger = make_certificates(tmp_path / "other", [])
    _, client = handshake(server_context(pem_config(certs), "SSL"), trusting(stranger))
    assert isinstance(client, ssl.SSLCertVerificationError)
    assert client.verify_message == "self-signed certificate in certificate chain"


def test_only_the_enabled_protocols_are_served(certs):
    ctx = server_context(pem_config(certs, ssl_enabled_protocols="TLSv1.3"), "SSL")
    server, client = handshake(ctx, trusting(certs, ssl.TLSVersion.TLSv1_2))
    assert isinstance(server, ssl.SSLError) and server.reason == "UNSUPPORTED_PROTOCOL"
    assert isinstance(client, ssl.SSLError)
    with pytest.raises(ConfigError, match="SSLv3"):
        server_context(pem_config(certs, ssl_enabled_protocols="SSLv3"), "SSL")


def test_cipher_suites_take_kafka_s_names(certs):
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384") == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256") == "ECDHE-RSA-AES128-SHA256"
    assert openssl_cipher_name("TLS_RSA_WITH_AES_128_CBC_SHA") == "AES128-SHA"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    ctx = server_context(pem_config(certs, ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"), "SSL")
    server, _ = handshake(ctx, trusting(certs, ssl.TLSVersion.TLSv1_2))
    assert server[:2] == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")
    only_13 = server_context(pem_config(certs, ssl_cipher_suites="TLS_AES_256_GCM_SHA384"), "SSL")
    assert isinstance(handshake(only_13, trusting(certs, ssl.TLSVersion.TLSv1_2))[0], ssl.SSLError)
    with pytest.raises(ConfigError, match="none of them is available"):
        server_context(pem_config(certs, ssl_cipher_suites="TLS_NO_SUCH_SUITE"), "SSL")


# Mutual TLS

def test_mtls_required_refuses_a_client_without_a_certificate(certs):
    ctx = server_context(pem_config(certs, ssl_client_auth="required"), "SSL")
    server, client = handshake(ctx, trusting(certs))
    assert isinstance(server, ssl.SSLError) and server.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert isinstance(client, (ssl.SSLError, EOFError, ConnectionResetError))


def test_mtls_names_the_client_by_its_certificate(certs, tmp_path):
    ctx = server_context(pem_config(certs, ssl_client_auth="required"), "SSL")
    alice = client_certificate(tmp_path, "alice")
    assert handshake(ctx, trusting(certs, cert=alice))[0][2] == "User:CN=alice"
    server, client = handshake(ctx, trusting(certs, cert=alice), rules="RULE:^CN=(.*)$/$1/U,DEFAULT")
    assert (server[2], client) == ("User:ALICE", b"k")


def test_mtls_requested_names_a_client_without_a_certificate_anonymous(certs, tmp_path):
    ctx = server_context(pem_config(certs, ssl_client_auth="requested"), "SSL")
    assert handshake(ctx, trusting(certs))[0][2] == "User:ANONYMOUS"
    assert handshake(ctx, trusting(certs, cert=client_certificate(tmp_path, "bob")))[0][2] == "User:CN=bob"


def test_a_client_certificate_from_another_ca_or_expired_is_refused(certs, tmp_path):
    ctx = server_context(pem_config(certs, ssl_client_auth="required"), "SSL")
    stranger = client_certificate(tmp_path / "other", "mallory")
    server, _ = handshake(ctx, trusting(certs, cert=stranger))
    assert isinstance(server, ssl.SSLCertVerificationError)
    assert server.verify_message == "unable to get local issuer certificate"

    ca_cert, ca_key = certificates.certificate_authority(tmp_path)
    key = new_key()
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=10)
    expired = issue(ca_cert, ca_key, key, "old", [], server=False, days=1, not_valid_before=long_ago)
    cert_path, key_path = tmp_path / "old.pem", tmp_path / "old.key"
    cert_path.write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(certificates._key_pem(key))
    server, _ = handshake(ctx, trusting(certs, cert=(cert_path, key_path)))
    assert isinstance(server, ssl.SSLCertVerificationError)
    assert server.verify_message == "certificate has expired"


def test_a_certificate_no_rule_maps_is_refused(certs, tmp_path):
    ctx = server_context(pem_config(certs, ssl_client_auth="required"), "SSL")
    server, _ = handshake(ctx, trusting(certs, cert=client_certificate(tmp_path, "eve")), rules="RULE:^OU=.*$/x/")
    assert isinstance(server, ConfigError)
    assert str(server) == "No rules apply to CN=eve, rules [RULE:^OU=.*$/x]"


# The subject as Java's X500Principal.getName() renders it

def name(*attributes) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


def test_the_subject_is_rendered_as_java_renders_it():
    assert distinguished_name(name((NameOID.ORGANIZATION_NAME, "kraftwerk"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                                   (NameOID.COMMON_NAME, "alice"))) == "CN=alice,OU=eng,O=kraftwerk"
    assert distinguished_name(name((NameOID.COUNTRY_NAME, "CZ"), (NameOID.COMMON_NAME, "Tkac, Adam"))) \
        == "CN=Tkac\\, Adam,C=CZ"
    assert distinguished_name(name((NameOID.COMMON_NAME, " a=b#c+d "))) == "CN=\\ a\\=b\\#c\\+d\\ "
    # emailAddress has no RFC 2253 keyword: Java writes its OID and the DER of its IA5String value
    assert distinguished_name(name((NameOID.EMAIL_ADDRESS, "a@b.c"), (NameOID.COMMON_NAME, "a"))) \
        == "CN=a,1.2.840.113549.1.9.1=#16056140622e63"
    rdns = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "a"),
                                                      x509.NameAttribute(NameOID.USER_ID, "u1")])])
    assert distinguished_name(rdns) == "CN=a+UID=u1"


# ssl.principal.mapping.rules: Kafka's SslPrincipalMapperTest

@pytest.mark.parametrize("rules", [
    "DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U", "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    PrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules):
    with pytest.raises(ConfigError):
        PrincipalMapper.from_rules(rules)


def test_the_first_matching_rule_names_the_principal():
    mapper = PrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U", "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize("expected, rules", [
    ("[]", ""), ("[DEFAULT]", "DEFAULT"), ("[RULE:/]", "RULE://"), ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"), ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "), ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "), ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected, rules):
    assert str(PrincipalMapper.from_rules(rules)) == expected


def test_comma_with_whitespace():
    mapper = PrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_back_references_past_the_last_group_are_literal():
    assert PrincipalMapper.from_rules("RULE:^CN=(.*)$/$1@$2/").name("CN=a") == "a@$2"
    assert PrincipalMapper.from_rules("RULE:^CN=(.*)$/$12/").name("CN=a") == "a2"


# Keystores and truststores as Kafka configures them

def one_line(pem: bytes) -> str:
    """PEM as a properties file carries it on one line."""
    return pem.decode().replace("\n", " ")


def test_inline_pem_keystore_and_truststore(certs, tmp_path):
    ca_pem = certs.ca.read_bytes()
    node_pem = certs.keystore.read_bytes()
    key = serialization.load_pem_private_key(node_pem, None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"secret"))
    chain = node_pem[node_pem.index(b"-----BEGIN CERTIFICATE-----"):]
    config = BrokerConfig({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": one_line(chain),
                           "ssl.keystore.key": one_line(encrypted), "ssl.key.password": "secret",
                           "ssl.truststore.type": "PEM", "ssl.truststore.certificates": one_line(ca_pem),
                           "ssl.client.auth": "required"})
    ctx = server_context(config, "SSL")
    server, client = handshake(ctx, trusting(certs, cert=client_certificate(tmp_path, "carol")))
    assert (server[2], client) == ("User:CN=carol", b"k")
    wrong = BrokerConfig({**config.values, "ssl.key.password": "guess"})
    with pytest.raises(ConfigError, match="ssl.key.password"):
        server_context(wrong, "SSL")


def test_an_encrypted_key_in_a_pem_keystore_file(certs, tmp_path):
    key = serialization.load_pem_private_key(certs.keystore.read_bytes(), None)
    node_pem = certs.keystore.read_bytes()
    path = tmp_path / "encrypted.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"pw"))
                     + node_pem[node_pem.index(b"-----BEGIN CERTIFICATE-----"):])
    ctx = server_context(pem_config(certs, ssl_keystore_location=str(path), ssl_key_password="pw"), "SSL")
    assert handshake(ctx, trusting(certs))[1] == b"k"


def test_a_listener_s_own_settings_win(certs, tmp_path):
    config = BrokerConfig({**certs.broker_settings(), "ssl.keystore.location": str(tmp_path / "missing.pem"),
                           "listener.name.external.ssl.keystore.location": str(certs.keystore),
                           "listener.name.external.ssl.client.auth": "required"})
    with pytest.raises(ConfigError, match="missing.pem: No such file"):
        server_context(config, "INTERNAL")
    server, _ = handshake(server_context(config, "EXTERNAL"), trusting(certs))
    assert isinstance(server, ssl.SSLError) and server.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"


def test_pkcs12_keystore_and_truststore(certs, tmp_path):
    node_pem = certs.keystore.read_bytes()
    key = serialization.load_pem_private_key(node_pem, None)
    leaf, ca = x509.load_pem_x509_certificates(node_pem)
    keystore, truststore = tmp_path / "node.p12", tmp_path / "trust.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"node", key, leaf, [ca], serialization.BestAvailableEncryption(b"storepw")))
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], serialization.BestAvailableEncryption(b"trustpw")))
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
                "ssl.keystore.password": "storepw", "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(truststore), "ssl.truststore.password": "trustpw",
                "ssl.client.auth": "required"}
    ctx = server_context(BrokerConfig(settings), "SSL")
    assert handshake(ctx, trusting(certs, cert=client_certificate(tmp_path, "dave")))[0][2] == "User:CN=dave"
    with pytest.raises(ConfigError, match="ssl.keystore.password is wrong"):
        server_context(BrokerConfig({**settings, "ssl.keystore.password": "nope"}), "SSL")


@pytest.mark.parametrize("settings, message", [
    ({"ssl.keystore.location": "/etc/kafka/server.jks", "ssl.keystore.password": "x"}, "ssl.keystore.type=JKS"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "certificate chain is not specified"),
    ({"ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c"}, "only for PEM, but key store type is JKS"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "x", "ssl.keystore.password": "p"},
     "password cannot be specified with PEM"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "x"}, "key store password is not specified"),
    ({}, "has no keystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "x", "ssl.principal.mapping.rules": "RULE:x"},
     "invalid rule"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "x", "ssl.client.auth": "sometimes"}, "ssl.client.auth"),
])
def test_settings_kafka_refuses_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        listener_context(BrokerConfig(settings), "SSL")


def test_a_node_s_client_context_trusts_the_truststore_and_checks_host_names(certs, tmp_path):
    config = pem_config(certs, ssl_client_auth="required")
    serving, peer = server_context(config, "SSL"), client_context(config, "SSL")
    assert handshake(serving, peer, hostname="node-1.example")[0][2] == "User:CN=kraftwerk-node"
    assert isinstance(handshake(serving, peer, hostname="node-2.example")[1], ssl.SSLCertVerificationError)
    unchecked = client_context(pem_config(certs, ssl_endpoint_identification_algorithm=""), "SSL")
    assert handshake(serving, unchecked, hostname="node-2.example")[1] == b"k"


# Certificates made for a cluster

def test_make_certificates_keeps_its_ca_and_remakes_the_node_certificate_for_new_hosts(tmp_path):
    first = make_certificates(tmp_path, ["a.example"])
    ca, keystore = first.ca.read_bytes(), first.keystore.read_bytes()
    assert first.ca == tmp_path / "ca.pem"
    assert stat.S_IMODE((tmp_path / "tls" / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(first.keystore.stat().st_mode) == 0o600
    assert make_certificates(tmp_path, ["a.example"]).keystore.read_bytes() == keystore
    again = make_certificates(tmp_path, ["b.example", "192.168.7.7"])
    assert again.ca.read_bytes() == ca and again.keystore.read_bytes() != keystore
    leaf = x509.load_pem_x509_certificates(again.keystore.read_bytes())[0]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(map(str, sans.get_values_for_type(x509.DNSName))) == ["b.example", "localhost"]
    assert sorted(map(str, sans.get_values_for_type(x509.IPAddress))) == ["127.0.0.1", "192.168.7.7", "::1"]
    age = datetime.datetime.now(datetime.timezone.utc) - leaf.not_valid_before_utc
    assert datetime.timedelta(seconds=55) < age < datetime.timedelta(seconds=70)


def test_a_ca_certificate_without_its_key_is_not_replaced(tmp_path):
    make_certificates(tmp_path, [])
    (tmp_path / "tls" / "ca.key").unlink()
    with pytest.raises(certificates.ClusterError, match="ca.key"):
        make_certificates(tmp_path, [])


def test_password_settings_are_sensitive():
    assert is_sensitive("ssl.keystore.password") and is_sensitive("listener.name.external.ssl.key.password")
    assert not is_sensitive("ssl.keystore.location")


def test_new_ca_is_a_ca():
    key = new_key()
    constraints = new_ca(key, "test").extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0


def test_the_control_channel_is_mutual_tls_exactly_when_the_controller_listener_is_secured(tmp_path):
    control = certificates.make_control_certificates(tmp_path, ["controller.example"])
    assert control_channel_tls(BrokerConfig({})) is None
    assert control_channel_tls(BrokerConfig({"listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})) is None
    secured = {"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.client.auth": "none",
               **control.broker_settings("CONTROLLER")}
    tls = control_channel_tls(BrokerConfig(secured))
    assert tls.server.verify_mode == ssl.CERT_REQUIRED  # whatever ssl.client.auth says
    assert handshake(tls.server, tls.client, hostname="controller.example")[0][2] == "User:CN=kraftwerk-control"
    assert isinstance(handshake(tls.server, trusting(control), hostname="controller.example")[0], ssl.SSLError)
    cluster_ca = make_certificates(tmp_path, [])  # a Kafka client's certificate is not the channel's
    user_cert = client_certificate(tmp_path, "alice")
    assert isinstance(handshake(tls.server, trusting(control, cert=user_cert), hostname="controller.example")[0],
                      ssl.SSLError)
    assert cluster_ca.ca != control.ca
    without_truststore = {k: v for k, v in secured.items() if "truststore" not in k}
    with pytest.raises(ConfigError, match="mutual authentication"):
        control_channel_tls(BrokerConfig(without_truststore))
    renamed = {"controller.listener.names": "CTL,CONTROLLER", "listener.security.protocol.map": "CTL:SSL",
               **control.broker_settings("CTL")}  # the first controller listener names the settings
    assert control_channel_tls(BrokerConfig(renamed)).server.verify_mode == ssl.CERT_REQUIRED
