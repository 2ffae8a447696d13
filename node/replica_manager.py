"""The partitions this node hosts, one node.partition.Partition each: created and deleted as the
metadata image says, their high watermarks and log start offsets checkpointed
(node.log_checkpoints), their ISRs watched for lagging followers."""
from __future__ import annotations

import asyncio
import logging
import shutil
from collections import deque
from functools import partial
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable, Iterator

from cluster.formats.image import MetadataDelta
from cluster.formats.metadata_log import METADATA_PARTITION_DIR
from cluster.formats.partition_dirs import DELETED_DIR_SUFFIX, parse_partition_dir_name
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.runtime.time_slices import TimeSlice, gently
from node import isr_rules
from node.groups.placement import OFFSETS_TOPIC
from node.isr_members import IsrMembers
from node.log_checkpoints import LogCheckpoints
from node.partition import Partition, start_epoch
from node.producer_state import PartitionProducers
from node.transactions.placement import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

# Partition logs opened per worker-thread call, and calls running at once: creating a partition is
# a handful of small files, time spent waiting on the file system rather than holding the GIL.
OPEN_CHUNK = 32
OPEN_THREADS = 4


async def in_threads(calls: Iterable[Callable]) -> AsyncIterator:
    """The results of calls, in order, each run in a worker thread, at most OPEN_THREADS at once."""
    loop = asyncio.get_running_loop()
    running: deque[asyncio.Future] = deque()
    for call in calls:
        running.append(loop.run_in_executor(None, call))
        if len(running) >= OPEN_THREADS:
            yield await running.popleft()
    while running:
        yield await running.popleft()


Key = tuple[str, int]


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        self.partitions: dict[Key, Partition] = {}
        # Which led partitions have each follower in their ISR (for ISR shrink).
        self.isr_members = IsrMembers()
        # Topic names at the last reconcile, to tell deletions apart from topics not seen yet.
        self._known_topics: set[str] | None = None
        # Whether partition directories no topic owns have been looked for since the controller's
        # metadata came (topics deleted while this node was down leave such directories).
        self._orphans_checked = False
        # High watermarks and log start offsets as last checkpointed, for logs opened after a restart.
        self.checkpoints = LogCheckpoints(broker.log_dir)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        hosted = self.partitions.get((topic, partition))
        return hosted.log if hosted is not None else None

    async def reconcile(self, delta: MetadataDelta | None = None) -> None:
        """Open logs for the partitions assigned here, remove those no longer here, take new terms
        and configs: for what `delta` says changed, or for everything (None, at start-up).

        Gives way to the event loop between partitions, and creates and deletes partition
        directories in worker threads (a new partition's files are most of its cost); the
        metadata is applied one batch after another, so nothing else touches those directories
        meanwhile. A partition is served only once its log is open and its term taken
        (check_leader answers NOT_LEADER_OR_FOLLOWER until then, as Kafka does while a broker is
        still applying a change).
        """
        time_slice = TimeSlice()
        configs: dict[str, LogConfig] = {}
        to_open: dict[Key, None] = {}  # (ordered, without repeats)
        to_delete: list[PartitionLog] = []
        async for key in gently(self._keys_to_reconcile(delta), time_slice):
            self._reconcile_one(key, configs, to_open, to_delete)
        async for _ in in_threads([partition_log.delete for partition_log in to_delete]):
            await time_slice.give_way()
        if delta is None or delta.partitions or delta.removed_topics or delta.config_topics:
            # Before the new logs open: a follower fetches each as soon as it is open, not once all
            # are. Config changes too: they may lift the throttle a fetcher is held back by.
            await self.broker.fetchers.reconcile(time_slice)
        await self._open_logs(list(to_open), configs, time_slice)
        if delta is None or delta.removed_topics or not self._orphans_checked:
            await self._remove_orphan_dirs(set(self.partitions))
            # Once after the controller's metadata came: directories of topics deleted while this
            # node was down; later deletions remove their own.
            self._orphans_checked = delta is not None
        self._update_coordinated_partitions()

    def _keys_to_reconcile(self, delta: MetadataDelta | None) -> Iterator[Key]:
        image = self.broker.image
        if delta is None:
            yield from ((topic.name, index) for topic in list(image.topics.values()) for index in topic.partitions)
            yield from list(self.partitions)
            return
        for topic_id, index in delta.partitions:
            topic = image.topics_by_id.get(topic_id)
            if topic is not None:
                yield topic.name, index
        reconfigured = delta.removed_topics | delta.config_topics
        if reconfigured:
            yield from [key for key in self.partitions if key[0] in reconfigured or None in reconfigured]

    def _reconcile_one(self, key: Key, configs: dict[str, LogConfig],
                       to_open: dict[Key, None], to_delete: list[PartitionLog]) -> None:
        topic, info = self.broker.topic(key[0]), self.broker.partition(*key)
        hosted = info is not None and self.broker.node_id in info.replicas
        partition = self.partitions.get(key)
        if partition is not None and (not hosted or partition.log.topic_id not in (None, topic.topic_id)):
            # Gone from here, or the same name is a new topic (deleted and re-created): the old data goes.
            to_delete.append(self._remove(key))
            partition = None
        if not hosted:
            return
        if key[0] not in configs:
            configs[key[0]] = LogConfig.from_topic_configs(self.broker.topic_configs(key[0]))
        if partition is None:
            to_open[key] = None
        else:
            partition.log.config = configs[key[0]]
            self._take_term(partition, info)

    async def _open_logs(self, keys: list[Key], configs: dict[str, LogConfig], time_slice: TimeSlice) -> None:
        """Open (or create) the logs of keys in worker threads, a chunk at a time; each chunk is
        served as soon as it is open."""
        chunks = (keys[i:i + OPEN_CHUNK] for i in range(0, len(keys), OPEN_CHUNK))
        calls = (partial(self._open_chunk, [(key, self.broker.topic(key[0]).topic_id, configs[key[0]],
                                             self.broker.partition(*key)) for key in chunk]) for chunk in chunks)
        async for opened in in_threads(calls):
            for key, partition_log, producers in opened:
                self._adopt_log(key, partition_log, producers)
                await time_slice.give_way()
            self.broker.fetchers.logs_opened()

    def _open_chunk(self, chunk: list) -> list[tuple[Key, PartitionLog, PartitionProducers]]:
        """In a worker thread: open the logs of a chunk; a log this node leads starts its term's epoch,
        so that taking the term on the event loop writes no file."""
        opened = []
        for key, topic_id, config, info in chunk:
            directory = self.broker.log_dir / f"{key[0]}-{key[1]}"
            partition_log = PartitionLog(directory, topic_id=topic_id, config=config)
            if partition_log.topic_id not in (None, topic_id):
                partition_log.delete()
                partition_log = PartitionLog(directory, topic_id=topic_id, config=config)
            partition_log.advance_log_start_offset(self.checkpoints.log_starts.offsets.get(key, 0))
            if info.leader == self.broker.node_id:
                start_epoch(partition_log, info.leader_epoch)
            opened.append((key, partition_log, PartitionProducers.from_log(partition_log)))
        return opened

    def _adopt_log(self, key: Key, partition_log: PartitionLog, producers: PartitionProducers) -> None:
        info = self.broker.partition(*key)
        if len(info.replicas) > 1:
            # A replica's log may end in writes that were never committed: its high watermark
            # starts where the last checkpoint put it, as in Kafka, and peers raise it from there.
            checkpointed = self.checkpoints.high_watermarks.offsets.get(key, partition_log.log_start_offset)
            partition_log.high_watermark = max(partition_log.log_start_offset,
                                               min(checkpointed, partition_log.log_end_offset))
        partition = self.partitions[key] = Partition(key, partition_log, producers, self.broker)
        self._take_term(partition, info)

    def _take_term(self, partition: Partition, info) -> None:
        partition.take_term(info)
        me = self.broker.node_id
        self.isr_members.track(partition.key, tuple(r for r in info.isr if r != me) if info.leader == me else ())

    def _update_coordinated_partitions(self) -> None:
        """Load the groups of `__consumer_offsets` partitions led here, and the transactional ids of
        `__transaction_state` and `__share_group_state` partitions; forget those led elsewhere."""
        self._update_transaction_partitions()
        self.broker.share_coordinator.follow_leadership(self.partitions)
        self.broker.share_partitions.forget_unled()
        coordinator = self.broker.groups
        topic = self.broker.image.topics.get(OFFSETS_TOPIC)
        led = {index for index, info in (topic.partitions.items() if topic else ())
               if info.leader == self.broker.node_id and (OFFSETS_TOPIC, index) in self.partitions}
        for partition in led - coordinator.loaded_partitions:
            coordinator.load_partition(partition, self.partitions[(OFFSETS_TOPIC, partition)].log)
        for partition in coordinator.loaded_partitions - led:
            coordinator.unload_partition(partition)
        existing = set(self.broker.image.topics)
        if self._known_topics is not None and self._known_topics - existing:
            coordinator.forget_deleted_topics(self._known_topics - existing)
        self._known_topics = existing
        coordinator.metadata_changed()

    def _update_transaction_partitions(self) -> None:
        """A partition is (re)loaded whenever this node takes a new term of it: the coordinator epoch
        is the leader epoch, and a deposed coordinator's markers must be refused."""
        coordinator = self.broker.transactions
        topic = self.broker.image.topics.get(TRANSACTION_STATE_TOPIC)
        led = {index: info.leader_epoch for index, info in (topic.partitions.items() if topic else ())
               if info.leader == self.broker.node_id and (TRANSACTION_STATE_TOPIC, index) in self.partitions}
        for partition, epoch in list(coordinator.coordinator_epochs.items()):
            if led.get(partition) != epoch:
                coordinator.unload_partition(partition)
        for partition, epoch in led.items():
            if partition not in coordinator.coordinator_epochs:
                coordinator.load_partition(partition, self.partitions[(TRANSACTION_STATE_TOPIC, partition)].log, epoch)

    def _remove(self, key: Key) -> PartitionLog:
        """Stop hosting a partition; the caller deletes the returned log's files."""
        partition = self.partitions.pop(key)
        self.isr_members.forget(key)
        self.broker.cleaner.forget(key)
        log.info("deleting partition %s-%d", *key)
        partition.stop_hosting()
        return partition.log

    async def _remove_orphan_dirs(self, wanted: set[Key]) -> None:
        if self.broker.metadata.log is None or not self.broker.config.controller_addresses():
            return  # without a controller the image may be partial: never delete data on a guess
        await asyncio.to_thread(self._remove_dirs_except, wanted)

    def _remove_dirs_except(self, wanted: set[Key]) -> None:
        for path in Path(self.broker.log_dir).iterdir():
            if path.name.endswith(DELETED_DIR_SUFFIX) and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)  # a deletion a crash interrupted
                continue
            parsed = parse_partition_dir_name(path.name)
            if path.is_dir() and parsed and path.name != METADATA_PARTITION_DIR and parsed not in wanted:
                log.info("removing %s: its topic no longer exists", path.name)
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        try:
            self.write_checkpoints()
        except OSError as exc:
            log.error("cannot write the offset checkpoints: %s", exc)
        for partition in self.partitions.values():
            partition.log.close()
        self.partitions.clear()

    def write_checkpoints(self) -> None:
        """Write the checkpoint files whose offsets moved, now, in this thread."""
        self.checkpoints.write(self.checkpoints.due(self.partitions))

    async def write_checkpoints_in_thread(self) -> None:
        due = self.checkpoints.due(self.partitions)
        if not due:
            return
        try:
            await asyncio.to_thread(self.checkpoints.write, due)
        except OSError as exc:
            self.checkpoints.failed(due)
            log.error("cannot write the offset checkpoints: %s", exc)

    async def run_checkpoints(self, interval_ms: int) -> None:
        """Every replica.high.watermark.checkpoint.interval.ms, as Kafka's checkpoint task does; the
        files are written in a worker thread (one line per partition)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.write_checkpoints_in_thread()

    # --- waiting for new data ---

    def new_waiter(self, keys: list[Key]) -> asyncio.Future:
        """A future set once any of keys' partitions has news."""
        future = asyncio.get_running_loop().create_future()
        partitions = self.partitions
        for key in keys:
            partition = partitions.get(key)
            if partition is not None:
                partition.add_fetch_waiter(future)
            elif not future.done():
                future.set_result(True)  # (not hosted: the fetch reads again and answers why)
        return future

    def drop_waiter(self, future: asyncio.Future, keys: list[Key]) -> None:
        partitions = self.partitions
        for key in keys:
            partition = partitions.get(key)
            if partition is not None:
                partition.drop_fetch_waiter(future)

    # --- ISR shrink ---

    async def run_isr_expiration(self) -> None:
        """Every replica.lag.time.max.ms / 2, drop followers that have not been caught up for
        replica.lag.time.max.ms from the ISR of partitions led here (Kafka's isr-expiration task)."""
        lag_ms = self.broker.config.get_int("replica.lag.time.max.ms")
        while True:
            await asyncio.sleep(lag_ms / 2000)
            await self.shrink_lagging_isrs(lag_ms)

    async def shrink_lagging_isrs(self, lag_ms: int) -> None:
        now_ms = isr_rules.now_ms()
        lagging: dict[Key, set[int]] = {}
        for follower in self.isr_members.followers():
            async for key in gently(self._maybe_lagging(follower, lag_ms)):
                partition = self.partitions.get(key)  # (gone while giving way: nothing to shrink)
                if partition is not None and isr_rules.lagging(partition.caught_up_ms(follower, lag_ms),
                                                               now_ms, lag_ms):
                    lagging.setdefault(key, set()).add(follower)
        for key, followers in lagging.items():
            info = self.broker.partition(*key)
            partition = self.partitions.get(key)
            if (partition is None or info is None or info.leader != self.broker.node_id or len(info.isr) <= 1
                    or partition.isr_request is not None):
                continue
            behind = [f for f in info.isr if f in followers]
            if behind:
                log.info("%s-%d: nodes %s not caught up for %d ms: shrinking the ISR", *key, behind, lag_ms)
                partition.request_isr(info, [r for r in info.isr if r not in behind], f"removing {behind} from")

    def _maybe_lagging(self, follower: int, lag_ms: int) -> list[Key]:
        """The partitions led here with follower in their ISR that it may not have caught up on: a
        partition quiet in a session it used within lag_ms has it caught up as of then (see
        Partition.caught_up_ms), so only the others are asked about; all of them, for a follower that
        stopped fetching. Set arithmetic, not a visit per partition: an idle node's cost stays flat."""
        led = self.isr_members.led_with(follower)
        by_name, by_id = self.broker.fetch_sessions.quiet_partitions(follower, lag_ms)
        candidates = led - by_name
        if by_id:
            candidates = {key for key in candidates
                          if key not in self.partitions or (self.partitions[key].log.topic_id, key[1]) not in by_id}
        return list(candidates)

    def follower_outside_isr(self, fetch, follower: int) -> bool:
        """A follower fetching a partition led here without being in its ISR: each of its fetches
        may be the one that adds it, so its fetch session reads the partition every time."""
        if follower < 0 or fetch.topic is None:
            return False
        info = self.broker.partition(fetch.topic, fetch.request.partition)
        return info is not None and info.leader == self.broker.node_id and follower not in info.isr

    async def run_retention(self, interval_ms: int) -> None:
        """Delete expired segments every log.retention.check.interval.ms, as Kafka's log cleaner thread does."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for key, partition in list(self.partitions.items()):
                partition_log = partition.log
                start = partition_log.log_start_offset
                try:
                    partition_log.enforce_retention()
                except OSError as exc:
                    log.error("retention on %s-%d failed: %s", *key, exc)
                if partition_log.log_start_offset != start:
                    partition.notify()  # a new log start offset is news to fetch sessions
