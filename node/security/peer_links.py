"""How a node connects to its peers: on their inter-broker listener, with the TLS and the SASL login
that listener's security protocol asks for, as Kafka's inter-broker clients do (the replica
fetchers, and the requests a node sends to other nodes: markers, verification, share state).

TLS trusts the node's own truststore and presents its keystore (`tls.client_context`); the login
is `sasl.mechanism.inter.broker.protocol` with the user and password of the listener's JAAS entry
(`sasl.inter_broker_credentials`). A refused login is a ConnectionError to the caller, which
tries again as it does for a peer that is down.
"""
from __future__ import annotations

import asyncio
import logging
import ssl

from cluster.formats.config import BrokerConfig, ConfigError
from cluster.formats.listeners import security_protocol_of

log = logging.getLogger(__name__)


class PeerLoginRefused(ConnectionError):
    """A peer refused this node's SASL login."""


class PeerLinks:
    def __init__(self, config: BrokerConfig, listener_name: str):
        self.listener_name = listener_name
        protocol = security_protocol_of(config, listener_name)
        self.ssl: ssl.SSLContext | None = None
        self.login: tuple[str, str, str] | None = None
        if protocol.endswith("SSL"):
            from cluster.runtime import tls

            self.ssl = tls.client_context(config, listener_name)
        if protocol.startswith("SASL_"):
            from node.security import sasl

            self.login = sasl.inter_broker_credentials(config, listener_name)
            if self.login is None:
                raise ConfigError(f"the inter-broker listener {listener_name} uses SASL, but no JAAS config "
                                  f"(sasl.jaas.config) gives this node a username and password for "
                                  f"{config.get('sasl.mechanism.inter.broker.protocol') or 'PLAIN'}")

    def _tls(self, host: str) -> dict:
        return {"ssl": self.ssl, "server_hostname": host} if self.ssl else {}

    async def open_streams(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, port, **self._tls(host))
        if self.login:
            from node.security import sasl_client

            try:
                await sasl_client.authenticate(reader, writer, *self.login)
            except BaseException as exc:
                writer.close()
                raise self._refused(exc, host, port) from exc
        return reader, writer

    async def open_protocol(self, factory, host: str, port: int):
        """A connection whose protocol (made by `factory`) has `exchange(request, timeout_s)`; logged in."""
        _, connection = await asyncio.get_running_loop().create_connection(factory, host, port, **self._tls(host))
        if self.login:
            from node.security import sasl_client

            async def exchange(request: bytes) -> bytes:
                return bytes(await connection.exchange(request, LOGIN_TIMEOUT_S))
            try:
                await sasl_client.log_in(exchange, *self.login)
            except BaseException as exc:
                connection.close()
                raise self._refused(exc, host, port) from exc
        return connection

    def _refused(self, exc: BaseException, host: str, port: int) -> BaseException:
        from node.security.sasl_client import SaslClientError

        if isinstance(exc, SaslClientError):
            log.warning("node at %s:%d refused this node's SASL login on listener %s: %s", host, port,
                        self.listener_name, exc)
            return PeerLoginRefused(str(exc))
        if isinstance(exc, asyncio.IncompleteReadError):
            return ConnectionResetError(f"node at {host}:{port} closed the connection during the SASL login")
        return exc


LOGIN_TIMEOUT_S = 10.0
