"""Broker configuration under Kafka's own property names, and `server.properties` parsing."""
from __future__ import annotations

from pathlib import Path

# Kafka's defaults, except where a shorter value keeps development clusters and tests fast;
# those are marked and can be set back with the same property name.
BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "",
    "log.dirs": "/tmp/kraft-combined-logs",
    "controller.address": "",
    "controller.quorum.bootstrap.servers": "",
    "broker.rack": "",
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": "604800000",
    "log.retention.ms": "604800000",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.index.interval.bytes": "4096",
    "log.message.timestamp.type": "CreateTime",
    "log.cleanup.policy": "delete",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
    # Kafka: 30000; a follower that stops catching up leaves the ISR sooner, so acks=all stalls less.
    "replica.lag.time.max.ms": "10000",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "auto.leader.rebalance.enable": "true",
    # Kafka: 300; preferred leaders return within seconds of a node coming back.
    "leader.imbalance.check.interval.seconds": "5",
    # Kafka: 2000; a node heartbeats more often so that a cluster is ready sooner.
    "broker.heartbeat.interval.ms": "500",
    # Kafka: 9000; the controller fences a silent node (and moves its leaderships) sooner.
    "broker.session.timeout.ms": "2000",
    # Kafka: 3000; rebalances of empty groups should not slow tests down.
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "offset.metadata.max.bytes": "4096",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "1",
    "offsets.commit.timeout.ms": "5000",
}

# Not Kafka's: the port of a node's admin listener (fault injection, replica states); 0 picks a free one.
ADMIN_PORT_CONFIG = "kraftwerk.admin.port"

# Topic config name -> the broker config that supplies its default.
TOPIC_CONFIG_DEFAULTS_FROM_BROKER: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Topic configs Kafka has that take a fixed default rather than a broker one.
TOPIC_CONFIG_FIXED_DEFAULTS: dict[str, str] = {
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "max.compaction.lag.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "preallocate": "false",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "message.downconversion.enable": "true",
}


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset that Kafka's config files use: key=value or key: value, # and ! comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    return parse_properties(Path(path).read_text())


class BrokerConfig:
    """Typed access to broker properties, falling back to BROKER_DEFAULTS."""

    def __init__(self, overrides: dict[str, str] | None = None):
        self.values = dict(BROKER_DEFAULTS)
        self.values.update(overrides or {})

    def get(self, name: str) -> str:
        return self.values.get(name, "")

    def get_int(self, name: str) -> int:
        return int(self.values[name])

    def get_bool(self, name: str) -> bool:
        return self.values.get(name, "false").strip().lower() == "true"

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def log_dir(self) -> Path:
        return Path(self.get("log.dirs").split(",")[0].strip())

    def listener(self) -> tuple[str, str, int]:
        """(name, host, port) of the first listener; port 0 asks the OS for a free one."""
        return parse_listener(self.get("listeners").split(",")[0])

    def advertised_listener(self, bound_port: int) -> tuple[str, str, int]:
        advertised = self.get("advertised.listeners").strip()
        name, host, port = parse_listener(advertised.split(",")[0]) if advertised else self.listener()
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return name, host, port or bound_port

    def controller_address(self) -> tuple[str, int] | None:
        """Our `controller.address` host:port, else the first of Kafka's quorum bootstrap servers."""
        raw = self.get("controller.address") or self.get("controller.quorum.bootstrap.servers")
        if not raw.strip():
            return None
        host, _, port = raw.split(",")[0].strip().rpartition(":")
        return host, int(port)

    def topic_defaults(self) -> dict[str, str]:
        defaults = dict(TOPIC_CONFIG_FIXED_DEFAULTS)
        for topic_name, broker_name in TOPIC_CONFIG_DEFAULTS_FROM_BROKER.items():
            defaults[topic_name] = self.get(broker_name)
        return defaults


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> ('PLAINTEXT', host, port)."""
    name, _, address = spec.strip().partition("://")
    if not address:
        name, address = "PLAINTEXT", spec.strip()
    host, _, port = address.rpartition(":")
    return name, host.strip("[]"), int(port)
