"""The partitions this node hosts: their logs, created and deleted as the metadata image says."""
from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from cluster.log import LogConfig, PartitionLog, parse_partition_dir_name, topic_id_to_kafka_string
from cluster.metadata_log import METADATA_PARTITION_DIR
from node.offsets_topic import OFFSETS_TOPIC
from node.producer_state import PartitionProducers

log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.producers: dict[tuple[str, int], PartitionProducers] = {}
        # Leader side of replication: each follower's log end offset, and acks=all produce
        # requests waiting for the high watermark to pass their last offset.
        self.follower_offsets: dict[tuple[str, int], dict[int, int]] = {}
        self._commit_waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = {}
        self._isr_changes: set[tuple[str, int]] = set()
        self._leader_epochs: dict[tuple[str, int], int] = {}
        # Topic names at the last reconcile, to tell deletions apart from topics not seen yet.
        self._known_topics: set[str] | None = None
        # Fetch requests parked until one of their partitions gets new data.
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def reconcile(self) -> None:
        """Open logs for every partition assigned here; remove logs of topics that are gone."""
        image = self.broker.image
        wanted: set[tuple[str, int]] = set()
        for topic in image.topics.values():
            for index, info in topic.partitions.items():
                if self.broker.node_id in info.replicas:
                    wanted.add((topic.name, index))
                    self._ensure_log(topic, index, info)
        for key in [k for k in self.logs if k not in wanted]:
            self._remove_log(key)
        self._remove_orphan_dirs(wanted)
        self._update_coordinated_partitions()
        self.broker.fetchers.reconcile()

    def _update_coordinated_partitions(self) -> None:
        """Load the groups of `__consumer_offsets` partitions led here; forget those led elsewhere."""
        coordinator = self.broker.groups
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        led = {index for index, info in (topic.partitions.items() if topic else ())
               if info.leader == self.broker.node_id and (OFFSETS_TOPIC, index) in self.logs}
        for partition in led - coordinator.loaded_partitions:
            coordinator.load_partition(partition, self.logs[(OFFSETS_TOPIC, partition)])
        for partition in coordinator.loaded_partitions - led:
            coordinator.unload_partition(partition)
        existing = set(self.broker.image.topics)
        if self._known_topics is not None and self._known_topics - existing:
            coordinator.forget_deleted_topics(self._known_topics - existing)
        self._known_topics = existing

    def _ensure_log(self, topic, index: int, info) -> None:
        key = (topic.name, index)
        partition_log = self.logs.get(key)
        if partition_log is not None and partition_log.topic_id not in (None, topic.topic_id):
            # Same name, new topic (deleted and re-created): the old data must go.
            self._remove_log(key)
            partition_log = None
        config = LogConfig.from_topic_configs(self.broker.topic_configs(topic.name))
        if partition_log is None:
            directory = self.broker.log_dir / f"{topic.name}-{index}"
            partition_log = PartitionLog(directory, topic_id=topic.topic_id, config=config)
            if partition_log.topic_id not in (None, topic.topic_id):
                partition_log.delete()
                partition_log = PartitionLog(directory, topic_id=topic.topic_id, config=config)
            self.logs[key] = partition_log
            self.producers[key] = PartitionProducers.from_log(partition_log)
        else:
            partition_log.config = config
        partition_log.auto_high_watermark = len(info.replicas) == 1
        if self._leader_epochs.get(key) != info.leader_epoch:
            # A new term: what followers told an earlier leader says nothing about this one.
            self._leader_epochs[key] = info.leader_epoch
            self.follower_offsets.pop(key, None)
        if info.leader == self.broker.node_id:
            self.update_high_watermark(key)
        if info.leader == self.broker.node_id and partition_log.latest_epoch != info.leader_epoch:
            if partition_log.latest_epoch is None or partition_log.latest_epoch < info.leader_epoch:
                partition_log.assign_epoch(info.leader_epoch, partition_log.log_end_offset)

    def producers_of(self, key: tuple[str, int]) -> PartitionProducers:
        producers = self.producers.get(key)
        if producers is None:
            producers = self.producers[key] = PartitionProducers()
        return producers

    def _remove_log(self, key: tuple[str, int]) -> None:
        partition_log = self.logs.pop(key)
        self.producers.pop(key, None)
        self.follower_offsets.pop(key, None)
        self._leader_epochs.pop(key, None)
        for _, waiter in self._commit_waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(False)
        log.info("deleting partition %s-%d", *key)
        partition_log.delete()
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def _remove_orphan_dirs(self, wanted: set[tuple[str, int]]) -> None:
        if self.broker.metadata.log is None or not self.broker.config.controller_address():
            return  # without a controller the image may be partial: never delete data on a guess
        for path in Path(self.broker.log_dir).iterdir():
            parsed = parse_partition_dir_name(path.name)
            if path.is_dir() and parsed and path.name != METADATA_PARTITION_DIR and parsed not in wanted:
                log.info("removing %s: its topic no longer exists", path.name)
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        for partition_log in self.logs.values():
            partition_log.close()
        self.logs.clear()

    # --- waiting for new data ---

    def new_waiter(self, keys: list[tuple[str, int]]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(future)
        return future

    def drop_waiter(self, future: asyncio.Future, keys: list[tuple[str, int]]) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters:
                waiters.discard(future)
                if not waiters:
                    del self._waiters[key]

    # --- replication, leader side ---

    def record_follower_offset(self, key: tuple[str, int], follower: int, log_end_offset: int) -> None:
        """A follower fetched from log_end_offset: it holds everything before it."""
        self.follower_offsets.setdefault(key, {})[follower] = log_end_offset
        self.update_high_watermark(key)
        info = self.broker.partition(*key)
        partition_log = self.logs.get(key)
        if (info is not None and partition_log is not None and follower in info.replicas
                and follower not in info.isr and log_end_offset >= partition_log.high_watermark
                and key not in self._isr_changes):
            self._isr_changes.add(key)
            asyncio.get_running_loop().create_task(self._add_to_isr(key, follower, info))

    async def _add_to_isr(self, key: tuple[str, int], follower: int, info) -> None:
        """A follower that caught up rejoins the ISR through the controller."""
        topic = self.broker.topic(key[0])
        try:
            reply = await self.broker.call_controller(
                "alter_partition", node_id=self.broker.node_id, topic_id=topic_id_to_kafka_string(topic.topic_id),
                partition=key[1], leader_epoch=info.leader_epoch, partition_epoch=info.partition_epoch,
                isr=sorted(set(info.isr) | {follower}))
            if reply["error_code"]:
                log.info("adding node %d to the ISR of %s-%d: error %d", follower, *key, reply["error_code"])
        except Exception as exc:
            log.warning("adding node %d to the ISR of %s-%d failed: %s", follower, *key, exc)
        finally:
            self._isr_changes.discard(key)

    def update_high_watermark(self, key: tuple[str, int]) -> None:
        """High watermark = the smallest log end offset over the ISR; it never moves back."""
        partition_log = self.logs.get(key)
        info = self.broker.partition(*key)
        if partition_log is None or info is None or info.leader != self.broker.node_id:
            return
        known = self.follower_offsets.get(key, {})
        ends = [partition_log.log_end_offset if r == self.broker.node_id else known.get(r, 0) for r in info.isr]
        high_watermark = min(ends, default=partition_log.log_end_offset)
        if high_watermark > partition_log.high_watermark:
            partition_log.high_watermark = min(high_watermark, partition_log.log_end_offset)
            self._release_commit_waiters(key, partition_log.high_watermark)
            self.notify_append(key)

    def _release_commit_waiters(self, key: tuple[str, int], high_watermark: int) -> None:
        waiting = self._commit_waiters.get(key)
        if not waiting:
            return
        still = []
        for offset, waiter in waiting:
            if offset <= high_watermark:
                if not waiter.done():
                    waiter.set_result(True)
            else:
                still.append((offset, waiter))
        self._commit_waiters[key] = still

    async def wait_until_committed(self, key: tuple[str, int], next_offset: int, timeout_s: float) -> bool:
        """acks=all: True once the high watermark reaches next_offset, False on timeout or deletion."""
        partition_log = self.logs.get(key)
        if partition_log is None:
            return False
        if partition_log.high_watermark >= next_offset:
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._commit_waiters.setdefault(key, []).append((next_offset, waiter))
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            waiting = self._commit_waiters.get(key)
            if waiting:
                self._commit_waiters[key] = [(o, w) for o, w in waiting if w is not waiter]

    def notify_append(self, key: tuple[str, int]) -> None:
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def run_retention(self, interval_ms: int) -> None:
        """Delete expired segments every log.retention.check.interval.ms, as Kafka's log cleaner thread does."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for key, partition_log in list(self.logs.items()):
                try:
                    partition_log.enforce_retention()
                except OSError as exc:
                    log.error("retention on %s-%d failed: %s", *key, exc)
