"""A node's listeners as Kafka configures them.

`listeners` names each socket a node serves (`NAME://host:port`, several allowed),
`listener.security.protocol.map` says which security protocol each name speaks,
`advertised.listeners` what clients are told to connect to for each name (a listener not named
there is advertised as bound), and `inter.broker.listener.name` (or
`security.inter.broker.protocol`) which one the nodes use among themselves. Listeners named in
`controller.listener.names` belong to a controller and are not served to clients.
"""
from __future__ import annotations

from dataclasses import dataclass

from cluster.formats.config import BrokerConfig, ConfigError, parse_listener

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's SecurityProtocol ids, as a RegisterBrokerRecord's endpoints carry them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    host: str
    port: int  # 0: a free port the OS picks
    security_protocol: str


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    """listener.security.protocol.map as {listener name: security protocol}; a protocol's own name
    maps to it unless the map says otherwise, as in Kafka's default map."""
    mapping = {protocol: protocol for protocol in SECURITY_PROTOCOLS}
    for pair in config.get("listener.security.protocol.map").split(","):
        if not pair.strip():
            continue
        name, separator, protocol = pair.strip().partition(":")
        protocol = protocol.strip().upper()
        if not separator or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {pair.strip()!r} is not NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def security_protocol_of(config: BrokerConfig, name: str) -> str:
    mapping = protocol_map(config)
    protocol = mapping.get(name.upper())
    if protocol is None:
        raise ConfigError(f"listener {name} has no security protocol in listener.security.protocol.map "
                          f"({config.get('listener.security.protocol.map')})")
    return protocol


def _controller_names(config: BrokerConfig) -> set[str]:
    return {n.strip().upper() for n in config.get("controller.listener.names").split(",") if n.strip()}


def broker_listeners(config: BrokerConfig) -> list[ListenerSpec]:
    """Every listener this node serves to clients and peers, in the order `listeners` names them."""
    controllers = _controller_names(config)
    specs = []
    for spec in config.get("listeners").split(","):
        if not spec.strip():
            continue
        name, host, port = parse_listener(spec)
        if name.upper() in controllers:
            continue
        if any(s.name == name.upper() for s in specs):
            raise ConfigError(f"listeners={config.get('listeners')} names {name} twice")
        specs.append(ListenerSpec(name.upper(), host, port, security_protocol_of(config, name)))
    if not specs:
        raise ConfigError(f"listeners={config.get('listeners')} has no listener for clients "
                          f"(controller.listener.names={config.get('controller.listener.names')})")
    return specs


def advertised_listeners(config: BrokerConfig, bound_ports: dict[str, int]) -> list[ListenerSpec]:
    """What clients are told for each listener served: its advertised address, else the address it
    is bound to (a wildcard host advertised as 127.0.0.1), with the port it got."""
    advertised = {}
    for spec in config.get("advertised.listeners").split(","):
        if spec.strip():
            name, host, port = parse_listener(spec)
            advertised[name.upper()] = (host, port)
    specs = []
    for listener in broker_listeners(config):
        host, port = advertised.get(listener.name, (listener.host, 0))
        if host in _WILDCARD_HOSTS:
            host = "127.0.0.1"
        specs.append(ListenerSpec(listener.name, host, port or bound_ports[listener.name],
                                  listener.security_protocol))
    return specs


def inter_broker_listener_name(config: BrokerConfig) -> str:
    """inter.broker.listener.name, else the listener named after security.inter.broker.protocol, else
    (when the node has no such listener) its first: kraftwerk does not refuse a node whose
    listeners are all secured for lack of a PLAINTEXT one, as Kafka does."""
    names = [listener.name for listener in broker_listeners(config)]
    configured = config.get("inter.broker.listener.name").strip().upper()
    if configured:
        if configured not in names:
            raise ConfigError(f"inter.broker.listener.name={configured} is not among listeners={config.get('listeners')}")
        return configured
    by_protocol = config.get("security.inter.broker.protocol").strip().upper()
    return by_protocol if by_protocol in names else names[0]
