"""A JWT's parts and the claim checks Kafka's OAUTHBEARER validators share (OAuthBearerValidationUtils)."""
from __future__ import annotations

import base64
import binascii
import json


class TokenRejected(Exception):
    def __init__(self, reason: str, scope: str | None = None):
        super().__init__(reason)
        self.scope = scope


def b64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenRejected("malformed base64") from None


def json_part(text: str) -> dict:
    try:
        value = json.loads(b64url(text))
    except (UnicodeDecodeError, ValueError):
        raise TokenRejected("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenRejected("malformed JSON")
    return value


def scope_of(claims: dict, claim_name: str) -> list[str]:
    value = claims.get(claim_name)
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TokenRejected(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    return value


def check_times(claims: dict, now_ms: int, skew_ms: int) -> int:
    """Kafka's checks of iat and exp; returns exp in ms (the credential's expiry)."""
    issued_at, expires = _number(claims, "iat"), _number(claims, "exp")
    if expires is None:
        raise TokenRejected("No expiration time in JWT")
    if issued_at is not None and 1000 * issued_at > now_ms + skew_ms:
        raise TokenRejected(f"The Issued At value ({issued_at:f} seconds) was after the indicated time "
                            f"({now_ms} ms) plus allowable clock skew ({skew_ms} ms)")
    if now_ms - skew_ms >= 1000 * expires:
        raise TokenRejected(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew_ms} ms) was on "
                            f"or after the Expiration Time value ({expires:f} seconds)")
    if issued_at is not None and expires <= issued_at:
        raise TokenRejected(f"The Expiration Time time ({expires:f} seconds) was not after the Issued At time "
                            f"({issued_at:f} seconds)")
    return int(1000 * expires)


def principal_of(claims: dict, claim_name: str) -> str:
    value = claims.get(claim_name)
    if value is not None and not isinstance(value, str):
        raise TokenRejected(f"The '{claim_name}' claim was not of type String: {type(value).__name__}")
    if not value or not value.strip():
        raise TokenRejected(f"No principal name in JWT claim: {claim_name}")
    return value
