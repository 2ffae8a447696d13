"""The commands that carry out a docker node's network faults inside its own network namespace.

Isolation uses policy routing, which needs nothing from the kernel beyond what every container
network uses: `blackhole` rules for a party's address, from it and to it. A packet from a party
finds no route in and is dropped; one to it is never sent; and the kernel no longer answers the
party's ARP requests (an ARP request is routed like a packet from its sender). The kernel would
still probe the neighbour entry it holds for the party, so that entry is replaced by a fixed one,
which is never probed: nothing at all is sent to a party across the cut. For those rules to see packets addressed to the node itself, the rule that looks up
the `local` table moves from preference 0 to LOCAL_PREFERENCE, after them.

"clients" drops every packet that comes in on the network interface, except from the controller
and the peers not cut off: a client's connection gets no further than its first packet.

Delay is `tc netem` on the node's interface, where the kernel has the netem qdisc.
"""
from __future__ import annotations

INTERFACE = "eth0"  # a container's interface on the cluster network, its only one
CUT_PREFERENCE = 10
ALLOW_PREFERENCE = 15
CLIENTS_PREFERENCE = 20
LOCAL_PREFERENCE = 100
NOWHERE = "02:00:00:00:00:00"  # the link address a cut party's fixed neighbour entry gives it
NETEM_MISSING = "qdisc kind is unknown"  # tc's answer where the kernel has no netem


def _clear_rules() -> list[str]:
    return [*(f"while ip rule del pref {preference} 2>/dev/null; do :; done"
              for preference in (CUT_PREFERENCE, ALLOW_PREFERENCE, CLIENTS_PREFERENCE)),
            f"for address in $(ip neigh show dev {INTERFACE} nud permanent | cut -d' ' -f1); do "
            f"ip neigh del $address dev {INTERFACE}; done"]


def _local_table_last() -> list[str]:
    return [f"if ip rule show pref 0 | grep -q lookup; then ip rule add pref {LOCAL_PREFERENCE} lookup local; "
            f"ip rule del pref 0; fi"]


def isolation_commands(infrastructure: dict[str | int, str], parties: list[str | int]) -> list[str]:
    """Shell commands that replace any earlier isolation with a cut from `parties`; infrastructure
    maps "controller" and each peer node id to its address."""
    unknown = [p for p in parties if p not in infrastructure and p != "clients"]
    if unknown:
        raise ValueError(f"cannot isolate from {unknown[0]!r}: expected controller, clients or a peer node id")
    commands = _local_table_last() + _clear_rules()
    for party in parties:
        if party != "clients":
            address = infrastructure[party]
            commands += [f"ip rule add pref {CUT_PREFERENCE} from {address} blackhole",
                         f"ip rule add pref {CUT_PREFERENCE} to {address} blackhole",
                         f"ip neigh replace {address} lladdr {NOWHERE} dev {INTERFACE} nud permanent"]
    if "clients" in parties:
        commands += [f"ip rule add pref {ALLOW_PREFERENCE} from {address} goto {LOCAL_PREFERENCE}"
                     for party, address in infrastructure.items() if party not in parties]
        commands.append(f"ip rule add pref {CLIENTS_PREFERENCE} iif {INTERFACE} blackhole")
    return commands


def delay_commands(delay_ms: int) -> list[str]:
    """netem on the root qdisc: every packet the node sends waits delay_ms; 0 removes it."""
    if delay_ms <= 0:
        return [f"tc qdisc del dev {INTERFACE} root 2>/dev/null || true"]
    return [f"tc qdisc replace dev {INTERFACE} root netem delay {int(delay_ms)}ms"]


def heal_commands(gateway: str) -> list[str]:
    """Commands that end isolation and delay. The node then sends one datagram to the network's
    gateway, after an ARP request for it: the host, whose own ARP requests a "clients" cut dropped,
    learns the node's link address from that request instead of refusing connections to it
    (EHOSTUNREACH) until its next attempt to resolve it."""
    announce = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'', ('{gateway}', 9))"
    return [*_clear_rules(), *delay_commands(0), f"ip neigh del {gateway} dev {INTERFACE} 2>/dev/null || true",
            f'python3 -c "{announce}"']
