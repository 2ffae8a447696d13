"""A connection's security session: the listener it came in on, and who the client is.

Every connection has one (`ClientConnection.session`), and every request's header points to it
(`RequestHeader.session`), so that an API module can ask who is asking (`session.principal`), and
the authorizer and the quotas can answer for that principal.

On a PLAINTEXT or SSL listener a connection is authenticated from the start: as User:ANONYMOUS, or
on SSL as the principal of the client's certificate. On a SASL listener it is not, until a
SaslHandshake and a SaslAuthenticate succeed; until then only ApiVersions and the two SASL APIs are
served, and anything else closes the connection, as Kafka does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class ListenerInfo:
    name: str  # e.g. PLAINTEXT, EXTERNAL, INTERNAL
    security_protocol: str  # one of cluster.formats.listeners.SECURITY_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol.endswith("SSL")


PLAINTEXT_LISTENER = ListenerInfo("PLAINTEXT", "PLAINTEXT")


@dataclass(slots=True, eq=False)
class Session:
    listener: ListenerInfo
    client_host: str = ""  # the client's address, without Kafka's leading "/"
    principal: str = ANONYMOUS  # "User:alice"
    authenticated: bool = True
    # SASL: the mechanism chosen by SaslHandshake, and its server-side exchange while it runs
    mechanism: str | None = None
    exchange: object | None = None
    # After a SaslHandshake v0 the client sends raw SASL tokens, not SaslAuthenticate requests.
    raw_tokens: bool = False
    # KIP-368: when (ms since the epoch) this authentication expires; None: never.
    expires_ms: int | None = None
    # Authentication failed: the connection closes once the answer saying so is written.
    failed: bool = False
    # Mutes the connection for a quota's throttle time, in ms (its ClientConnection.throttle).
    mute: Callable[[int], None] | None = field(default=None, repr=False)

    @classmethod
    def opened(cls, listener: ListenerInfo, client_host: str) -> "Session":
        return cls(listener, client_host, authenticated=not listener.uses_sasl)

    @property
    def user(self) -> str:
        """The principal's name, as a quota's user entity names it."""
        return self.principal.partition(":")[2]
