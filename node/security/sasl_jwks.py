"""Signed OAUTHBEARER tokens checked against a JWKS, as Kafka's OAuthBearerValidatorCallbackHandler
checks them: RS256 or ES256 by the key the header's `kid` names; the subject claim
(`sasl.oauthbearer.sub.claim.name`, default sub); exp required; iat not in the future; the audience
and issuer when `sasl.oauthbearer.expected.audience` / `.expected.issuer` are set; clock skew
`sasl.oauthbearer.clock.skew.seconds` (default 30).
"""
from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from node.security.sasl_jwt import TokenRejected, b64url, check_times, json_part, principal_of

ALGORITHMS = ("RS256", "ES256")


def _int(text: str) -> int:
    return int.from_bytes(b64url(text), "big")


def public_key(jwk: dict):
    if jwk.get("kty") == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    if jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
        return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), ec.SECP256R1()).public_key()
    raise TokenRejected(f"unsupported JWK key type {jwk.get('kty')}")


def _key_for(header: dict, jwks: dict):
    keys = [k for k in jwks.get("keys", []) if isinstance(k, dict)]
    kid = header.get("kid")
    matching = [k for k in keys if k.get("kid") == kid] if kid is not None else keys[:1]
    if not matching:
        raise TokenRejected(f"No JWK found with kid {kid}")
    try:
        return public_key(matching[0])
    except (KeyError, ValueError, TypeError) as exc:
        raise TokenRejected(f"JWK with kid {kid} is malformed: {exc}") from None


def verify_signature(alg: str, key, signed: bytes, signature: bytes) -> None:
    try:
        if alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        elif alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey) and len(signature) == 64:
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        else:
            raise TokenRejected(f"the key does not fit algorithm {alg}")
    except InvalidSignature:
        raise TokenRejected("JWT signature is invalid") from None


def validate_signed(token: str, jwks: dict, config, now_ms: int) -> tuple[str, int]:
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise TokenRejected("Malformed JWT provided; expected three sections (header, payload, and signature)")
    header, claims = json_part(parts[0]), json_part(parts[1])
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise TokenRejected(f"JWT algorithm {alg} is not allowed: {', '.join(ALGORITHMS)}")
    verify_signature(alg, _key_for(header, jwks), f"{parts[0]}.{parts[1]}".encode(), b64url(parts[2]))
    skew_ms = 1000 * int(config.get("sasl.oauthbearer.clock.skew.seconds") or 30)
    expires_ms = check_times(claims, now_ms, skew_ms)
    _check_audience_and_issuer(claims, config)
    return principal_of(claims, config.get("sasl.oauthbearer.sub.claim.name") or "sub"), expires_ms


def _check_audience_and_issuer(claims: dict, config) -> None:
    expected = [a.strip() for a in config.get("sasl.oauthbearer.expected.audience").split(",") if a.strip()]
    audience = claims.get("aud")
    audience = [audience] if isinstance(audience, str) else audience or []
    if expected and not set(expected) & set(audience):
        raise TokenRejected(f"Audience {audience} is none of the expected {expected}")
    issuer = config.get("sasl.oauthbearer.expected.issuer")
    if issuer and claims.get("iss") != issuer:
        raise TokenRejected(f"Issuer {claims.get('iss')} is not the expected {issuer}")
