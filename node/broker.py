"""The broker's state: its metadata image, the partitions it hosts, its controller link."""
from __future__ import annotations

import logging
import time
import uuid

from cluster.formats.config import BrokerConfig
from cluster.formats.listeners import ListenerSpec, inter_broker_listener_name
from cluster.formats.image import MetadataImage, PartitionInfo, TopicInfo
from cluster.runtime.tls import control_channel_tls
from node.security.authorizer import Authorizer
from node.faults import Faults
from node.fetch_sessions import FetchSessionCache
from node.groups.coordinator import GroupCoordinator
from node.log_cleaner import LogCleaner
from node.metadata_sync import MetadataSync
from node.peer_client import PeerClient
from node.producer_state import ProducerIdAllocator
from node.replica_fetcher import ReplicaFetchers
from node.replica_manager import ReplicaManager
from node.security.peer_links import PeerLinks
from node.replication_throttle import LEADER, ReplicationThrottle
from node.share.manager import SharePartitionManager
from node.share.sessions import ShareSessionCache
from node.share_coordinator.coordinator import ShareCoordinator
from node.share_coordinator.persister import CoordinatorPersister
from node.transactions.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

APPLY_TIMEOUT_S = 30.0


def apply_timeout_s(timeout_ms: int) -> float:
    """How long an admin request waits for this node to apply its change: the request's own
    timeout_ms, or APPLY_TIMEOUT_S when it gives none."""
    return timeout_ms / 1000 if timeout_ms > 0 else APPLY_TIMEOUT_S


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config.node_id
        self.incarnation_id = uuid.uuid4()
        self.log_dir = config.log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.image = MetadataImage()
        self.faults = Faults()
        self.replicas = ReplicaManager(self)
        self.metadata = MetadataSync(self)
        self.producer_ids = ProducerIdAllocator(self)
        self.groups = GroupCoordinator(self)
        self.transactions = TransactionCoordinator(self)
        self.share_coordinator = ShareCoordinator(self)
        # Where share-partition state is kept (node.share_coordinator.state.SharePersister); None
        # keeps it in this node's memory only.
        self.share_persister = CoordinatorPersister(self)
        self.share_partitions = SharePartitionManager(self)
        self.share_sessions = ShareSessionCache(config.get_int("group.share.max.share.sessions"),
                                                config.get_int("group.share.session.timeout.ms"))
        self.peers = PeerClient(self)
        self.cleaner = LogCleaner(self)
        self.fetchers = ReplicaFetchers(self)
        self.leader_throttle = ReplicationThrottle(self, LEADER)
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"),
                                                config.get_int("min.incremental.fetch.session.eviction.ms"),
                                                keep_reading=self.replicas.follower_outside_isr)
        # What clients are told for each listener this node serves, by name (the first is the
        # default), and the listener the nodes use among themselves.
        self.listeners: dict[str, ListenerSpec] = {}
        self.inter_broker_listener = inter_broker_listener_name(config)
        self.peer_links = PeerLinks(config, self.inter_broker_listener)
        # Mutual TLS on the control channel (the controller link, the admin port) when the
        # controller listener is secured, else None.
        self.control_tls = control_channel_tls(config)
        # node.security.authorizer: Kafka's StandardAuthorizer when authorizer.class.name is set, else None
        self.authorizer = Authorizer.from_config(config)
        self.metadata_answers = {}  # node.apis.metadata's encoded answers, by listener
        self.started_ms = int(time.time() * 1000)

    # --- lifecycle ---

    async def start(self, advertised: list[ListenerSpec]) -> None:
        self.listeners = {listener.name: listener for listener in advertised}
        self.metadata.load_local_log()
        await self.replicas.reconcile()
        self.metadata.applied_offset = self.image.offset
        await self.metadata.start()

    async def close(self) -> None:
        self.transactions.close()
        self.share_partitions.close()
        self.peers.close()
        await self.fetchers.close()
        await self.metadata.close()
        self.replicas.close()

    # --- metadata queries the APIs share ---

    @property
    def cluster_id(self) -> str | None:
        return self.image.cluster_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.image.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.image.topics_by_id.get(topic_id)

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self.image.topics.get(topic)
        return info.partitions.get(index) if info else None

    def is_alive(self, node_id: int) -> bool:
        if node_id == self.node_id:
            return True
        broker = self.image.brokers.get(node_id)
        return broker is not None and not broker.fenced

    def endpoint_of(self, node_id: int, listener: str | None = None) -> tuple[str, int, str | None] | None:
        """(host, port, rack) of node_id's `listener` (by default this node's first): what a client
        that came in on that listener must use. None when the node is not alive or has no such
        listener (as Kafka leaves out a broker without the client's listener)."""
        if node_id == self.node_id and self.listeners:
            own = self.listeners.get(listener) if listener else next(iter(self.listeners.values()))
            return (own.host, own.port, self.config.get("broker.rack") or None) if own else None
        broker = self.image.brokers.get(node_id)
        if broker is None or broker.fenced or not broker.endpoints:
            return None
        if listener is None:
            listener = next(iter(self.listeners), None)
        endpoint = next((e for e in broker.endpoints if e.name == listener), None)
        if endpoint is None:
            return None
        return endpoint.host, endpoint.port, broker.rack

    def peer_endpoint(self, node_id: int) -> tuple[str, int, str | None] | None:
        """Where this node reaches node_id: its inter-broker listener."""
        return self.endpoint_of(node_id, self.inter_broker_listener)

    def live_broker_ids(self) -> list[int]:
        ids = {b.node_id for b in self.image.brokers.values() if not b.fenced}
        ids.add(self.node_id)
        return sorted(ids)

    def topic_configs(self, topic: str) -> dict[str, str]:
        """Effective topic configs: broker defaults overlaid with the topic's own."""
        configs = self.config.topic_defaults()
        configs.update(self.image.topic_configs(topic))
        return configs

    def topic_config(self, topic: str, name: str) -> str:
        """One effective topic config: the topic's own, else the broker's default."""
        value = self.image.topic_configs(topic).get(name)
        return self.config.topic_default(name) if value is None else value

    # --- controller round trips for admin requests ---

    async def call_controller(self, op: str, *, apply_timeout_s: float = APPLY_TIMEOUT_S, **args) -> dict:
        """Forward an operation; answered once this node has applied what it wrote (its image and
        the partitions it hosts), waiting at most apply_timeout_s for that."""
        reply = await self.metadata.call_controller(op, **args)
        if "metadata_offset" in reply:
            await self.metadata.wait_for_offset(reply["metadata_offset"], apply_timeout_s)
        return reply

    def now_ms(self) -> int:
        return int(time.time() * 1000)
