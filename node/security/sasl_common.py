"""What every SASL mechanism shares: the failure it raises, and the JAAS configs it reads.

Kafka configures a mechanism's server side with a JAAS entry, e.g.
`listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule
required username="admin" password="s" user_admin="s" user_alice="a";` — a login module, its control
flag, and options. The broker looks for the listener's mechanism-specific entry first; we fall back
to `sasl.jaas.config` (Kafka falls back to a static JAAS file instead).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


class SaslAuthenticationError(Exception):
    """A failed SASL exchange; the message is what the client is told (Kafka's words)."""

    def __init__(self, message: str, error_code: int = 58):
        super().__init__(message)
        self.message = message
        self.error_code = error_code  # SASL_AUTHENTICATION_FAILED, or ILLEGAL_SASL_STATE


class JaasError(ValueError):
    pass


@dataclass
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<punct>[=;])|(?P<word>[^\s=;"]+))')
_FLAGS = {"required", "requisite", "sufficient", "optional"}


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise JaasError(f"unexpected character at {pos} in JAAS config")
        pos = match.end()
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"][1:-1])))
        elif match["punct"]:
            tokens.append((match["punct"], match["punct"]))
        elif match["word"]:
            tokens.append(("word", match["word"]))
    return tokens


def parse_jaas(text: str) -> list[JaasEntry]:
    """Kafka's JAAS syntax: `Module flag key="value" key=value;` one or more times."""
    tokens, entries, i = _tokens(text), [], 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][1].lower() not in _FLAGS:
            raise JaasError("JAAS config entry must be a login module followed by required, requisite, "
                            "sufficient or optional")
        entry, i = JaasEntry(tokens[i][1], tokens[i + 1][1].lower()), i + 2
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" \
                    or tokens[i + 2][0] not in ("word", "value"):
                raise JaasError(f"JAAS config option of {entry.login_module} must be name=value")
            entry.options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError("JAAS config entry must end with ';'")
        entries.append(entry)
        i += 1
    if not entries:
        raise JaasError("JAAS config is empty")
    return entries


def listener_config(config, listener_name: str, name: str, mechanism: str | None = None) -> str:
    """A listener's setting, as Kafka's listener.name.<listener>[.<mechanism>].<name> overrides it."""
    prefix = f"listener.name.{listener_name.lower()}."
    keys = [f"{prefix}{mechanism.lower()}.{name}"] if mechanism else []
    keys += [f"{prefix}{name}", name]
    for key in keys:
        value = config.get(key)
        if value:
            return value
    return ""


def jaas_options(config, listener_name: str, mechanism: str) -> dict[str, str]:
    """The options of the JAAS entry configured for a mechanism on a listener; {} when none is."""
    text = listener_config(config, listener_name, "sasl.jaas.config", mechanism)
    if not text.strip():
        return {}
    return parse_jaas(text)[0].options


class SaslCredentialsRejected(Exception):
    """A failure whose reason is logged but not told to the client (Kafka's SaslException): the
    client hears "Authentication failed during authentication due to invalid credentials with SASL
    mechanism X", which does not say whether the user exists."""


class Exchange:
    """One mechanism's server side of one exchange: `step` takes each client token and answers."""

    mechanism = ""

    def __init__(self) -> None:
        self.complete = False
        self.user: str | None = None
        # When the credential itself expires (an OAUTHBEARER token's exp), ms since the epoch.
        self.credential_expires_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        raise NotImplementedError

    def done(self, user: str) -> bytes:
        self.complete, self.user = True, user
        return b""
