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
    "process.roles": "",
    "controller.address": "",
    "controller.quorum.bootstrap.servers": "",
    "controller.quorum.voters": "",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "",
    "inter.broker.listener.name": "",
    "security.inter.broker.protocol": "PLAINTEXT",
    "broker.rack": "",
    "auto.create.topics.enable": "true",
    "authorizer.class.name": "", "super.users": "", "allow.everyone.if.no.acl.found": "false",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "quota.window.num": "11", "quota.window.size.seconds": "1", "max.connection.creation.rate": "2147483647",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": "604800000",
    "log.retention.ms": "604800000",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.index.interval.bytes": "4096",
    "log.message.timestamp.type": "CreateTime",
    "log.cleanup.policy": "delete",
    "log.cleaner.enable": "true",
    "log.cleaner.threads": "1",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.max.compaction.lag.ms": "9223372036854775807",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
    # Kafka: GSSAPI, which kraftwerk does not serve. OAUTHBEARER's unsecured tokens only when listed.
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "connections.max.reauth.ms": "0",
    # Kafka: 30000; a follower that stops catching up leaves the ISR sooner, so acks=all stalls less.
    "replica.lag.time.max.ms": "10000",
    # Kafka's: how long a follower's Fetch waits at its leader for new data, and how long the
    # follower waits for any answer before it reconnects (a network cut can stall a connection).
    "replica.fetch.wait.max.ms": "500",
    "replica.socket.timeout.ms": "30000",
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
    # KIP-848 consumer groups. Kafka: 45000, 5000 and minimums of 45000 and 5000; a member hears of a
    # new assignment on its next heartbeat, so a shorter interval makes rebalances of a dev cluster
    # take well under a second, and a dead member's partitions move sooner.
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.max.size": "2147483647",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.migration.policy": "bidirectional",
    "group.coordinator.rebalance.protocols": "classic,consumer,share",
    # KIP-932 share groups; the same shortening as consumer groups'.
    "group.share.session.timeout.ms": "10000",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.max.session.timeout.ms": "60000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.max.heartbeat.interval.ms": "15000",
    "group.share.max.size": "200",
    "group.share.record.lock.duration.ms": "30000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.max.record.lock.duration.ms": "3600000",
    "group.share.delivery.count.limit": "5",
    "group.share.partition.max.record.locks": "2000",
    "group.share.max.share.sessions": "2000",
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.state.topic.segment.bytes": "104857600",
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "offset.metadata.max.bytes": "4096",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.commit.timeout.ms": "5000",
    "request.timeout.ms": "30000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "transaction.partition.verification.enable": "true",
    # Replication throttles (bytes/s); Kafka's default, Long.MAX_VALUE, is no throttle.
    "leader.replication.throttled.rate": "9223372036854775807",
    "follower.replication.throttled.rate": "9223372036854775807",
    # Fetch sessions (KIP-227) a node keeps, and how long one must be unused before a new one may take its place.
    "max.incremental.fetch.session.cache.slots": "1000",
    "min.incremental.fetch.session.eviction.ms": "120000",
    # TLS (node/security/tls.py), Kafka's names and defaults; each may be set for one listener
    # as listener.name.<listener, lowercased>.ssl.*. kraftwerk reads PEM and PKCS12 stores, not JKS.
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.client.auth": "none",
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.keystore.key": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.key.password": "",
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.truststore.certificates": "",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.principal.mapping.rules": "DEFAULT",
}

# Kafka's PASSWORD-type broker settings: DescribeConfigs reports them as sensitive, without a value.
SENSITIVE_CONFIGS = {"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
                     "ssl.keystore.certificate.chain", "ssl.truststore.certificates"}


def is_sensitive(name: str) -> bool:
    """Whether a broker setting, or its listener.name.<listener>. form, is one of SENSITIVE_CONFIGS."""
    if name.startswith("listener.name."):
        name = name.split(".", 3)[-1]
    return name in SENSITIVE_CONFIGS

# Not Kafka's: the port of a node's admin listener (fault injection, replica states); 0 picks a free one.
ADMIN_PORT_CONFIG = "kraftwerk.admin.port"

# Topic config name -> the broker config that supplies its default.
TOPIC_CONFIG_DEFAULTS_FROM_BROKER: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
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
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "preallocate": "false",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "message.downconversion.enable": "true",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}


def valid_throttled_replicas(value: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: `*`, or comma-separated `partition:node` pairs."""
    if value.strip() == "*":
        return True
    for entry in filter(None, (e.strip() for e in value.split(","))):
        partition, colon, node = entry.partition(":")
        if not (colon and partition.strip().isdigit() and node.strip().isdigit()):
            return False
    return True


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


class ConfigError(ValueError):
    """A configuration kraftwerk cannot run, with a message for the person who wrote it."""


class BrokerConfig:
    """Typed access to broker properties, falling back to BROKER_DEFAULTS."""

    def __init__(self, overrides: dict[str, str] | None = None):
        self.values = dict(BROKER_DEFAULTS)
        self.values.update(overrides or {})
        self._topic_defaults: dict[str, str] | None = None

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

    @property
    def metadata_log_dir(self) -> Path:
        """Where `__cluster_metadata` lives: metadata.log.dir, else the first log dir, as in Kafka."""
        return Path(self.get("metadata.log.dir").strip()) if self.get("metadata.log.dir").strip() else self.log_dir

    @property
    def process_roles(self) -> set[str]:
        """Kafka's process.roles: broker, controller or both; empty when not set (a broker)."""
        roles = {r.strip() for r in self.get("process.roles").split(",") if r.strip()}
        if not roles <= {"broker", "controller"}:
            raise ConfigError(f"process.roles={self.get('process.roles')}: each role must be broker or controller")
        return roles

    def _listeners(self, key: str) -> list[tuple[str, str, int]]:
        return [parse_listener(spec) for spec in self.get(key).split(",") if spec.strip()]

    def _controller_listener_names(self) -> set[str]:
        return {n.strip() for n in self.get("controller.listener.names").split(",") if n.strip()}

    def controller_listener(self) -> tuple[str, str, int]:
        """(name, host, port) of the listener named first in controller.listener.names."""
        names = self._controller_listener_names()
        found = [l for l in self._listeners("listeners") if l[0] in names]
        if not found:
            raise ConfigError(f"a controller needs a listener named in controller.listener.names "
                              f"({self.get('controller.listener.names')}) in listeners={self.get('listeners')}")
        return found[0]

    def controller_addresses(self) -> list[tuple[str, int]]:
        """Where the controllers are, as (host, port), in the order a node tries them: our
        `controller.address` (one host:port, or several comma-separated), else Kafka's
        controller.quorum.bootstrap.servers, else the controller.quorum.voters' addresses; [] when
        none is set. A node follows whichever of them is the quorum's active controller."""
        own = _address_list(self.get("controller.address"))
        if own:
            return [_host_port(spec, "controller.address") for spec in own]
        servers = _address_list(self.get("controller.quorum.bootstrap.servers"))
        if servers:
            return [_host_port(spec, "controller.quorum.bootstrap.servers") for spec in servers]
        return [(host, port) for _, host, port in self.quorum_voters()]

    def quorum_voters(self) -> list[tuple[int, str, int]]:
        """controller.quorum.voters as (id, host, port), in the order given."""
        voters = []
        for spec in _address_list(self.get("controller.quorum.voters")):
            node_id, at, address = spec.partition("@")
            host, _, port = address.rpartition(":")
            if not at or not node_id.strip().isdigit() or not port.isdigit():
                raise ConfigError(f"controller.quorum.voters: {spec!r} is not id@host:port")
            voters.append((int(node_id), host.strip("[]"), int(port)))
        if len({voter[0] for voter in voters}) < len(voters):
            raise ConfigError(f"controller.quorum.voters={self.get('controller.quorum.voters')} names a voter id "
                              f"more than once")
        return voters

    def check_roles(self) -> None:
        """Refuse, as Kafka does, role settings that cannot work (and combined mode with several voters,
        which kraftwerk does not run yet)."""
        roles = self.process_roles
        addresses = self.controller_addresses()
        if "controller" in roles:
            self.controller_listener()
            voters = self.quorum_voters()
            if voters and self.node_id not in {voter[0] for voter in voters}:
                raise ConfigError(f"If process.roles contains the controller role, the node id {self.node_id} "
                                  f"must be included in the set of voters "
                                  f"controller.quorum.voters={self.get('controller.quorum.voters')}")
            if "broker" in roles and len(voters) > 1:
                raise ConfigError(f"controller.quorum.voters={self.get('controller.quorum.voters')} names "
                                  f"{len(voters)} voters: kraftwerk runs combined mode (process.roles=broker,"
                                  f"controller) with this node's controller as the only voter; run the quorum's "
                                  f"controllers with process.roles=controller, or `kraftwerk up --controllers 3`")
        elif roles and not addresses:
            raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must contain the "
                              "set of bootstrap controllers or controller.quorum.voters must contain a parseable "
                              "set of voters.")

    def check_replica_fetch(self) -> None:
        """Refuse, as Kafka does, replica fetch timings that cannot work."""
        wait_ms = self.get_int("replica.fetch.wait.max.ms")
        if wait_ms > self.get_int("replica.socket.timeout.ms"):
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                              "to prevent unnecessary socket timeouts")
        if wait_ms > self.get_int("replica.lag.time.max.ms"):
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to "
                              "replica.lag.time.max.ms to prevent frequent changes in ISR")

    def topic_defaults(self) -> dict[str, str]:
        """A topic's configs where it sets none (a new dict each call: callers overlay their own).
        Built once: the broker settings they come from are fixed once the process has started,
        and every produce request reads them."""
        return dict(self._built_topic_defaults())

    def topic_default(self, name: str) -> str:
        """One topic config's default, without copying them all (asked on every acks=all write)."""
        return self._built_topic_defaults()[name]

    def _built_topic_defaults(self) -> dict[str, str]:
        if self._topic_defaults is None:
            self._topic_defaults = dict(TOPIC_CONFIG_FIXED_DEFAULTS)
            for topic_name, broker_name in TOPIC_CONFIG_DEFAULTS_FROM_BROKER.items():
                self._topic_defaults[topic_name] = self.get(broker_name)
        return self._topic_defaults


def _address_list(value: str) -> list[str]:
    return [spec.strip() for spec in value.split(",") if spec.strip()]


def _host_port(spec: str, setting: str) -> tuple[str, int]:
    """'host:port' (or '[::1]:port') -> (host, port)."""
    host, _, port = spec.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{setting}: {spec!r} is not host:port")
    return host.strip("[]"), int(port)


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> ('PLAINTEXT', host, port)."""
    name, _, address = spec.strip().partition("://")
    if not address:
        name, address = "PLAINTEXT", spec.strip()
    host, _, port = address.rpartition(":")
    return name, host.strip("[]"), int(port)
