"""SASL on a connection: the handshake that picks a mechanism, and the exchange that authenticates.

SaslHandshake (node/apis/sasl_handshake.py) calls `handshake`; each SaslAuthenticate request, or
each raw size-prefixed token after a v0 handshake, calls `authenticate`. When an exchange completes,
the session holds the principal (User:<name>) and, with `connections.max.reauth.ms` (or an
OAUTHBEARER token's expiry), when the authentication expires (KIP-368). A client re-authenticates
by a new handshake (same mechanism) and exchange on its authenticated connection; it must come out
as the same principal. A failed exchange marks the session failed; the connection is then closed
after its answer is written, as Kafka closes it.

Configs, as Kafka reads them: `sasl.enabled.mechanisms` (per listener:
`listener.name.<l>.sasl.enabled.mechanisms`), the mechanism's JAAS entry
(`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`) and
`connections.max.reauth.ms` (also per listener and mechanism).
"""
from __future__ import annotations

import logging
import time

from cluster.formats.errors import ErrorCode
from node.security.sasl_common import (
    Exchange, JaasError, SaslAuthenticationError, SaslCredentialsRejected, jaas_options, listener_config,
)
from node.security.sasl_oauthbearer import OAuthBearerExchange
from node.security.sasl_plain import PlainExchange
from node.security.sasl_scram import ScramExchange

__all__ = ["SaslAuthenticationError", "handshake", "authenticate", "enabled_mechanisms", "inter_broker_credentials"]

log = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def enabled_mechanisms(config, listener_name: str) -> list[str]:
    value = listener_config(config, listener_name, "sasl.enabled.mechanisms")
    return [m.strip() for m in value.split(",") if m.strip()]


def handshake(broker, session, mechanism: str, version: int) -> int:
    """SaslHandshake: 0, UNSUPPORTED_SASL_MECHANISM, or ILLEGAL_SASL_STATE (not a SASL listener, or
    an exchange already under way)."""
    if not session.listener.uses_sasl:
        return ErrorCode.ILLEGAL_SASL_STATE
    if session.exchange is not None or (session.authenticated and version == 0):
        # An exchange under way; or re-authentication without SaslAuthenticate, which KIP-368 needs.
        _fail(session)
        return ErrorCode.ILLEGAL_SASL_STATE
    if mechanism not in enabled_mechanisms(broker.config, session.listener.name) or mechanism not in MECHANISMS:
        log.info("SASL mechanism %r refused from %s", mechanism, session.client_host)
        _fail(session)
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM
    if session.authenticated and session.mechanism != mechanism:
        # KIP-368: the handshake is answered, the exchange that follows refused, as Kafka does.
        session.exchange = _Refused(mechanism, f"SASL mechanism '{mechanism}' requested by client is not "
                                               f"supported for re-authentication of mechanism '{session.mechanism}'")
    else:
        session.mechanism = mechanism
        session.exchange = _new_exchange(broker, session.listener.name, mechanism)
    session.raw_tokens = version == 0
    return ErrorCode.NONE


async def authenticate(broker, session, token: bytes) -> bytes:
    """One step of the exchange: the server's answer to the client's token. SaslAuthenticationError
    when it fails (the session is then marked failed and loses its authentication)."""
    exchange = session.exchange
    if exchange is None:
        _fail(session)
        raise SaslAuthenticationError("Unexpected SaslAuthenticate request before a SaslHandshake",
                                      ErrorCode.ILLEGAL_SASL_STATE)
    during = "re-authentication" if session.authenticated else "authentication"
    try:
        answer = exchange.step(bytes(token))
        if exchange.complete:
            _complete(broker, session, exchange)
        return answer
    except SaslAuthenticationError as exc:
        log.info("SASL/%s authentication of %s failed: %s", exchange.mechanism, session.client_host, exc.message)
        _fail(session)
        raise
    except SaslCredentialsRejected as exc:
        log.info("SASL/%s authentication of %s failed: %s", exchange.mechanism, session.client_host, exc)
        raise _invalid_credentials(session, exchange, during) from None
    except Exception:  # a token or a config no check foresaw: refused as bad credentials, never a handler failure
        log.warning("SASL/%s authentication of %s failed unexpectedly", exchange.mechanism, session.client_host,
                    exc_info=True)
        raise _invalid_credentials(session, exchange, during) from None


def _invalid_credentials(session, exchange: Exchange, during: str) -> SaslAuthenticationError:
    """Kafka's answer to a SaslException: it does not say why, so as not to say whether the user exists."""
    _fail(session)
    return SaslAuthenticationError(f"Authentication failed during {during} due to invalid credentials with SASL "
                                   f"mechanism {exchange.mechanism}")


def _complete(broker, session, exchange: Exchange) -> None:
    principal = f"User:{exchange.user}"
    if session.authenticated and session.principal != principal:
        raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                      f"{session.principal.replace(':', '.', 1)}: {principal.replace(':', '.', 1)}")
    session.principal = principal
    session.authenticated = True
    session.exchange = None
    session.raw_tokens = False
    session.expires_ms = _expiry_ms(broker.config, session, exchange)


def session_lifetime_ms(session) -> int:
    """What SaslAuthenticate v1+ tells the client: how long until it must re-authenticate; 0: never."""
    if session.expires_ms is None:
        return 0
    return max(0, session.expires_ms - int(time.time() * 1000))


def _expiry_ms(config, session, exchange: Exchange) -> int | None:
    now_ms = int(time.time() * 1000)
    max_reauth_ms = int(listener_config(config, session.listener.name, "connections.max.reauth.ms",
                                        exchange.mechanism) or 0)
    candidates = [now_ms + max_reauth_ms] if max_reauth_ms > 0 else []
    if exchange.credential_expires_ms is not None:
        candidates.append(max(now_ms, exchange.credential_expires_ms))
    return min(candidates) if candidates else None


def _fail(session) -> None:
    session.exchange = None
    session.raw_tokens = False
    session.authenticated = False
    session.failed = True


def _new_exchange(broker, listener_name: str, mechanism: str) -> Exchange:
    if mechanism.startswith("SCRAM-"):
        return ScramExchange(mechanism, lambda user: broker.image.scram_credentials.get(user, {}))
    try:
        options = jaas_options(broker.config, listener_name, mechanism)
    except JaasError as exc:
        log.warning("listener %s: the %s JAAS config cannot be read: %s", listener_name, mechanism, exc)
        options = {}
    if mechanism == "PLAIN":
        return PlainExchange(options)
    return OAuthBearerExchange(options, broker.config)


class _Refused(Exchange):
    def __init__(self, mechanism: str, message: str):
        super().__init__()
        self.mechanism = mechanism
        self.message = message

    def step(self, token: bytes) -> bytes:
        raise SaslAuthenticationError(self.message)


def inter_broker_credentials(config, listener_name: str) -> tuple[str, str, str] | None:
    """(mechanism, username, password) a node logs in with on the inter-broker listener: the mechanism
    `sasl.mechanism.inter.broker.protocol` (PLAIN when unset), the user and password the listener's
    JAAS entry for it names; None when it names none."""
    mechanism = config.get("sasl.mechanism.inter.broker.protocol") or "PLAIN"
    try:
        options = jaas_options(config, listener_name, mechanism)
    except JaasError:
        return None
    if "username" not in options or "password" not in options:
        return None
    return mechanism, options["username"], options["password"]
