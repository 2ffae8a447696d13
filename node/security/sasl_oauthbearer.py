"""SASL/OAUTHBEARER's server side (RFC 7628) as Kafka's OAuthBearerSaslServer.

The client sends `n,[a=authzid],\x01auth=Bearer <JWT>\x01[key=value\x01]\x01`. Without a JWKS the
token is checked as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler checks it, for development
only: alg "none", no signature, the principal claim (`unsecuredValidatorPrincipalClaimName`, default
sub) a non-blank string, `exp` required and in the future and after `iat`, `iat` not in the future,
each within `unsecuredValidatorAllowableClockSkewMs`, and `unsecuredValidatorRequiredScope` held by
the scope claim (`unsecuredValidatorScopeClaimName`). With `sasl.oauthbearer.jwks.endpoint.url`
naming a `file://` JWKS, the token must instead be signed (RS256 or ES256) by a key of that set and
is checked as Kafka's OAuthBearerValidatorCallbackHandler does (sub claim, exp, iat, expected
audience and issuer, `sasl.oauthbearer.clock.skew.seconds`).

A token that fails is answered with RFC 7628's JSON error challenge (`{"status":"invalid_token"}`);
the client then sends %x01 and the exchange fails with that JSON as the message, as in Kafka.
"""
from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from node.security.sasl_common import Exchange, SaslAuthenticationError, SaslCredentialsRejected
from node.security.sasl_jwt import TokenRejected, check_times, json_part, principal_of, scope_of

log = logging.getLogger(__name__)

_INITIAL = re.compile(r"n,(?:a=(?P<authzid>[^,]+))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
CONTROL_A = b"\x01"


def validate_unsecured(token: str, options: dict[str, str], now_ms: int) -> tuple[str, int]:
    """(principal, exp in ms) of an unsecured JWS, or TokenRejected."""
    if ".." in token:
        raise TokenRejected("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenRejected(f"Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                            f"values: {len(parts)}")
    header, claims = json_part(parts[0]), json_part(parts[1])
    if header.get("alg") != "none":
        raise TokenRejected("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise TokenRejected("Unsecured JWS must not contain a digital signature")
    skew_ms = _clock_skew_ms(options.get("unsecuredValidatorAllowableClockSkewMs", ""))
    principal = principal_of(claims, options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub")
    expires_ms = check_times(claims, now_ms, skew_ms)
    required = options.get("unsecuredValidatorRequiredScope", "").split()
    scope = scope_of(claims, options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope")
    for element in required:
        if element not in scope:
            raise TokenRejected(f"The provided scope ({scope}) was missing a required scope ({element})",
                                scope=f"[{', '.join(required)}]")
    return principal, expires_ms


def _clock_skew_ms(text: str) -> int:
    try:
        skew = int(text.strip() or 0)
    except ValueError:
        raise TokenRejected(f"unsecuredValidatorAllowableClockSkewMs is not a number: {text}") from None
    if skew < 0:
        raise TokenRejected(f"Allowable clock skew millis must not be negative: {text}")
    return skew


class OAuthBearerExchange(Exchange):
    mechanism = "OAUTHBEARER"

    def __init__(self, jaas_options: dict[str, str], config):
        super().__init__()
        self.jaas_options = jaas_options
        self.config = config
        self.error_challenge: str | None = None

    def step(self, token: bytes) -> bytes:
        if token == CONTROL_A and self.error_challenge is not None:
            raise SaslAuthenticationError(self.error_challenge)
        self.error_challenge = None
        authzid, bearer = self._initial_response(token)
        try:
            principal, expires_ms = self._validate(bearer)
        except TokenRejected as exc:
            log.info("OAUTHBEARER token rejected: %s", exc)
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            scope = f', "scope":"{exc.scope}"' if exc.scope is not None else ""
            self.error_challenge = f'{{"status":"{status}"{scope}}}'
            return self.error_challenge.encode()
        if authzid and authzid != principal:
            raise SaslAuthenticationError(f"Authentication failed: Client requested an authorization id "
                                          f"({authzid}) that is different from the token's principal name "
                                          f"({principal})")
        self.credential_expires_ms = expires_ms
        return self.done(principal)

    def _initial_response(self, token: bytes) -> tuple[str, str]:
        match = _INITIAL.fullmatch(token.decode("utf-8", "replace"))
        if not match:
            raise SaslCredentialsRejected("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in match["pairs"].split("\x01") if p)
        if "auth" not in pairs:
            raise SaslCredentialsRejected("Invalid OAUTHBEARER client first message: 'auth' not specified")
        auth = _AUTH.fullmatch(pairs["auth"])
        if not auth or auth["scheme"].lower() != "bearer":
            raise SaslCredentialsRejected("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        return match["authzid"] or "", auth["token"]

    def _validate(self, token: str) -> tuple[str, int]:
        now_ms = int(time.time() * 1000)
        jwks_url = self.config.get("sasl.oauthbearer.jwks.endpoint.url")
        if not jwks_url:
            return validate_unsecured(token, self.jaas_options, now_ms)
        from node.security.sasl_jwks import validate_signed  # (`cryptography` loads only where a JWKS is used)

        return validate_signed(token, load_jwks(jwks_url), self.config, now_ms)


def load_jwks(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise TokenRejected(f"only file:// JWKS URLs are served, not {url}")
    try:
        return json.loads(Path(unquote(parsed.path)).read_text())
    except (OSError, ValueError) as exc:
        raise TokenRejected(f"JWKS at {url} could not be read: {exc}") from None
