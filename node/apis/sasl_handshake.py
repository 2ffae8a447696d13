"""SaslHandshake v0-1: the client names the SASL mechanism it will authenticate with.

Answered with the listener's enabled mechanisms (`sasl.enabled.mechanisms`, per listener
`listener.name.<l>.sasl.enabled.mechanisms`) and NONE, or UNSUPPORTED_SASL_MECHANISM (the
connection is then closed). After v0 the client sends raw size-prefixed SASL tokens instead of
SaslAuthenticate requests. On a non-SASL listener, or while an exchange is under way, the answer
is ILLEGAL_SASL_STATE. A handshake on an authenticated connection starts a re-authentication
(KIP-368), which must use the same mechanism and come out as the same principal.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from node.security import sasl

REQUEST = SaslHandshakeRequest
RESPONSE = SaslHandshakeResponse
VERSIONS = (0, 1)


async def handle(broker, header, request):
    session = header.session
    error = sasl.handshake(broker, session, request.mechanism, header.api_version)
    mechanisms = sasl.enabled_mechanisms(broker.config, session.listener.name) if session.listener.uses_sasl else []
    return RESPONSE[header.api_version](error_code=error, mechanisms=mechanisms)
