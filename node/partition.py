"""One partition this node hosts (Kafka's Partition): its log and producers, the term it last took,
and, while it leads, what it knows of its followers and the requests waiting on them.

node.replica_manager.ReplicaManager creates and removes these as the metadata image says; the
rules they follow for the ISR and the high watermark are node.isr_rules.
"""
from __future__ import annotations

import asyncio
import logging

from cluster.formats import control_records
from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from cluster.formats.partition_log import PartitionLog
from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.formats.transaction_index import AbortedTxn
from cluster.runtime.timed_wait import result_within
from node import isr_rules
from node.isr_rules import FollowerProgress, now_ms
from node.producer_state import PartitionProducers

log = logging.getLogger(__name__)


def start_epoch(partition_log: PartitionLog, leader_epoch: int) -> None:
    """A leader's log starts its term's epoch at its end (unless it has that epoch already)."""
    if partition_log.latest_epoch is None or partition_log.latest_epoch < leader_epoch:
        partition_log.assign_epoch(leader_epoch, partition_log.log_end_offset)


class Partition:
    __slots__ = ("key", "log", "producers", "leader_epoch", "epoch_start_offset", "follower_offsets",
                 "follower_log_starts", "progress", "isr_request", "_commit_waiters", "_low_watermark_waiters",
                 "_fetch_waiters", "hosted", "_broker")

    def __init__(self, key: tuple[str, int], partition_log: PartitionLog, producers: PartitionProducers, broker):
        self.key = key
        self.log = partition_log
        self.producers = producers
        self._broker = broker
        # The leader epoch last taken (None until the first): the partition is served only at it.
        self.leader_epoch: int | None = None
        # Led here: our log end offset when this term began (Kafka's leaderEpochStartOffset). A
        # follower below it may lack writes acknowledged in the last term, even above our HW.
        self.epoch_start_offset = 0
        # Led here: each follower's log end offset, and when it was last caught up (for ISR shrink).
        self.follower_offsets: dict[int, int] = {}
        # Led here: each follower's log start offset, as its fetches tell it (for DeleteRecords).
        self.follower_log_starts: dict[int, int] = {}
        self.progress: dict[int, FollowerProgress] = {}
        # The ISR asked of the controller and not yet in the image (see isr_rules.maximal_isr).
        self.isr_request: list[int] | None = None
        # acks=all produce requests waiting for the high watermark to pass their last offset.
        self._commit_waiters: list[tuple[int, asyncio.Future]] = []
        # DeleteRecords requests waiting for every live replica's log start offset to pass theirs.
        self._low_watermark_waiters: list[tuple[int, asyncio.Future]] = []
        # Fetch requests parked until this partition has news.
        self._fetch_waiters: set[asyncio.Future] | None = None
        # False once removed: the answer to an ISR change asked before then has nothing to act on.
        self.hosted = True
        # Producer state is snapshotted where Kafka takes its snapshots: at each roll, and at close.
        partition_log.on_roll = partition_log.on_close = self._snapshot_producers

    def _snapshot_producers(self, offset: int) -> None:
        if not self.producers.producers:
            return
        try:
            self.producers.write_snapshot(self.log.directory, offset)
        except OSError as exc:  # (a restart replays more of the log instead)
            log.warning("cannot write the producer snapshot of %s-%d at %d: %s", *self.key, offset, exc)

    def info(self) -> PartitionInfo | None:
        return self._broker.partition(*self.key)

    # --- terms ---

    def take_term(self, info: PartitionInfo) -> None:
        """Act on the partition's replicas, leader and epoch as the image now has them."""
        partition_log = self.log
        partition_log.auto_high_watermark = len(info.replicas) == 1
        me = self._broker.node_id
        if self.leader_epoch != info.leader_epoch:
            # A new term: what followers told an earlier leader says nothing about this one.
            self.leader_epoch = info.leader_epoch
            self.follower_offsets, self.follower_log_starts = {}, {}
            # acks=all writes of an earlier term may be truncated by now: never let a later term's
            # high watermark answer them (Kafka fails them with NOT_LEADER_OR_FOLLOWER).
            self.fail_commit_waiters()
            # Every follower counts as caught up when a term begins (Kafka's makeLeader).
            self.progress = {f: FollowerProgress(caught_up_ms=now_ms()) for f in info.replicas if f != me}
            self.notify()  # fetches parked on it learn of the new term
            self.epoch_start_offset = partition_log.log_end_offset if info.leader == me else 0
        if info.leader == me:
            self.update_high_watermark(info)
            start_epoch(partition_log, info.leader_epoch)
            if self._low_watermark_waiters:
                self._release_low_watermark_waiters()  # a follower fenced or dropped no longer holds them
            if len(info.isr) < len(info.replicas):
                # Those outside get back in only through fetches that read the partition, and a
                # session reads a quiet one only when told to (Kafka reads all of a follower's).
                self._broker.fetch_sessions.read_next_for(
                    [r for r in info.replicas if r not in info.isr], self.key[0], partition_log.topic_id, self.key[1])

    def stop_hosting(self) -> None:
        """No longer hosted here: what waits on it is answered (the caller deletes the log's files)."""
        self.hosted = False
        self.fail_commit_waiters()
        self._wake_fetches()
        self._broker.fetch_sessions.touched(self.key[0], self.log.topic_id, self.key[1])

    # --- transactions ---

    def last_stable_offset(self) -> int:
        """Where read_committed readers stop: below the first undecided transaction, and the high watermark."""
        return self.producers.stable_below(self.log.high_watermark)

    def append_marker(self, info: PartitionInfo, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, now_ms: int) -> int:
        """Led here: end a producer's transaction with a COMMIT or ABORT marker; returns the offset after
        it. Raises node.producer_state.MarkerError for a stale producer or coordinator epoch."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        marker = control_records.end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        appended = self.log.append(marker, leader_epoch=info.leader_epoch, now_ms=now_ms)
        aborted = self.producers.end_transaction(producer_id, producer_epoch, appended.first_offset, commit,
                                                 coordinator_epoch, now_ms, check=False)
        if aborted is not None:
            self.log.add_aborted_transaction(AbortedTxn(*aborted))
        self.appended_as_leader(info)
        return appended.last_offset + 1

    def track_replicated(self, data, batches) -> None:
        """Batches a follower appended: its producers' sequences and transactions, as the leader's."""
        producers = self.producers
        for position, header in batches:
            if header.producer_id >= 0:
                aborted = producers.track(data, position, header)
                if aborted is not None:
                    self.log.add_aborted_transaction(AbortedTxn(*aborted))

    # --- news for fetches ---

    def appended_as_leader(self, info: PartitionInfo | None = None) -> None:
        """New data written here as leader: wake the fetches waiting on it, and move the high
        watermark, which may already be ours alone to decide (an ISR of just this node)."""
        self.notify()
        self.update_high_watermark(info)

    def notify(self, high_watermark_only: bool = False) -> None:
        """News in the partition (data, high watermark, term): wake the fetches waiting on it."""
        if self._fetch_waiters:
            self._wake_fetches()
        self._broker.fetch_sessions.touched(self.key[0], self.log.topic_id, self.key[1], high_watermark_only)

    def _wake_fetches(self) -> None:
        waiters, self._fetch_waiters = self._fetch_waiters or (), None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def add_fetch_waiter(self, future: asyncio.Future) -> None:
        if self._fetch_waiters is None:
            self._fetch_waiters = set()
        self._fetch_waiters.add(future)

    def drop_fetch_waiter(self, future: asyncio.Future) -> None:
        if self._fetch_waiters:
            self._fetch_waiters.discard(future)
            if not self._fetch_waiters:
                self._fetch_waiters = None

    # --- the high watermark ---

    def effective_min_isr(self, info: PartitionInfo | None, configs: dict[str, str] | None = None) -> int:
        """min.insync.replicas, never more than there are replicas. `configs`: the topic's configs
        when the caller has them already."""
        configured = int(configs["min.insync.replicas"] if configs else
                         self._broker.topic_config(self.key[0], "min.insync.replicas"))
        return isr_rules.effective_min_isr(configured, info)

    def update_high_watermark(self, info: PartitionInfo | None = None) -> None:
        """Led here: raise the high watermark to what the ISR holds (isr_rules); it never moves back."""
        if info is None:
            info = self.info()
        if info is None or info.leader != self._broker.node_id:
            return
        if isr_rules.holds_high_watermark(info, self.effective_min_isr):
            return
        partition_log = self.log
        high_watermark = isr_rules.isr_high_watermark(isr_rules.maximal_isr(info, self.isr_request),
                                                      self._broker.node_id, partition_log.log_end_offset,
                                                      self.follower_offsets)
        if high_watermark > partition_log.high_watermark:
            partition_log.high_watermark = min(high_watermark, partition_log.log_end_offset)
            self.producers.high_watermark_moved(partition_log.high_watermark)
            self._release_commit_waiters(partition_log.high_watermark)
            self.notify(high_watermark_only=True)

    # --- acks=all ---

    def commit_waiter(self, next_offset: int) -> asyncio.Future:
        """acks=all: a future answered NONE once the high watermark reaches next_offset with enough
        replicas in sync, or NOT_LEADER_OR_FOLLOWER if the partition goes or a new term begins.

        Registered at once, in the same step as the append it waits for: a term change can then
        never slip in between and leave it to a later term's high watermark."""
        waiter = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= next_offset:
            waiter.set_result(self._enough_replicas_error())
        else:
            self._commit_waiters.append((next_offset, waiter))
        return waiter

    async def wait_for_commit(self, waiter: asyncio.Future, timeout_s: float) -> ErrorCode:
        """The outcome of a commit_waiter; REQUEST_TIMED_OUT if the high watermark does not come in time."""
        try:
            return await result_within(waiter, timeout_s, timed_out=ErrorCode.REQUEST_TIMED_OUT)
        finally:
            if self._commit_waiters:
                self._commit_waiters = [(o, w) for o, w in self._commit_waiters if w is not waiter]

    def fail_commit_waiters(self) -> None:
        """Every acks=all write and DeleteRecords waiting here is answered NOT_LEADER_OR_FOLLOWER."""
        waiting = self._commit_waiters + self._low_watermark_waiters
        self._commit_waiters, self._low_watermark_waiters = [], []
        for _, waiter in waiting:
            if not waiter.done():
                waiter.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _release_commit_waiters(self, high_watermark: int) -> None:
        if not self._commit_waiters:
            return
        still = []
        for offset, waiter in self._commit_waiters:
            if offset <= high_watermark:
                if not waiter.done():
                    waiter.set_result(self._enough_replicas_error())
            else:
                still.append((offset, waiter))
        self._commit_waiters = still

    def _enough_replicas_error(self) -> ErrorCode:
        info = self.info()
        return isr_rules.enough_replicas_error(isr_rules.maximal_isr(info, self.isr_request),
                                               self.effective_min_isr(info))

    # --- DeleteRecords ---

    def low_watermark(self) -> int:
        """Led here: the lowest log start offset of this replica and the followers on live nodes
        (Kafka's lowWatermarkIfLeader); -1 while such a follower has not told its own."""
        low = self.log.log_start_offset
        info = self.info()
        for follower in (info.replicas if info else ()):
            if follower != self._broker.node_id and self._broker.is_alive(follower):
                low = min(low, self.follower_log_starts.get(follower, -1))
        return low

    def low_watermark_waiter(self, offset: int) -> asyncio.Future:
        """A future answered NONE once the low watermark reaches offset, or NOT_LEADER_OR_FOLLOWER
        if the partition goes or a new term begins."""
        waiter = asyncio.get_running_loop().create_future()
        if self.low_watermark() >= offset:
            waiter.set_result(ErrorCode.NONE)
        else:
            self._low_watermark_waiters.append((offset, waiter))
        return waiter

    def forget_low_watermark_waiter(self, waiter: asyncio.Future) -> None:
        self._low_watermark_waiters = [(o, w) for o, w in self._low_watermark_waiters if w is not waiter]

    def _release_low_watermark_waiters(self) -> None:
        low = self.low_watermark()
        still = []
        for offset, waiter in self._low_watermark_waiters:
            if offset <= low:
                if not waiter.done():
                    waiter.set_result(ErrorCode.NONE)
            else:
                still.append((offset, waiter))
        self._low_watermark_waiters = still

    # --- followers, seen from the leader ---

    def record_follower_offset(self, follower: int, log_end_offset: int, info: PartitionInfo | None,
                               log_start_offset: int = -1) -> None:
        """A follower fetched from log_end_offset: it holds everything before it, from
        log_start_offset. `info`: the partition as the image has it now."""
        if self.follower_log_starts.get(follower) != log_start_offset:
            self.follower_log_starts[follower] = log_start_offset
            if self._low_watermark_waiters:
                self._release_low_watermark_waiters()
        if 0 <= log_start_offset < self.log.log_start_offset:
            # Behind our log start (it missed a DeleteRecords or retention, or dropped the answer that
            # told it): its session reads this partition again, though quiet, until it has caught up.
            self._broker.fetch_sessions.read_next_for([follower], self.key[0], self.log.topic_id, self.key[1])
        offsets = self.follower_offsets
        moved = offsets.get(follower) != log_end_offset
        offsets[follower] = log_end_offset
        partition_log = self.log
        self._progress_of(follower).fetched(log_end_offset, partition_log.log_end_offset, now_ms())
        if moved:  # (as Kafka's Partition.updateFollowerFetchState: a changed ISR is seen in take_term)
            self.update_high_watermark(info)
        if (info is not None and follower in info.replicas and follower not in info.isr
                and isr_rules.follower_in_sync(log_end_offset, partition_log.high_watermark, self.epoch_start_offset)
                and self._broker.is_alive(follower) and self.isr_request is None):  # fenced: ineligible
            self.request_isr(info, sorted(set(info.isr) | {follower}), f"adding node {follower} to")

    def _progress_of(self, follower: int) -> FollowerProgress:
        # A follower not heard from since this term began counts as caught up when it began.
        progress = self.progress.get(follower)
        if progress is None:
            progress = self.progress[follower] = FollowerProgress(caught_up_ms=now_ms())
        return progress

    def caught_up_ms(self, follower: int, lag_ms: int) -> float:
        """When follower last had everything here: from its fetches, or, for a partition quiet in
        its fetch session (not read for lack of news), from its last request in that session."""
        caught_up = self._progress_of(follower).caught_up_ms
        if not isr_rules.lagging(caught_up, now_ms(), lag_ms):
            return caught_up
        in_session = self._broker.fetch_sessions.caught_up_ms(follower, self.key[0], self.log.topic_id, self.key[1])
        return caught_up if in_session is None else max(caught_up, in_session)

    # --- ISR changes ---

    def request_isr(self, info: PartitionInfo, isr: list[int], action: str) -> None:
        self.isr_request = isr
        asyncio.get_running_loop().create_task(self._alter_isr(info, isr, action))

    async def _alter_isr(self, info: PartitionInfo, isr: list[int], action: str) -> None:
        broker = self._broker
        topic = broker.topic(self.key[0])
        try:
            reply = await broker.call_controller(
                "alter_partition", node_id=broker.node_id, topic_id=topic_id_to_kafka_string(topic.topic_id),
                partition=self.key[1], leader_epoch=info.leader_epoch, partition_epoch=info.partition_epoch, isr=isr)
            if reply["error_code"]:
                log.info("%s the ISR of %s-%d: error %d", action, *self.key, reply["error_code"])
        except Exception as exc:
            log.warning("%s the ISR of %s-%d failed: %s", action, *self.key, exc)
        finally:
            self.isr_request = None
            if self.hosted:
                self.update_high_watermark()
