"""SASL/PLAIN's server side (RFC 4616) as Kafka's PlainSaslServer: one token, `authzid NUL user NUL password`,
checked against the JAAS entry's `user_<name>="<password>"` options (PlainServerCallbackHandler).
"""
from __future__ import annotations

import hmac

from node.security.sasl_common import Exchange, SaslAuthenticationError


class PlainExchange(Exchange):
    mechanism = "PLAIN"

    def __init__(self, jaas_options: dict[str, str]):
        super().__init__()
        self.jaas_options = jaas_options

    def step(self, token: bytes) -> bytes:
        parts = token.decode("utf-8", "replace").split("\0", 3)
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authorization_id, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.jaas_options.get(f"user_{username}")
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id "
                                          "that is different from username")
        return self.done(username)
