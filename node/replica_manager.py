"""The partitions this node hosts: their logs, created and deleted as the metadata image says."""
from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import AsyncIterator, Callable, Collection, Iterable, Iterator

from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataDelta
from cluster.formats.metadata_log import METADATA_PARTITION_DIR
from cluster.formats.offset_checkpoint import HIGH_WATERMARK_CHECKPOINT, read_offset_checkpoint, write_offset_checkpoint
from cluster.formats.partition_dirs import DELETED_DIR_SUFFIX, parse_partition_dir_name
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.runtime.time_slices import TimeSlice, gently
from cluster.runtime.timed_wait import result_within
from node.isr_members import IsrMembers
from node.groups.placement import OFFSETS_TOPIC
from node.producer_state import PartitionProducers

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


def _now_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class FollowerProgress:
    """What a leader knows of one follower, as Kafka's Replica state: when it was last caught up."""

    caught_up_ms: float
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = -1

    def fetched(self, fetch_offset: int, leader_end: int, now_ms: float) -> None:
        # Caught up now if it has everything; caught up as of its previous fetch if it has
        # everything the leader had then (Kafka's Replica.updateFetchStateOrThrow).
        if fetch_offset >= leader_end:
            self.caught_up_ms = now_ms
        elif fetch_offset >= self.leader_end_at_last_fetch:
            self.caught_up_ms = max(self.caught_up_ms, self.last_fetch_ms)
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.producers: dict[tuple[str, int], PartitionProducers] = {}
        # Leader side of replication: each follower's log end offset, and acks=all produce
        # requests waiting for the high watermark to pass their last offset.
        self.follower_offsets: dict[tuple[str, int], dict[int, int]] = {}
        self._commit_waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = {}
        # ISRs asked of the controller and not yet in the image. Until a change lands, the high
        # watermark counts the union of both (Kafka's "maximal ISR", KIP-497): a replica being
        # added may be elected the moment the controller commits it, so nothing it lacks may be
        # acknowledged meanwhile.
        self._isr_changes: dict[tuple[str, int], list[int]] = {}
        self._leader_epochs: dict[tuple[str, int], int] = {}
        # Per led partition: our log end offset when this term began (Kafka's leaderEpochStartOffset).
        # A follower below it may lack writes acknowledged in the last term, even above our HW.
        self.epoch_start_offsets: dict[tuple[str, int], int] = {}
        # Per led partition, per follower: when it was last caught up (for ISR shrink).
        self.progress: dict[tuple[str, int], dict[int, FollowerProgress]] = {}
        self.isr_members = IsrMembers()
        # Topic names at the last reconcile, to tell deletions apart from topics not seen yet.
        self._known_topics: set[str] | None = None
        # Whether partition directories no topic owns have been looked for since the controller's
        # metadata came (topics deleted while this node was down leave such directories).
        self._orphans_checked = False
        # Fetch requests parked until one of their partitions gets new data.
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        # High watermarks as last checkpointed, for logs opened after a restart.
        self._checkpoint_path = Path(broker.log_dir) / HIGH_WATERMARK_CHECKPOINT
        self._checkpointed = read_offset_checkpoint(self._checkpoint_path)
        self._checkpoint_writing = threading.Lock()

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

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
        to_open: dict[tuple[str, int], None] = {}  # (ordered, without repeats)
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
            await self._remove_orphan_dirs(set(self.logs))
            # Once after the controller's metadata came: directories of topics deleted while this
            # node was down; later deletions remove their own.
            self._orphans_checked = delta is not None
        self._update_coordinated_partitions()

    def _keys_to_reconcile(self, delta: MetadataDelta | None) -> Iterator[tuple[str, int]]:
        image = self.broker.image
        if delta is None:
            yield from ((topic.name, index) for topic in list(image.topics.values()) for index in topic.partitions)
            yield from list(self.logs)
            return
        for topic_id, index in delta.partitions:
            topic = image.topics_by_id.get(topic_id)
            if topic is not None:
                yield topic.name, index
        reconfigured = delta.removed_topics | delta.config_topics
        if reconfigured:
            yield from [key for key in self.logs if key[0] in reconfigured or None in reconfigured]

    def _reconcile_one(self, key: tuple[str, int], configs: dict[str, LogConfig],
                       to_open: dict[tuple[str, int], None], to_delete: list[PartitionLog]) -> None:
        topic, info = self.broker.topic(key[0]), self.broker.partition(*key)
        hosted = info is not None and self.broker.node_id in info.replicas
        partition_log = self.logs.get(key)
        if partition_log is not None and (not hosted or partition_log.topic_id not in (None, topic.topic_id)):
            # Gone from here, or the same name is a new topic (deleted and re-created): the old data goes.
            to_delete.append(self._remove_log(key))
            partition_log = None
        if not hosted:
            return
        if key[0] not in configs:
            configs[key[0]] = LogConfig.from_topic_configs(self.broker.topic_configs(key[0]))
        if partition_log is None:
            to_open[key] = None
        else:
            partition_log.config = configs[key[0]]
            self._take_term(key, info, partition_log)

    async def _open_logs(self, keys: list[tuple[str, int]], configs: dict[str, LogConfig],
                         time_slice: TimeSlice) -> None:
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

    def _open_chunk(self, chunk: list) -> list[tuple[tuple[str, int], PartitionLog, PartitionProducers]]:
        """In a worker thread: open the logs of a chunk; a log this node leads starts its term's epoch,
        so that taking the term on the event loop writes no file."""
        opened = []
        for key, topic_id, config, info in chunk:
            directory = self.broker.log_dir / f"{key[0]}-{key[1]}"
            partition_log = PartitionLog(directory, topic_id=topic_id, config=config)
            if partition_log.topic_id not in (None, topic_id):
                partition_log.delete()
                partition_log = PartitionLog(directory, topic_id=topic_id, config=config)
            if info.leader == self.broker.node_id:
                self._start_epoch(partition_log, info.leader_epoch)
            opened.append((key, partition_log, PartitionProducers.from_log(partition_log)))
        return opened

    def _adopt_log(self, key: tuple[str, int], partition_log: PartitionLog, producers: PartitionProducers) -> None:
        info = self.broker.partition(*key)
        if len(info.replicas) > 1:
            # A replica's log may end in writes that were never committed: its high watermark
            # starts where the last checkpoint put it, as in Kafka, and peers raise it from there.
            checkpointed = self._checkpointed.get(key, partition_log.log_start_offset)
            partition_log.high_watermark = max(partition_log.log_start_offset,
                                               min(checkpointed, partition_log.log_end_offset))
        self.logs[key] = partition_log
        self.producers[key] = producers
        self._take_term(key, info, partition_log)

    def term_of(self, key: tuple[str, int]) -> int | None:
        """The leader epoch this node last took for a hosted partition (None before its log is open)."""
        return self._leader_epochs.get(key)

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

    def _take_term(self, key: tuple[str, int], info, partition_log: PartitionLog) -> None:
        """Act on the partition's replicas, leader and epoch as the image now has them."""
        partition_log.auto_high_watermark = len(info.replicas) == 1
        if self._leader_epochs.get(key) != info.leader_epoch:
            # A new term: what followers told an earlier leader says nothing about this one.
            self._leader_epochs[key] = info.leader_epoch
            self.follower_offsets.pop(key, None)
            # acks=all writes of an earlier term may be truncated by now: never let a later term's
            # high watermark answer them (Kafka fails them with NOT_LEADER_OR_FOLLOWER).
            self._fail_commit_waiters(key)
            # Every follower counts as caught up when a term begins (Kafka's makeLeader).
            self.progress[key] = {f: FollowerProgress(caught_up_ms=_now_ms()) for f in info.replicas
                                  if f != self.broker.node_id}
            self.notify_append(key)  # fetches parked on it learn of the new term
            if info.leader == self.broker.node_id:
                self.epoch_start_offsets[key] = partition_log.log_end_offset
            else:
                self.epoch_start_offsets.pop(key, None)
        me = self.broker.node_id
        self.isr_members.track(key, tuple(r for r in info.isr if r != me) if info.leader == me else ())
        if info.leader == me:
            self.update_high_watermark(key)
            self._start_epoch(partition_log, info.leader_epoch)
            if len(info.isr) < len(info.replicas):
                # Those outside get back in only through fetches that read the partition, and a
                # session reads a quiet one only when told to (Kafka reads all of a follower's).
                self.broker.fetch_sessions.read_next_for(
                    [r for r in info.replicas if r not in info.isr], key[0], partition_log.topic_id, key[1])

    @staticmethod
    def _start_epoch(partition_log: PartitionLog, leader_epoch: int) -> None:
        if partition_log.latest_epoch is None or partition_log.latest_epoch < leader_epoch:
            partition_log.assign_epoch(leader_epoch, partition_log.log_end_offset)

    def producers_of(self, key: tuple[str, int]) -> PartitionProducers:
        producers = self.producers.get(key)
        if producers is None:
            producers = self.producers[key] = PartitionProducers()
        return producers

    def _remove_log(self, key: tuple[str, int]) -> PartitionLog:
        """Stop hosting a partition; the caller deletes the returned log's files."""
        partition_log = self.logs.pop(key)
        self.producers.pop(key, None)
        self.follower_offsets.pop(key, None)
        self.progress.pop(key, None)
        self.isr_members.forget(key)
        self._leader_epochs.pop(key, None)
        self.epoch_start_offsets.pop(key, None)
        self._fail_commit_waiters(key)
        log.info("deleting partition %s-%d", *key)
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(True)
        self.broker.fetch_sessions.touched(key[0], partition_log.topic_id, key[1])
        return partition_log

    async def _remove_orphan_dirs(self, wanted: set[tuple[str, int]]) -> None:
        if self.broker.metadata.log is None or not self.broker.config.controller_address():
            return  # without a controller the image may be partial: never delete data on a guess
        await asyncio.to_thread(self._remove_dirs_except, wanted)

    def _remove_dirs_except(self, wanted: set[tuple[str, int]]) -> None:
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
            self.checkpoint_high_watermarks()
        except OSError as exc:
            log.error("cannot checkpoint high watermarks: %s", exc)
        for partition_log in self.logs.values():
            partition_log.close()
        self.logs.clear()

    def checkpoint_high_watermarks(self) -> None:
        """Write every hosted partition's high watermark to replication-offset-checkpoint, if any moved."""
        offsets = self._high_watermarks_to_checkpoint()
        if offsets is not None:
            self._write_checkpoint(offsets)

    def _write_checkpoint(self, offsets: dict[tuple[str, int], int]) -> None:
        with self._checkpoint_writing:  # a periodic write in a thread may still run when the node stops
            write_offset_checkpoint(self._checkpoint_path, offsets)

    def _high_watermarks_to_checkpoint(self) -> dict[tuple[str, int], int] | None:
        offsets = {key: partition_log.high_watermark for key, partition_log in self.logs.items()}
        if offsets == self._checkpointed:
            return None
        self._checkpointed = offsets
        return offsets

    async def run_high_watermark_checkpoints(self, interval_ms: int) -> None:
        """Every replica.high.watermark.checkpoint.interval.ms, as Kafka's checkpoint task does; the
        file is written in a worker thread (one line per hosted partition)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            offsets = self._high_watermarks_to_checkpoint()
            try:
                if offsets is not None:
                    await asyncio.to_thread(self._write_checkpoint, offsets)
            except OSError as exc:
                self._checkpointed = {}  # written again next time
                log.error("cannot checkpoint high watermarks: %s", exc)

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
        offsets = self.follower_offsets.setdefault(key, {})
        moved = offsets.get(follower) != log_end_offset
        offsets[follower] = log_end_offset
        info = self.broker.partition(*key)
        partition_log = self.logs.get(key)
        if partition_log is not None:
            self._progress_of(key, follower).fetched(log_end_offset, partition_log.log_end_offset, _now_ms())
        if moved:  # (as Kafka's Partition.updateFollowerFetchState: a changed ISR is seen in _take_term)
            self.update_high_watermark(key)
        if (info is not None and partition_log is not None and follower in info.replicas
                and follower not in info.isr and self._in_sync(key, partition_log, log_end_offset)
                and self.broker.is_alive(follower) and key not in self._isr_changes):  # fenced: ineligible
            self._request_isr(key, info, sorted(set(info.isr) | {follower}), f"adding node {follower} to")

    def _in_sync(self, key: tuple[str, int], partition_log: PartitionLog, log_end_offset: int) -> bool:
        """A follower may join the ISR once it has our high watermark and everything written before
        this term began (Kafka's Partition.isFollowerInSync): our HW can lag what the last leader
        acknowledged, and a member lacking that could be elected next and lose it."""
        return log_end_offset >= max(partition_log.high_watermark, self.epoch_start_offsets.get(key, 0))

    def _progress_of(self, key: tuple[str, int], follower: int) -> FollowerProgress:
        # A follower not heard from since this term began counts as caught up when it began.
        followers = self.progress.setdefault(key, {})
        if follower not in followers:
            followers[follower] = FollowerProgress(caught_up_ms=_now_ms())
        return followers[follower]

    def _request_isr(self, key: tuple[str, int], info, isr: list[int], action: str) -> None:
        self._isr_changes[key] = isr
        asyncio.get_running_loop().create_task(self._alter_isr(key, info, isr, action))

    async def _alter_isr(self, key: tuple[str, int], info, isr: list[int], action: str) -> None:
        topic = self.broker.topic(key[0])
        try:
            reply = await self.broker.call_controller(
                "alter_partition", node_id=self.broker.node_id, topic_id=topic_id_to_kafka_string(topic.topic_id),
                partition=key[1], leader_epoch=info.leader_epoch, partition_epoch=info.partition_epoch, isr=isr)
            if reply["error_code"]:
                log.info("%s the ISR of %s-%d: error %d", action, *key, reply["error_code"])
        except Exception as exc:
            log.warning("%s the ISR of %s-%d failed: %s", action, *key, exc)
        finally:
            self._isr_changes.pop(key, None)
            self.update_high_watermark(key)

    async def run_isr_expiration(self) -> None:
        """Every replica.lag.time.max.ms / 2, drop followers that have not been caught up for
        replica.lag.time.max.ms from the ISR of partitions led here (Kafka's isr-expiration task)."""
        lag_ms = self.broker.config.get_int("replica.lag.time.max.ms")
        while True:
            await asyncio.sleep(lag_ms / 2000)
            await self.shrink_lagging_isrs(lag_ms)

    async def shrink_lagging_isrs(self, lag_ms: int) -> None:
        now_ms = _now_ms()
        lagging: dict[tuple[str, int], set[int]] = {}
        for follower in self.isr_members.followers():
            async for key in gently(self._maybe_lagging(follower, lag_ms)):
                if now_ms - self._caught_up_ms(key, follower, lag_ms) > lag_ms:
                    lagging.setdefault(key, set()).add(follower)
        for key, followers in lagging.items():
            info = self.broker.partition(*key)
            if info is None or info.leader != self.broker.node_id or len(info.isr) <= 1 or key in self._isr_changes:
                continue
            behind = [f for f in info.isr if f in followers]
            if behind:
                log.info("%s-%d: nodes %s not caught up for %d ms: shrinking the ISR", *key, behind, lag_ms)
                self._request_isr(key, info, [r for r in info.isr if r not in behind], f"removing {behind} from")

    def _maybe_lagging(self, follower: int, lag_ms: int) -> list[tuple[str, int]]:
        """The partitions led here with follower in their ISR that it may not have caught up on: a
        partition quiet in a session it used within lag_ms has it caught up as of then (see
        _caught_up_ms), so only the others are asked about; all of them, for a follower that stopped
        fetching. Set arithmetic, not a visit per partition: an idle node's cost stays flat."""
        led = self.isr_members.led_with(follower)
        by_name, by_id = self.broker.fetch_sessions.quiet_partitions(follower, lag_ms)
        candidates = led - by_name
        if by_id:
            candidates = {key for key in candidates
                          if key not in self.logs or (self.logs[key].topic_id, key[1]) not in by_id}
        return list(candidates)

    def follower_outside_isr(self, fetch, follower: int) -> bool:
        """A follower fetching a partition led here without being in its ISR: each of its fetches
        may be the one that adds it, so its fetch session reads the partition every time."""
        if follower < 0 or fetch.topic is None:
            return False
        info = self.broker.partition(fetch.topic, fetch.request.partition)
        return info is not None and info.leader == self.broker.node_id and follower not in info.isr

    def _caught_up_ms(self, key: tuple[str, int], follower: int, lag_ms: int) -> float:
        """When follower last had everything of key: from its fetches, or, for a partition quiet in
        its fetch session (not read for lack of news), from its last request in that session."""
        caught_up = self._progress_of(key, follower).caught_up_ms
        if _now_ms() - caught_up <= lag_ms:
            return caught_up
        partition_log = self.logs.get(key)
        in_session = self.broker.fetch_sessions.caught_up_ms(
            follower, key[0], partition_log.topic_id if partition_log else None, key[1])
        return caught_up if in_session is None else max(caught_up, in_session)

    def effective_min_isr(self, key: tuple[str, int], configs: dict[str, str] | None = None) -> int:
        """min.insync.replicas, but never more than there are replicas (Kafka's effectiveMinIsr).
        `configs`: the topic's configs when the caller has them already."""
        configured = int(configs["min.insync.replicas"] if configs else
                         self.broker.topic_config(key[0], "min.insync.replicas"))
        info = self.broker.partition(*key)
        return min(configured, len(info.replicas)) if info is not None else configured

    def update_high_watermark(self, key: tuple[str, int]) -> None:
        """High watermark = the smallest log end offset over the ISR; it never moves back, and it stays
        put while the ISR is below min.insync.replicas: nothing written then counts as committed
        until enough replicas have it (Kafka 3.7+, KAFKA-15583)."""
        partition_log = self.logs.get(key)
        info = self.broker.partition(*key)
        if partition_log is None or info is None or info.leader != self.broker.node_id:
            return
        if len(info.isr) < len(info.replicas) and len(info.isr) < self.effective_min_isr(key):
            return  # (a full ISR is never under it: the configs are read only when it may be)
        known = self.follower_offsets.get(key, {})
        own_end = partition_log.log_end_offset
        me = self.broker.node_id
        high_watermark = min([own_end if r == me else known.get(r, 0) for r in self._maximal_isr(key, info)],
                             default=own_end)
        if high_watermark > partition_log.high_watermark:
            partition_log.high_watermark = min(high_watermark, partition_log.log_end_offset)
            self._release_commit_waiters(key, partition_log.high_watermark)
            self.notify_append(key, high_watermark_only=True)

    def _fail_commit_waiters(self, key: tuple[str, int]) -> None:
        for _, waiter in self._commit_waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _release_commit_waiters(self, key: tuple[str, int], high_watermark: int) -> None:
        waiting = self._commit_waiters.get(key)
        if not waiting:
            return
        still = []
        for offset, waiter in waiting:
            if offset <= high_watermark:
                if not waiter.done():
                    waiter.set_result(self._enough_replicas_error(key))
            else:
                still.append((offset, waiter))
        self._commit_waiters[key] = still

    def _enough_replicas_error(self, key: tuple[str, int]) -> ErrorCode:
        """Once the high watermark covers a write: was it on min.insync.replicas copies
        (Kafka's Partition.checkEnoughReplicasReachOffset)?"""
        if len(self._maximal_isr(key)) < self.effective_min_isr(key):
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _maximal_isr(self, key: tuple[str, int], info=None) -> Collection[int]:
        """The ISR as it is or as we asked the controller to make it (Kafka's maximalIsr)."""
        info = info or self.broker.partition(*key)
        isr = info.isr if info is not None else ()
        changing = self._isr_changes.get(key)
        return set(isr) | set(changing) if changing else isr

    def commit_waiter(self, key: tuple[str, int], next_offset: int) -> asyncio.Future:
        """acks=all: a future answered NONE once the high watermark reaches next_offset with enough
        replicas in sync, or NOT_LEADER_OR_FOLLOWER if the partition goes or a new term begins.

        Registered at once, in the same step as the append it waits for: a term change can then
        never slip in between and leave it to a later term's high watermark."""
        waiter = asyncio.get_running_loop().create_future()
        partition_log = self.logs.get(key)
        if partition_log is None:
            waiter.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif partition_log.high_watermark >= next_offset:
            waiter.set_result(self._enough_replicas_error(key))
        else:
            self._commit_waiters.setdefault(key, []).append((next_offset, waiter))
        return waiter

    async def wait_for_commit(self, key: tuple[str, int], waiter: asyncio.Future, timeout_s: float) -> ErrorCode:
        """The outcome of a commit_waiter; REQUEST_TIMED_OUT if the high watermark does not come in time."""
        try:
            return await result_within(waiter, timeout_s, timed_out=ErrorCode.REQUEST_TIMED_OUT)
        finally:
            waiting = self._commit_waiters.get(key)
            if waiting:
                self._commit_waiters[key] = [(o, w) for o, w in waiting if w is not waiter]

    async def wait_until_committed(self, key: tuple[str, int], next_offset: int, timeout_s: float) -> ErrorCode:
        return await self.wait_for_commit(key, self.commit_waiter(key, next_offset), timeout_s)

    def appended_as_leader(self, key: tuple[str, int]) -> None:
        """New data in a partition led here: wake the fetches waiting on it, and move the high
        watermark, which may already be ours alone to decide (an ISR of just this node)."""
        self.notify_append(key)
        self.update_high_watermark(key)

    def notify_append(self, key: tuple[str, int], high_watermark_only: bool = False) -> None:
        """News in a partition (data, high watermark, term): wake the fetches waiting on it."""
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(True)
        partition_log = self.logs.get(key)
        self.broker.fetch_sessions.touched(key[0], partition_log.topic_id if partition_log else None, key[1],
                                           high_watermark_only)

    async def run_retention(self, interval_ms: int) -> None:
        """Delete expired segments every log.retention.check.interval.ms, as Kafka's log cleaner thread does."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for key, partition_log in list(self.logs.items()):
                start = partition_log.log_start_offset
                try:
                    partition_log.enforce_retention()
                except OSError as exc:
                    log.error("retention on %s-%d failed: %s", *key, exc)
                if partition_log.log_start_offset != start:
                    self.notify_append(key)  # a new log start offset is news to fetch sessions
