"""Replication throttles, with Kafka's config names and meaning (KIP-73).

`leader.replication.throttled.rate` and `follower.replication.throttled.rate` (bytes/s, broker
configs: `--set` or a dynamic BROKER config through IncrementalAlterConfigs, per node or as the
cluster default) cap what a leader sends to, and a follower fetches for, the throttled replicas.
Which replicas are throttled is a topic's `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas`: `partition:node` pairs (or `*` for all), where the
node is the one that throttles — the leader that serves, or the follower that fetches. As in
Kafka, a replica already in the ISR is never throttled, so a throttle slows a move, never the
replication that acks=all waits for.

Each node has one token bucket per side. A replica fetch may go over it (Kafka answers at least
one batch); the debt is paid before throttled partitions are served or fetched again.
"""
from __future__ import annotations

import time

from cluster.formats.image import CONFIG_RESOURCE_BROKER

LEADER, FOLLOWER = "leader", "follower"
UNLIMITED = (1 << 63) - 1  # Kafka's default: Long.MAX_VALUE
BURST_S = 0.05  # idle time a bucket may save up: a throttle holds from the first second of a move


def parse_throttled_replicas(value: str, node_id: int) -> set[int] | None:
    """Partitions a `*.replication.throttled.replicas` value throttles on node_id; None for all of them."""
    value = value.strip()
    if value == "*":
        return None
    partitions = set()
    for entry in filter(None, (e.strip() for e in value.split(","))):
        partition, _, node = entry.partition(":")
        if node.strip() == str(node_id):
            partitions.add(int(partition))
    return partitions


class ReplicationThrottle:
    """One side's throttle on one node: which replicas it holds back, and its token bucket."""

    def __init__(self, broker, side: str):
        self.broker = broker
        self.rate_config = f"{side}.replication.throttled.rate"
        self.replicas_config = f"{side}.replication.throttled.replicas"
        # Asked on every replica fetch: the static config is fixed once the process runs.
        self.static_rate = broker.config.get_int(self.rate_config)
        self.dynamic_resources = ((CONFIG_RESOURCE_BROKER, str(broker.node_id)), (CONFIG_RESOURCE_BROKER, ""))
        self.allowance = 0.0
        self.updated = time.monotonic()

    def rate(self) -> int:
        """This node's dynamic config, else the cluster-wide dynamic default, else the static one."""
        configs = self.broker.image.configs
        for resource in self.dynamic_resources:
            value = configs.get(resource, {}).get(self.rate_config)
            if value is not None:
                return int(value)
        return self.static_rate

    def applies(self, key: tuple[str, int], replica: int) -> bool:
        """Whether replica's copy of partition key is throttled here: listed, and not in the ISR."""
        info = self.broker.partition(*key)
        if info is None or replica in info.isr or self.rate() >= UNLIMITED:
            return False
        value = self.broker.image.topic_configs(key[0]).get(self.replicas_config, "")
        if not value:
            return False
        partitions = parse_throttled_replicas(value, self.broker.node_id)
        return partitions is None or key[1] in partitions

    def _refill(self) -> int:
        now, rate = time.monotonic(), self.rate()
        self.allowance = min(self.allowance + (now - self.updated) * rate, rate * BURST_S)
        self.updated = now
        return rate

    def exceeded(self) -> bool:
        self._refill()
        return self.allowance < 0

    def record(self, size: int) -> None:
        self._refill()
        self.allowance -= size

    def wait_s(self) -> float:
        """How long until throttled replicas may move data again."""
        rate = self._refill()
        return max(0.0, -self.allowance / rate) if rate > 0 else 1.0
