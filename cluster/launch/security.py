"""A launched cluster's security: its listeners' protocol, SASL mechanism, super user and users.

`kraftwerk up --security-protocol SASL_SSL --sasl-mechanism SCRAM-SHA-256 --super-user admin`
becomes broker settings under Kafka's names (a listener of that protocol, the SASL mechanism, a
JAAS config, TLS certificates made for the nodes, StandardAuthorizer with the super user) and the
client settings a client needs to connect as a user, in librdkafka's (and Java's) property names:
what cluster.json records as `client_config`, and what every kraftwerk command connects with.
"""
from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cluster.tools.errors import ClusterError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
CONTROLLER_LISTENER = "CONTROLLER"  # controller.listener.names' default
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# A client certificate's principal is its common name (User:alice, not User:CN=alice).
CN_RULE = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass
class Security:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None  # SASL protocols only
    super_user: str | None = None
    # name -> password of every SASL user made at launch (the super user among them)
    passwords: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, security_protocol: str | None = None, sasl_mechanism: str | None = None, super_user: str | None = None,
           tls: bool = False, users: list[str] | tuple[str, ...] = ()) -> "Security":
        """The settings `kraftwerk up` (or the pytest marker) asks for, checked and completed:
        --tls alone means SSL; a SASL protocol without a mechanism uses SCRAM-SHA-256 with a super
        user `admin`; each user gets a generated password."""
        protocol = (security_protocol or ("SSL" if tls else "PLAINTEXT")).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ClusterError(f"security protocol {protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        if tls and not protocol.endswith("SSL"):
            raise ClusterError(f"--tls asks for TLS, which security protocol {protocol} does not use")
        sasl = protocol.startswith("SASL_")
        if sasl_mechanism and not sasl:
            raise ClusterError(f"a SASL mechanism needs a SASL security protocol, not {protocol}")
        mechanism = sasl_mechanism or ("SCRAM-SHA-256" if sasl else None)
        if mechanism is not None and mechanism.upper() not in SASL_MECHANISMS:
            raise ClusterError(f"SASL mechanism {mechanism} is not one of {', '.join(SASL_MECHANISMS)}")
        super_user = super_user or ("admin" if sasl else None)
        names = ([super_user] if super_user else []) + [u for u in users if u != super_user]
        return cls(protocol, mechanism.upper() if mechanism else None, super_user,
                   {name: secrets.token_urlsafe(12) for name in names} if sasl else {})

    @classmethod
    def from_state(cls, state: dict | None) -> "Security":
        return cls(**state) if state else cls()

    def to_state(self) -> dict:
        return asdict(self)

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    # --- the nodes' side ---

    def node_config(self, data_dir: Path, host: str) -> dict[str, str]:
        """Broker settings for every node (the caller's own settings go over them)."""
        if not self.secured:
            return {}
        config = {"listeners": f"{self.protocol}://{host}:0"}
        if self.uses_tls:
            config.update(_tls_node_config(data_dir, host))
            config.update(control_channel_config(data_dir, host))
        if self.uses_sasl:
            config.update(self._sasl_node_config())
        if self.super_user:
            config["authorizer.class.name"] = STANDARD_AUTHORIZER
            config["super.users"] = f"User:{self.super_user}"
            if not self.uses_sasl:
                config.update(_mutual_tls_node_config(self.super_user))
        return config

    def _sasl_node_config(self) -> dict[str, str]:
        # The nodes authenticate to each other as the super user; an OAUTHBEARER cluster's nodes do
        # so with PLAIN, since a node has no token to present.
        inter_broker = "PLAIN" if self.mechanism == "OAUTHBEARER" else self.mechanism
        options = {"username": self.super_user, "password": self.passwords[self.super_user]}
        if inter_broker == "PLAIN":
            options.update({f"user_{name}": password for name, password in self.passwords.items()})
        mechanisms = [self.mechanism] + (["PLAIN"] if inter_broker != self.mechanism else [])
        return {"sasl.enabled.mechanisms": ",".join(mechanisms),
                "sasl.mechanism.inter.broker.protocol": inter_broker,
                "sasl.jaas.config": jaas_config(_LOGIN_MODULES[inter_broker], options)}

    def scram_bootstrap(self) -> list[str]:
        """kafka-storage.sh's --add-scram values for the users made at launch, in Kafka's syntax:
        SCRAM users must exist before the nodes authenticate to each other."""
        if not (self.mechanism or "").startswith("SCRAM-"):
            return []
        return [f"{self.mechanism}=[name={name},password={password}]" for name, password in self.passwords.items()]

    # --- the clients' side ---

    def client_config(self, data_dir: Path, user: str | None = None) -> dict[str, str]:
        """librdkafka (and Java) properties a client needs to connect as `user` (default: the super
        user); nothing for a PLAINTEXT cluster."""
        if not self.secured:
            return {}
        config = {"security.protocol": self.protocol}
        if self.uses_tls:
            config["ssl.ca.location"] = str(Path(data_dir) / "ca.pem")
        if self.uses_sasl:
            user = user or self.super_user
            config["sasl.mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                config.update({"enable.sasl.oauthbearer.unsecure.jwt": "true",
                               "sasl.oauthbearer.config": f"principal={user}"})
            else:
                if user not in self.passwords:
                    raise ClusterError(f"no SASL user {user} in this cluster (users: {', '.join(self.passwords)})")
                config.update({"sasl.username": user, "sasl.password": self.passwords[user]})
        elif self.super_user and (user or self.super_user):
            config.update(_client_certificate_config(data_dir, user or self.super_user))
        return config


def jaas_config(login_module: str, options: dict[str, str]) -> str:
    """Kafka's sasl.jaas.config syntax: `Module required key="value" ...;`."""
    quoted = " ".join(f'{key}="{value}"' for key, value in options.items())
    return f"{login_module} required {quoted};"


def control_channel_config(data_dir: Path, host: str) -> dict[str, str]:
    """Mutual TLS on the control channel, in Kafka's words: the controller listener maps to SSL, with
    the control channel's own certificate and CA as that listener's keystore and truststore."""
    from cluster.launch.certificates import make_control_certificates

    return {"listener.security.protocol.map": f"{CONTROLLER_LISTENER}:SSL",
            **make_control_certificates(Path(data_dir), [host]).broker_settings(CONTROLLER_LISTENER)}


def _tls_node_config(data_dir: Path, host: str) -> dict[str, str]:
    from cluster.launch.certificates import make_certificates

    return make_certificates(Path(data_dir), [host]).broker_settings()


def _mutual_tls_node_config(super_user: str) -> dict[str, str]:
    """Clients are who their certificates name, the nodes (which share one certificate) included."""
    from cluster.launch.certificates import NODE_COMMON_NAME

    return {"ssl.client.auth": "required", "ssl.principal.mapping.rules": CN_RULE,
            "super.users": f"User:{super_user};User:{NODE_COMMON_NAME}"}


def _client_certificate_config(data_dir: Path, user: str) -> dict[str, str]:
    from cluster.launch.certificates import client_certificate

    cert, key = client_certificate(Path(data_dir), user)
    return {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}


def kafka_python_config(client_config: dict[str, str]) -> dict:
    """The same settings as kafka-python (and aiokafka) name them."""
    names = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
             "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
             "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
             "ssl.key.location": "ssl_keyfile"}
    config = {names[key]: value for key, value in client_config.items() if key in names}
    if client_config.get("sasl.mechanism") == "OAUTHBEARER":
        raise ClusterError("kraftwerk's own commands cannot log in with OAUTHBEARER yet")
    return config
