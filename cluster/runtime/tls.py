"""SSL contexts from Kafka's ssl.* settings, for every TLS endpoint: a node's listeners, its links to
its peers, and the control channel between the controller, the nodes and the launcher.

`server_context(config, listener)` serves an SSL or SASL_SSL listener; `client_context(config,
listener)` is what a process presents when it connects on a listener. Both read Kafka's ssl.*
settings, each overridable per listener as Kafka allows:
`listener.name.<listener, lowercased>.ssl.keystore.location` wins over `ssl.keystore.location`.

Keystores and truststores are PEM (a file, or inline `ssl.keystore.certificate.chain` +
`ssl.keystore.key` and `ssl.truststore.certificates`, as Kafka 2.7+ accepts them) or PKCS12 (read
with the `cryptography` package). Java's JKS format is refused: nothing outside a JVM reads it.

Differs from Kafka: `ssl.protocol`, `ssl.provider`, the key/trust manager algorithms and
`ssl.secure.random.implementation` are ignored (OpenSSL decides); TLS 1.3 cipher suites cannot be
narrowed (OpenSSL through Python offers all of them whenever TLSv1.3 is enabled); enabled
protocols are taken as a range from the oldest to the newest named.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass

from cluster.formats.config import BrokerConfig, ConfigError
from cluster.formats.listeners import protocol_map

PEM = "PEM"
PKCS12 = "PKCS12"
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# TLS 1.3 suites: always on with TLSv1.3 (they are not OpenSSL cipher-list names).
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}


def setting(config: BrokerConfig, listener_name: str, name: str) -> str | None:
    """A setting as a listener sees it: its `listener.name.<name>.` form first; None when unset or empty."""
    prefixed = f"listener.name.{listener_name.lower()}.{name}"
    value = config.values[prefixed] if prefixed in config.values else config.get(name)
    return value if value and value.strip() else None


def server_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The context an SSL or SASL_SSL listener serves with; ConfigError names a setting that cannot work."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(ctx, config, listener_name)
    client_auth = (setting(config, listener_name, "ssl.client.auth") or "none").lower()
    if client_auth not in CLIENT_AUTH_MODES:
        raise ConfigError(f"ssl.client.auth={client_auth}: must be one of none, requested, required")
    ctx.verify_mode = CLIENT_AUTH_MODES[client_auth]
    if not _load_keystore(ctx, config, listener_name):
        raise ConfigError(f"listener {listener_name} serves TLS but has no keystore: set ssl.keystore.location "
                          f"(or ssl.keystore.certificate.chain and ssl.keystore.key) with ssl.keystore.type=PEM")
    if ctx.verify_mode != ssl.CERT_NONE and not _load_truststore(ctx, config, listener_name):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The context a process connects with on listener `listener_name`: a node to its peers on the
    inter-broker listener, or to the controller."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure(ctx, config, listener_name)
    algorithm = setting(config, listener_name, "ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() != "https":
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: must be https or empty")
    # Kafka's default `https` checks the peer's host name against its certificate; empty turns that off.
    ctx.check_hostname = algorithm is not None
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, config, listener_name):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, config, listener_name)
    return ctx


def _configure(ctx: ssl.SSLContext, config: BrokerConfig, listener_name: str) -> None:
    names = _listed(setting(config, listener_name, "ssl.enabled.protocols") or "TLSv1.2,TLSv1.3")
    unknown = [n for n in names if n not in PROTOCOL_VERSIONS]
    if unknown or not names:
        raise ConfigError(f"ssl.enabled.protocols: {','.join(unknown) or 'empty'}: "
                          f"each must be one of {', '.join(PROTOCOL_VERSIONS)}")
    versions = sorted(PROTOCOL_VERSIONS[n] for n in names)
    suites = _listed(setting(config, listener_name, "ssl.cipher.suites") or "")
    if suites and all(s in TLS13_SUITES for s in suites):
        versions = [v for v in versions if v == ssl.TLSVersion.TLSv1_3]  # no suite left for older versions
        if not versions:
            raise ConfigError("ssl.cipher.suites names only TLS 1.3 suites but TLSv1.3 is not enabled")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    legacy = [openssl_cipher_name(s) for s in suites if s not in TLS13_SUITES]
    if legacy:
        try:
            ctx.set_ciphers(":".join(legacy))
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites={','.join(suites)}: none of them is available") from None


def _listed(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


CIPHERS = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128",
           "AES_256_CBC": "AES256", "AES_128_CCM": "AES128-CCM", "AES_256_CCM": "AES256-CCM",
           "CHACHA20_POLY1305": "CHACHA20-POLY1305", "CAMELLIA_128_CBC": "CAMELLIA128",
           "CAMELLIA_256_CBC": "CAMELLIA256", "ARIA_128_GCM": "ARIA128-GCM", "ARIA_256_GCM": "ARIA256-GCM"}
_SUITE = re.compile(r"TLS_(?:(ECDHE|DHE)_(RSA|ECDSA|DSS)|RSA)_WITH_([A-Z0-9_]+?)(?:_(SHA|SHA256|SHA384))?")


def openssl_cipher_name(suite: str) -> str:
    """A JSSE/IANA suite name (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) as OpenSSL's cipher list spells it."""
    match = _SUITE.fullmatch(suite)
    if not match or match.group(3) not in CIPHERS:
        return suite  # already an OpenSSL name, or one set_ciphers will refuse
    kx, auth, cipher, mac = match.groups()
    name = (f"{kx}-{auth}-" if kx else "") + CIPHERS[cipher]
    # OpenSSL leaves the hash out of ChaCha20's names only
    return name if cipher == "CHACHA20_POLY1305" or not mac else f"{name}-{mac}"


# Keystores and truststores

def _load_keystore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Loads the keystore Kafka's DefaultSslEngineFactory.createKeystore would; False when none is set."""
    get = lambda name: setting(config, listener, name)  # noqa: E731
    kind, location, password = (get("ssl.keystore.type") or "JKS").upper(), get("ssl.keystore.location"), \
        get("ssl.keystore.password")
    key, chain, key_password = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"), get("ssl.key.password")
    if key is not None:
        if kind != PEM:
            raise ConfigError(f"SSL private key can be specified only for PEM, but key store type is {kind}.")
        if chain is None:
            raise ConfigError("SSL private key is specified, but certificate chain is not specified.")
        if location is not None:
            raise ConfigError("Both SSL key store location and separate private key are specified.")
        if password is not None:
            raise ConfigError("SSL key store password cannot be specified with PEM format, "
                              "only key password may be specified.")
        with _private_file(pem_blocks(key) + pem_blocks(chain)) as path:
            _load_chain(ctx, path, key_password, "ssl.keystore.key")
        return True
    if chain is not None:
        raise ConfigError("SSL certificate chain is specified, but private key is not specified")
    if location is None:
        if password is not None:
            raise ConfigError("SSL key store is not specified, but key store password is specified.")
        return False
    if kind == PEM:
        if password is not None:
            raise ConfigError("SSL key store password cannot be specified with PEM format, "
                              "only key password may be specified")
        _load_chain(ctx, location, key_password, f"ssl.keystore.location={location}")
        return True
    if password is None:
        raise ConfigError("SSL key store is specified, but key store password is not specified.")
    _refuse_jks(kind, "keystore")
    key, own, others = _read_pkcs12(location, password, "keystore")
    if key is None or own is None:
        raise ConfigError(f"ssl.keystore.location={location} holds no private key with its certificate")
    with _private_file("".join([key, own, *others])) as path:
        _load_chain(ctx, path, None, f"ssl.keystore.location={location}")
    return True


def _load_truststore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Loads the truststore Kafka's createTruststore would; False when none is set (the system's CAs then)."""
    get = lambda name: setting(config, listener, name)  # noqa: E731
    kind, location, password = (get("ssl.truststore.type") or "JKS").upper(), get("ssl.truststore.location"), \
        get("ssl.truststore.password")
    certificates = get("ssl.truststore.certificates")
    if certificates is not None:
        if kind != PEM:
            raise ConfigError(f"SSL trust store certs can be specified only for PEM, but trust store type is {kind}.")
        if location is not None:
            raise ConfigError("Both SSL trust store location and separate trust certificates are specified.")
        if password is not None:
            raise ConfigError("SSL trust store password cannot be specified for PEM format.")
        _load_trusted(ctx, cadata=pem_blocks(certificates), what="ssl.truststore.certificates")
        return True
    if location is None:
        if password is not None:
            raise ConfigError("SSL trust store is not specified, but trust store password is specified.")
        return False
    if kind == PEM:
        if password is not None:
            raise ConfigError("SSL trust store password cannot be specified for PEM format.")
        _load_trusted(ctx, cafile=location, what=f"ssl.truststore.location={location}")
        return True
    _refuse_jks(kind, "truststore")
    _, own, others = _read_pkcs12(location, password, "truststore")
    certificates = ([own] if own else []) + others
    if not certificates:
        raise ConfigError(f"ssl.truststore.location={location} holds no certificate")
    _load_trusted(ctx, cadata="".join(certificates), what=f"ssl.truststore.location={location}")
    return True


def _refuse_jks(kind: str, store: str) -> None:
    if kind == "JKS":
        raise ConfigError(f"ssl.{store}.type=JKS: kraftwerk reads PEM and PKCS12 {store}s only; set "
                          f"ssl.{store}.type=PEM or PKCS12 (keytool -importkeystore -deststoretype PKCS12 "
                          f"converts a JKS file)")
    if kind != PKCS12:
        raise ConfigError(f"ssl.{store}.type={kind}: must be PEM or PKCS12")


def _read_pkcs12(location: str, password: str | None, store: str) -> tuple[str | None, str | None, list[str]]:
    """A PKCS12 store as PEM: its private key (PKCS#8), the key's certificate, and the other certificates."""
    from cryptography.hazmat.primitives import serialization  # (only PKCS12 stores need it)
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(location, "rb") as f:
            loaded = pkcs12.load_pkcs12(f.read(), password.encode() if password else None)
    except OSError as e:
        raise ConfigError(f"ssl.{store}.location={location}: {e.strerror}") from None
    except ValueError:
        raise ConfigError(f"Failed to load SSL {store} {location} of type PKCS12: not PKCS12, "
                          f"or ssl.{store}.password is wrong") from None
    pem = serialization.Encoding.PEM
    key = loaded.key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode() \
        if loaded.key is not None else None
    own = loaded.cert.certificate.public_bytes(pem).decode() if loaded.cert is not None else None
    return key, own, [c.certificate.public_bytes(pem).decode() for c in loaded.additional_certs]


def _load_chain(ctx: ssl.SSLContext, path: str, password: str | None, what: str) -> None:
    try:
        ctx.load_cert_chain(path, password=password or "")
    except OSError as e:
        if isinstance(e, ssl.SSLError):
            raise ConfigError(f"{what}: no private key with its certificate chain could be read "
                              f"(is ssl.key.password right?): {e.reason or e}") from None
        raise ConfigError(f"{what}: {e.strerror}") from None


def _load_trusted(ctx: ssl.SSLContext, *, what: str, cafile: str | None = None, cadata: str | None = None) -> None:
    try:
        ctx.load_verify_locations(cafile=cafile, cadata=cadata)
    except (OSError, ValueError) as e:
        detail = e.strerror if isinstance(e, OSError) and not isinstance(e, ssl.SSLError) else "no certificate read"
        raise ConfigError(f"{what}: {detail}") from None


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def pem_blocks(value: str) -> str:
    """Inline PEM as a properties file or `--set` carries it (newlines as spaces, `\\n` or line breaks),
    rewritten as the PEM OpenSSL reads."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(value.replace("\\n", "\n")):
        data = re.sub(r"\s+", "", body)
        lines = "\n".join(data[i:i + 64] for i in range(0, len(data), 64))
        blocks.append(f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n")
    if not blocks:
        raise ConfigError("an inline PEM setting holds no -----BEGIN ...----- block")
    return "".join(blocks)


@contextmanager
def _private_file(text: str):
    """OpenSSL loads a key and its chain from a file only: a file only this user can read, removed at once."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


# The control channel

@dataclass(frozen=True)
class ControlTls:
    server: ssl.SSLContext  # what the controller's port and the nodes' admin ports serve with
    client: ssl.SSLContext  # what a node connects to the controller with


def control_channel_tls(config: BrokerConfig) -> ControlTls | None:
    """Mutual TLS for the control channel when the controller listener (the first of
    `controller.listener.names`) maps to SSL or SASL_SSL in `listener.security.protocol.map`, with
    that listener's ssl.* settings; None when it is PLAINTEXT. The channel can stop nodes and
    rewrite the metadata, so its servers admit only peers whose certificate the listener's
    truststore trusts, whatever `ssl.client.auth` says."""
    name = config.get("controller.listener.names").split(",")[0].strip()
    if not name or not protocol_map(config).get(name.upper(), "PLAINTEXT").endswith("SSL"):
        return None
    server = server_context(config, name)
    server.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(server, config, name):
        raise ConfigError(f"the controller listener {name} serves TLS, which the control channel runs with mutual "
                          f"authentication: set its ssl.truststore.location (or ssl.truststore.certificates)")
    return ControlTls(server, client_context(config, name))
