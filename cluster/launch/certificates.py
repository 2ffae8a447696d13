"""Certificates for a TLS cluster: a CA of its own, the nodes' certificate, and client certificates for mTLS.

`make_certificates(data_dir, hosts)` makes the CA once (`<data_dir>/ca.pem`, its key in
`<data_dir>/tls/ca.key`; both reused while present) and a certificate for the nodes, signed by it,
whose subject alternative names hold every host name and IP address given plus localhost,
127.0.0.1 and ::1. All nodes present the same certificate: on one machine they share their host
names anyway, a docker-backed cluster passes each container's name in `hosts`, and one certificate
gives the nodes one principal (User:CN=kraftwerk-node) to name in `super.users` when they
authenticate to each other with it. The certificate is made again when a host is missing from it,
when another CA signed it, or when it nears its end.

`make_control_certificates(data_dir, hosts)` does the same for the control channel (the controller's
port and the nodes' admin ports) with a CA of its own (`<data_dir>/tls/control-ca.pem`): the
controller, the nodes and the launcher all present its one certificate (CN=kraftwerk-control), and
the channel trusts that CA only, so no client certificate made for a Kafka user opens it.

`client_certificate(data_dir, common_name)` makes a client certificate (subject CN=<common_name>,
so its Kafka principal is User:CN=<common_name> before `ssl.principal.mapping.rules`) signed by
the same CA.

Keys are EC P-256 (made in a millisecond; every TLS client library takes them), unencrypted PKCS#8,
readable by their owner only.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cluster.tools.errors import ClusterError

CA_FILE = "ca.pem"
TLS_DIR = "tls"
CA_KEY_FILE = "ca.key"
NODE_KEYSTORE_FILE = "node.pem"  # key, certificate and CA in one file: a PEM keystore as Kafka reads it
NODE_COMMON_NAME = "kraftwerk-node"
CA_NAME = "kraftwerk CA"
CONTROL_CA_NAME = "kraftwerk control CA"
CONTROL_CA_FILE = "control-ca.pem"  # in TLS_DIR, beside its key
CONTROL_CA_KEY_FILE = "control-ca.key"
CONTROL_KEYSTORE_FILE = "control.pem"
CONTROL_COMMON_NAME = "kraftwerk-control"
ALWAYS_NAMED = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
# Long enough for any development cluster; within the 825 days macOS accepts for a server certificate.
LEAF_DAYS = 825
RENEW_BEFORE = datetime.timedelta(days=30)
# A clock a little behind ours (a container's, another machine's) still accepts a certificate made now.
BACKDATE = datetime.timedelta(minutes=1)


@dataclass(frozen=True)
class NodeCertificates:
    ca: Path  # what clients trust: librdkafka's ssl.ca.location, kafka-python's ssl_cafile
    keystore: Path  # the nodes' key, certificate and the CA's certificate, in PEM

    def broker_settings(self, listener: str | None = None) -> dict[str, str]:
        """The ssl.* broker settings that serve with these certificates and trust their CA: for every
        listener, or as `listener.name.<listener>.` overrides for one."""
        prefix = f"listener.name.{listener.lower()}." if listener else ""
        return {f"{prefix}ssl.keystore.type": "PEM", f"{prefix}ssl.keystore.location": str(self.keystore),
                f"{prefix}ssl.truststore.type": "PEM", f"{prefix}ssl.truststore.location": str(self.ca)}


def make_certificates(data_dir: Path, hosts: list[str]) -> NodeCertificates:
    """The cluster's CA (made once) and the nodes' certificate naming `hosts` (made when needed)."""
    data_dir = Path(data_dir)
    return _server_certificate(data_dir / CA_FILE, data_dir / TLS_DIR / CA_KEY_FILE, CA_NAME,
                               data_dir / TLS_DIR / NODE_KEYSTORE_FILE, NODE_COMMON_NAME, hosts)


def make_control_certificates(data_dir: Path, hosts: list[str]) -> NodeCertificates:
    """The control channel's CA (made once) and its certificate naming `hosts` (made when needed)."""
    tls_dir = Path(data_dir) / TLS_DIR
    return _server_certificate(tls_dir / CONTROL_CA_FILE, tls_dir / CONTROL_CA_KEY_FILE, CONTROL_CA_NAME,
                               tls_dir / CONTROL_KEYSTORE_FILE, CONTROL_COMMON_NAME, hosts)


def _server_certificate(ca_path: Path, ca_key_path: Path, ca_name: str, keystore: Path, common_name: str,
                        hosts: list[str]) -> NodeCertificates:
    ca_cert, ca_key = _authority(ca_path, ca_key_path, ca_name)
    names = list(dict.fromkeys([*hosts, *ALWAYS_NAMED]))
    if not _still_good(keystore, ca_cert, names):
        key = new_key()
        cert = issue(ca_cert, ca_key, key, common_name, names, server=True, days=LEAF_DAYS)
        _write_private(keystore, _key_pem(key) + _cert_pem(cert) + _cert_pem(ca_cert))
    return NodeCertificates(ca_path, keystore)


def client_certificate(data_dir: Path, common_name: str) -> tuple[Path, Path]:
    """(certificate, key) files of a new client certificate for `common_name`, signed by the cluster's CA."""
    data_dir = Path(data_dir)
    ca_cert, ca_key = certificate_authority(data_dir)
    key = new_key()
    cert = issue(ca_cert, ca_key, key, common_name, [], server=False, days=LEAF_DAYS)
    stem = data_dir / TLS_DIR / "clients" / re.sub(r"[^A-Za-z0-9._-]", "_", common_name)
    cert_path, key_path = stem.with_name(stem.name + ".pem"), stem.with_name(stem.name + ".key")
    _write_private(key_path, _key_pem(key))
    _write_private(cert_path, _cert_pem(cert), mode=0o644)
    return cert_path, key_path


def certificate_authority(data_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA of the cluster in `data_dir`: read when there is one, else made."""
    return _authority(Path(data_dir) / CA_FILE, Path(data_dir) / TLS_DIR / CA_KEY_FILE, CA_NAME)


def _authority(cert_path: Path, key_path: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    if cert_path.exists() != key_path.exists():
        raise ClusterError(f"{cert_path} and {key_path} go together and one of them is missing; "
                           f"remove the other to make a new CA (clients must then trust the new {cert_path.name})")
    if cert_path.exists():
        return (x509.load_pem_x509_certificate(cert_path.read_bytes()),
                serialization.load_pem_private_key(key_path.read_bytes(), password=None))
    key = new_key()
    cert = new_ca(key, name)
    _write_private(key_path, _key_pem(key))
    _write_private(cert_path, _cert_pem(cert), mode=0o644)
    return cert, key


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def new_ca(key: ec.EllipticCurvePrivateKey, common_name: str, days: int = CA_DAYS) -> x509.Certificate:
    """A self-signed CA certificate that signs leaf certificates only."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = _now() - BACKDATE
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))


def issue(ca_cert: x509.Certificate, ca_key, key, common_name: str, names: list[str], *, server: bool,
          days: int, not_valid_before: datetime.datetime | None = None) -> x509.Certificate:
    """A leaf certificate for `key` signed by the CA: a server's (also usable as a client's, for
    connections between nodes) with `names` as its SANs, or a client's."""
    start = not_valid_before or _now() - BACKDATE
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server \
        else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),
                              critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                                        critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _still_good(keystore: Path, ca_cert: x509.Certificate, names: list[str]) -> bool:
    """Whether the nodes' certificate in `keystore` is the CA's, names every one of `names` and is
    far from its end."""
    if not keystore.exists():
        return False
    cert = x509.load_pem_x509_certificates(keystore.read_bytes())[0]
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(map(_general_name, names)) <= set(sans) and cert.not_valid_after_utc - RENEW_BEFORE > _now()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Through a temp file and a rename, so that a node starting meanwhile reads the old file or the
    new one whole; a key file readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(temp, mode)
    os.replace(temp, path)
