"""SaslAuthenticate v0-2: one step of the SASL exchange the handshake chose.

The client's token goes to the mechanism (node/security/sasl.py); its answer comes back as
auth_bytes. When the exchange completes, v1+ carry session_lifetime_ms: how long until the client
must re-authenticate (`connections.max.reauth.ms`, or an OAUTHBEARER token's expiry; 0: never).
A failed exchange is answered with SASL_AUTHENTICATION_FAILED and Kafka's message, and the
connection is then closed. Before any SaslHandshake the answer is ILLEGAL_SASL_STATE and the
connection is closed; on a non-SASL listener, or an authenticated connection with no
re-authentication under way, it is ILLEGAL_SASL_STATE, and the connection stays open.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from cluster.formats.errors import ErrorCode
from node.security import sasl

REQUEST = SaslAuthenticateRequest
RESPONSE = SaslAuthenticateResponse
VERSIONS = (0, 2)


async def handle(broker, header, request):
    session = header.session
    if not session.listener.uses_sasl or (session.authenticated and session.exchange is None):
        return _answer(header, ErrorCode.ILLEGAL_SASL_STATE,
                       "SaslAuthenticate request received after successful authentication")
    try:
        answer = await sasl.authenticate(broker, session, request.auth_bytes)
    except sasl.SaslAuthenticationError as exc:
        return _answer(header, exc.error_code, exc.message)
    lifetime = sasl.session_lifetime_ms(session) if session.exchange is None else 0
    return _answer(header, ErrorCode.NONE, None, answer, lifetime)


def _answer(header, error: int, message: str | None, auth_bytes: bytes = b"", lifetime_ms: int = 0):
    fields = {"error_code": error, "error_message": message, "auth_bytes": auth_bytes}
    if header.api_version >= 1:
        fields["session_lifetime_ms"] = lifetime_ms
    return RESPONSE[header.api_version](**fields)
