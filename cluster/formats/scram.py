"""SCRAM credentials as Kafka stores them (RFC 5802; Kafka's ScramFormatter and ScramMechanism).

A credential keeps the salt, the iteration count and two keys derived from the salted password:
the stored key (H(HMAC(salted, "Client Key"))), against which a client's proof is checked, and the
server key (HMAC(salted, "Server Key")), with which the server proves it holds the credential.
The password itself is not kept.
"""
from __future__ import annotations

import hashlib
import hmac
import os

from cluster.formats.image import ScramCredential

# Kafka's ScramMechanism codes, as UserScramCredentialRecord and the admin APIs carry them.
SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2
MECHANISM_CODES = {"SCRAM-SHA-256": SCRAM_SHA_256, "SCRAM-SHA-512": SCRAM_SHA_512}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}

# Kafka's bounds: ScramMechanism.minIterations() (4096 for both) and ScramControlManager.MAX_ITERATIONS.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 32


class ScramError(ValueError):
    pass


def mechanism_code(mechanism: str | int) -> int:
    """A mechanism's code from its name ("SCRAM-SHA-256") or code; ScramError for anything else."""
    code = mechanism if isinstance(mechanism, int) else MECHANISM_CODES.get(mechanism.upper())
    if code not in HASHES:
        raise ScramError(f"Unknown SCRAM mechanism {mechanism!r}: use SCRAM-SHA-256 or SCRAM-SHA-512")
    return code


def check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise ScramError("Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise ScramError("Too many iterations")


def salted_password(password: str, mechanism: str | int, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(Normalize(password), salt, i): PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism_code(mechanism)], password.encode(), salt, iterations)


def hmac_digest(mechanism: int, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, HASHES[mechanism]).digest()


def digest(mechanism: int, data: bytes) -> bytes:
    return hashlib.new(HASHES[mechanism], data).digest()


def credential_from_salted(salted: bytes, mechanism: str | int, salt: bytes, iterations: int) -> ScramCredential:
    """What the controller keeps of an AlterUserScramCredentials upsertion, which carries the salted password."""
    code = mechanism_code(mechanism)
    client_key = hmac_digest(code, salted, b"Client Key")
    return ScramCredential(salt=salt, stored_key=digest(code, client_key),
                           server_key=hmac_digest(code, salted, b"Server Key"), iterations=iterations)


def scram_credential(password: str, mechanism: str | int, iterations: int = MIN_ITERATIONS,
                     salt: bytes | None = None) -> ScramCredential:
    """A credential for a password; a random salt unless one is given. ScramError for bad arguments."""
    check_iterations(iterations)
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return credential_from_salted(salted_password(password, mechanism, salt, iterations), mechanism, salt, iterations)
