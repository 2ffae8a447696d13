"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512's server side (RFC 5802) as Kafka's ScramSaslServer.

client-first `n,,n=user,r=cnonce[,ext]` -> server-first `r=cnonce+snonce,s=salt,i=iterations`;
client-final `c=biws,r=cnonce+snonce,p=proof` -> server-final `v=signature`. Credentials come from
the metadata image (UserScramCredentialRecords). A `tokenauth=true` extension asks for a delegation
token, which this broker does not issue, so it fails as an unknown token does in Kafka. Reasons
that would tell a client whether a user exists are raised as SaslCredentialsRejected, which the
client hears as Kafka's generic "invalid credentials" message.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets

from cluster.formats.scram import MECHANISM_CODES, MIN_ITERATIONS, digest, hmac_digest
from node.security.sasl_common import Exchange, SaslAuthenticationError, SaslCredentialsRejected

# Kafka's ScramMessages patterns; character classes exclude ',' (\x2c) and, in a saslname, '=' (\x3d).
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
                          rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
                          rf"p=(?P<proof>{_BASE64})")


def username(saslname: str) -> str:
    """RFC 5802's saslname escapes ',' and '=' as =2C and =3D."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def extensions(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def server_nonce() -> str:
    """As Kafka's ScramFormatter.secureRandomString: 130 random bits in base 36."""
    value, digits = secrets.randbits(130), "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
    return out or "0"


class ScramExchange(Exchange):
    def __init__(self, mechanism: str, credentials_of):
        """credentials_of(user) -> {mechanism code: ScramCredential}, read when the client names its user."""
        super().__init__()
        self.mechanism = mechanism
        self.code = MECHANISM_CODES[mechanism]
        self.credentials_of = credentials_of
        self.credential = None
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""
        self.pending_user = ""

    def step(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        if self.credential is None:
            return self._first(text)
        return self._final(text)

    def _first(self, text: str) -> bytes:
        match = CLIENT_FIRST.fullmatch(text)
        if not match:
            raise SaslCredentialsRejected(f"Invalid SCRAM client first message format: {text!r}")
        user = username(match["saslname"])
        if extensions(match["extensions"]).get("tokenauth", "").lower() == "true":
            raise SaslCredentialsRejected(f"Token Authentication failed: Invalid tokenId : {user}")
        credential = self.credentials_of(user).get(self.code)
        if credential is None:
            raise SaslCredentialsRejected("Authentication failed: Invalid user credentials")
        if match["authzid"] and username(match["authzid"]) != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslCredentialsRejected(f"Iterations {credential.iterations} is less than the minimum "
                                          f"{MIN_ITERATIONS} for {self.mechanism}")
        self.credential, self.pending_user = credential, user
        self.client_first_bare = match["bare"]
        self.nonce = match["nonce"] + server_nonce()
        self.server_first = (f"r={self.nonce},s={base64.b64encode(credential.salt).decode()},"
                             f"i={credential.iterations}")
        return self.server_first.encode()

    def _final(self, text: str) -> bytes:
        match = CLIENT_FINAL.fullmatch(text)
        if not match:
            raise SaslCredentialsRejected("Invalid SCRAM client final message format")
        if not match["nonce"].endswith(self.nonce):
            raise SaslCredentialsRejected("Invalid client nonce in the final client message.")
        auth_message = f"{self.client_first_bare},{self.server_first},{match['without_proof']}".encode()
        stored_key, server_key = self.credential.stored_key, self.credential.server_key
        self.credential = None  # nothing of the credential outlives the exchange
        client_signature = hmac_digest(self.code, stored_key, auth_message)
        try:
            proof = base64.b64decode(match["proof"], validate=True)
        except binascii.Error:
            raise SaslCredentialsRejected("Invalid client proof encoding") from None
        if len(proof) != len(client_signature):
            raise SaslCredentialsRejected("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, proof))
        if not hmac.compare_digest(digest(self.code, client_key), stored_key):
            raise SaslCredentialsRejected("Invalid client credentials")
        self.done(self.pending_user)
        return b"v=" + base64.b64encode(hmac_digest(self.code, server_key, auth_message))
