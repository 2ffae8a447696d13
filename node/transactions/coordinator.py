"""The transaction coordinator: the transactional ids of the `__transaction_state` partitions this node leads.

What the transaction APIs call (InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn), with Kafka's TransactionCoordinator rules and error codes. Every state
change is written to the id's partition with acks=all before it takes effect (node.transactions.state);
the markers that end a transaction are written by node.transactions.markers, after which the
transaction is complete. A node that becomes the leader of a partition replays its records and
finishes what was prepared there; the coordinator epoch is that partition's leader epoch, so
markers from a deposed coordinator are refused. An open transaction that outlives its timeout is
aborted by a timer of its own, its producer fenced by an epoch bump.
"""
from __future__ import annotations

import asyncio
import logging
import time

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError, CoordinatorLog, replay_records
from node.transactions import placement
from node.transactions.markers import MarkerWriter
from node.transactions.records import StoredTransaction, decode_key, decode_value, transaction_key, transaction_value
from node.transactions.state import (
    COMPLETE_ABORT, COMPLETE_COMMIT, COMPLETED, DEAD, EMPTY, MAX_EPOCH, NO_EPOCH, ONGOING, PREPARE_ABORT,
    PREPARE_COMMIT, PREPARED, Partition, TransactionMetadata,
)

log = logging.getLogger(__name__)

# How soon a completion whose write failed (too few in-sync replicas, say) tries again.
RETRY_BACKOFF_S = 0.1
# How long AddPartitionsToTxn, AddOffsetsToTxn and EndTxn wait for the id's state change under way, or
# its last transaction's markers and completion, before they are answered CONCURRENT_TRANSACTIONS.
# A producer that begins its next transaction at once meets its last one still completing; answered
# at once, it waits out its retry backoff (20 ms in librdkafka and in Java) for what takes a few ms.
SETTLE_WAIT_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.transactions: dict[str, TransactionMetadata] = {}
        # __transaction_state partitions loaded here -> their coordinator epoch (the leader epoch).
        self.coordinator_epochs: dict[int, int] = {}
        self.log = CoordinatorLog(broker, placement.TRANSACTION_STATE_TOPIC, "request.timeout.ms")
        self.markers = MarkerWriter(broker)
        self._completions: set[asyncio.Task] = set()

    # --- placement ---

    def partition_count(self) -> int:
        topic = self.broker.topic(placement.TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic else self.broker.config.get_int("transaction.state.log.num.partitions")

    def partition_of(self, transactional_id: str) -> int:
        return placement.partition_for(transactional_id, self.partition_count())

    def owns(self, transactional_id: str) -> ErrorCode:
        partition = self.partition_of(transactional_id)
        info = self.broker.partition(placement.TRANSACTION_STATE_TOPIC, partition)
        if info is None or info.leader != self.broker.node_id:
            return ErrorCode.NOT_COORDINATOR
        if self.coordinator_epochs.get(partition) != info.leader_epoch:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    # --- what the admin APIs read (DescribeTransactions, ListTransactions) ---

    def described(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's state as DescribeTransactions answers it, or Kafka's error for it."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        error = self.owns(transactional_id)
        if error:
            return error, None
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.state == DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, metadata

    def _led_partitions(self) -> list[tuple[int, int]]:
        """(partition, leader epoch) of each `__transaction_state` partition the image says this node leads."""
        topic = self.broker.topic(placement.TRANSACTION_STATE_TOPIC)
        if topic is None:
            return []
        return [(index, info.leader_epoch) for index, info in topic.partitions.items()
                if info.leader == self.broker.node_id]

    def loading(self) -> bool:
        """Whether a partition led here is not loaded yet (ListTransactions is then COORDINATOR_LOAD_IN_PROGRESS)."""
        return any(self.coordinator_epochs.get(index) != epoch for index, epoch in self._led_partitions())

    def coordinated(self) -> list[TransactionMetadata]:
        """The transactional ids of the partitions this node leads and has loaded."""
        loaded = {index for index, epoch in self._led_partitions() if self.coordinator_epochs.get(index) == epoch}
        return [m for m in self.transactions.values() if m.log_partition in loaded]

    # --- loading and unloading partitions ---

    def load_partition(self, partition: int, partition_log, coordinator_epoch: int) -> None:
        """Take over a partition's transactional ids: replay its records, then finish every
        transaction it prepared and time every open one."""
        loaded: dict[str, TransactionMetadata] = {}
        for key, value in replay_records(partition_log):
            transactional_id = decode_key(key) if key else None
            if transactional_id is None:
                continue
            if value is None:
                loaded.pop(transactional_id, None)
                continue
            stored = decode_value(value)
            metadata = loaded.get(transactional_id) or TransactionMetadata(
                transactional_id, partition, stored.producer_id, stored.producer_epoch, stored.timeout_ms)
            metadata.apply(stored)
            loaded[transactional_id] = metadata
        for metadata in loaded.values():
            # As Kafka's loader: no retry of an earlier InitProducerId spans a coordinator change, and
            # an instance fenced before it stays fenced.
            metadata.last_producer_epoch = NO_EPOCH
        self.coordinator_epochs[partition] = coordinator_epoch
        self.transactions.update(loaded)
        for metadata in loaded.values():
            if metadata.state in PREPARED:
                self._complete(metadata)
            elif metadata.state == ONGOING:
                self._time(metadata)
        log.info("loaded %d transactional ids from %s-%d at coordinator epoch %d", len(loaded),
                 placement.TRANSACTION_STATE_TOPIC, partition, coordinator_epoch)

    def unload_partition(self, partition: int) -> None:
        self.coordinator_epochs.pop(partition, None)
        for transactional_id in [t for t, m in self.transactions.items() if m.log_partition == partition]:
            metadata = self.transactions.pop(transactional_id)
            metadata.cancel_timer()
            metadata.wake()

    def close(self) -> None:
        for metadata in self.transactions.values():
            metadata.cancel_timer()
        for task in self._completions:
            task.cancel()

    # --- InitProducerId ---

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_id: int = -1,
                               expected_epoch: int = NO_EPOCH) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting (or starting again)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= self.broker.config.get_int("transaction.max.timeout.ms"):
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        error = self.owns(transactional_id)
        if error:
            return error, -1, -1
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            metadata, error = await self._new_transactional_id(transactional_id, timeout_ms)
            if error:
                return error, -1, -1
        if metadata.pending or metadata.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        # (a transactional id just made, or forgotten after it expired, takes the producer naming an
        # old id and epoch: it recovers with a new producer id, as Kafka's isValidProducerId allows)
        if expected_id >= 0 and metadata.producer_epoch != NO_EPOCH:
            if metadata.producer_id != expected_id or expected_epoch not in (metadata.producer_epoch,
                                                                             metadata.last_producer_epoch):
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if expected_epoch == metadata.last_producer_epoch and metadata.state in COMPLETED:
                # A retry of the InitProducerId that made the current epoch (its answer was lost).
                return ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch
        if metadata.state == ONGOING:
            # The producer started again with a transaction open: the old instance is fenced and its
            # transaction aborted; the producer retries until that is done (Kafka answers the same).
            self._spawn(self._abort_open(metadata, "its producer started again"))
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        producer_id, epoch = metadata.producer_id, metadata.producer_epoch + 1
        if epoch >= MAX_EPOCH - 1:
            producer_id, epoch = await self.broker.producer_ids.allocate(), 0
        stored = metadata.record(EMPTY, now_ms(), partitions=set(), producer_id=producer_id, producer_epoch=epoch,
                                 timeout_ms=timeout_ms, start_ms=-1)
        # A new instance (naming no epoch of its own) leaves no earlier epoch that a retry may name:
        # every instance before it is fenced (Kafka's prepareIncrementProducerEpoch).
        error = await self._write(metadata, stored, last_producer_epoch=NO_EPOCH if expected_id < 0 else None)
        return (error, -1, -1) if error else (ErrorCode.NONE, producer_id, epoch)

    async def _new_transactional_id(self, transactional_id: str, timeout_ms: int):
        try:
            producer_id = await self.broker.producer_ids.allocate()
        except Exception:  # (the controller is out of reach: the client retries)
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.owns(transactional_id)
        if error:
            return None, error
        metadata = self.transactions.setdefault(transactional_id, TransactionMetadata(
            transactional_id, self.partition_of(transactional_id), producer_id, NO_EPOCH, timeout_ms))
        return metadata, ErrorCode.NONE

    # --- AddPartitionsToTxn, AddOffsetsToTxn ---

    def _checked(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's metadata if this producer may act on it now, else the error Kafka answers."""
        error = self.owns(transactional_id)
        if error:
            return error, None
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if metadata.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if metadata.pending or metadata.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, metadata

    async def _settled(self, transactional_id: str, timeout_s: float = SETTLE_WAIT_S) -> None:
        """Until the id's state change under way is written and a prepared transaction completed (or the id
        moved away), at most timeout_s."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.settled:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not metadata.settled and self.transactions.get(transactional_id) is metadata:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            waiter = loop.create_future()
            metadata.settle_waiters.append(waiter)
            timer = loop.call_later(remaining, lambda done=waiter: done.done() or done.set_result(None))
            try:
                await waiter
            finally:
                timer.cancel()

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: set[Partition]) -> ErrorCode:
        error, metadata = self._checked(transactional_id, producer_id, epoch)
        if error == ErrorCode.CONCURRENT_TRANSACTIONS:
            await self._settled(transactional_id)
            error, metadata = self._checked(transactional_id, producer_id, epoch)
        if error:
            return error
        if metadata.state == ONGOING and partitions <= metadata.partitions:
            return ErrorCode.NONE
        starting = metadata.state != ONGOING
        now = now_ms()
        stored = metadata.record(ONGOING, now, partitions=metadata.partitions | partitions,
                                 start_ms=now if starting else metadata.start_ms)
        error = await self._write(metadata, stored)
        if not error and starting:
            self._time(metadata)
        return error

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: list[Partition]) -> dict[Partition, ErrorCode]:
        """KIP-890: whether each partition is part of the producer's open transaction, asked by a
        partition leader before it appends the transaction's first batch there."""
        error = self.owns(transactional_id)
        metadata = self.transactions.get(transactional_id)
        if not error and (metadata is None or metadata.producer_id != producer_id):
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif not error and metadata.producer_epoch != epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif not error and metadata.state in PREPARED:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error:
            return dict.fromkeys(partitions, error)
        # (a state change being written does not matter: partitions count once they are written)
        return {p: ErrorCode.NONE if p in metadata.partitions else ErrorCode.TRANSACTION_ABORTABLE for p in partitions}

    # --- EndTxn ---

    async def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                              bump_epoch: bool = False) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch after) for EndTxn. `bump_epoch`: KIP-890's transaction version 2
        (EndTxn v5), where every transaction ends with a new epoch."""
        error = self.owns(transactional_id)
        if error:
            return error, -1, -1
        await self._settled(transactional_id)
        error = self.owns(transactional_id)
        if error:
            return error, -1, -1
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        retried = bump_epoch and metadata.state in COMPLETED and epoch == metadata.last_producer_epoch
        if metadata.producer_epoch != epoch and not retried:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if metadata.pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        done = (COMPLETE_COMMIT, PREPARE_COMMIT) if commit else (COMPLETE_ABORT, PREPARE_ABORT)
        if metadata.state in done:
            # A retry: what was asked is done, or under way (then the client waits for it).
            error = ErrorCode.NONE if metadata.state in COMPLETED else ErrorCode.CONCURRENT_TRANSACTIONS
            return error, metadata.producer_id, metadata.producer_epoch
        if metadata.state != ONGOING:
            return ErrorCode.INVALID_TXN_STATE, -1, -1
        new_epoch = epoch + 1 if bump_epoch and epoch + 1 < MAX_EPOCH - 1 else epoch
        stored = metadata.record(PREPARE_COMMIT if commit else PREPARE_ABORT, now_ms(), producer_epoch=new_epoch)
        error = await self._write(metadata, stored)
        if error:
            return error, -1, -1
        metadata.cancel_timer()
        self._complete(metadata)
        return ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch

    # --- aborts the coordinator decides on ---

    def _time(self, metadata: TransactionMetadata) -> None:
        """Abort the open transaction when it outlives transaction.timeout.ms (a timer, not a scan)."""
        metadata.cancel_timer()
        due_s = max(0.0, (metadata.start_ms + metadata.timeout_ms - now_ms()) / 1000)
        metadata.timer = asyncio.get_running_loop().call_later(
            due_s, lambda: self._spawn(self._abort_open(metadata, "it timed out")))

    async def _abort_open(self, metadata: TransactionMetadata, reason: str) -> None:
        """Fence the producer (an epoch bump) and abort its open transaction."""
        metadata.timer = None
        if self.transactions.get(metadata.transactional_id) is not metadata or metadata.state != ONGOING:
            return
        if metadata.pending:  # (a state change of its own under way: look again shortly)
            metadata.timer = asyncio.get_running_loop().call_later(
                RETRY_BACKOFF_S, lambda: self._spawn(self._abort_open(metadata, reason)))
            return
        epoch = metadata.producer_epoch + 1 if metadata.producer_epoch + 1 < MAX_EPOCH - 1 else metadata.producer_epoch
        log.info("aborting the transaction of %s (producer %d epoch %d): %s", metadata.transactional_id,
                 metadata.producer_id, metadata.producer_epoch, reason)
        error = await self._write(metadata, metadata.record(PREPARE_ABORT, now_ms(), producer_epoch=epoch),
                                  last_producer_epoch=NO_EPOCH)  # (a fence, as Kafka's prepareFenceProducerEpoch)
        if error:
            if error != ErrorCode.NOT_COORDINATOR:
                self._time(metadata)
            return
        self._complete(metadata)

    # --- completion ---

    def _complete(self, metadata: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction, then its completion (in the background)."""
        self._spawn(self._write_markers_then_complete(metadata))

    async def _write_markers_then_complete(self, metadata: TransactionMetadata) -> None:
        commit = metadata.state == PREPARE_COMMIT
        coordinator_epoch = self.coordinator_epochs.get(metadata.log_partition)
        if coordinator_epoch is None:
            return

        def still_mine() -> bool:
            return (self.coordinator_epochs.get(metadata.log_partition) == coordinator_epoch
                    and self.transactions.get(metadata.transactional_id) is metadata)
        written = await self.markers.write(metadata.producer_id, metadata.producer_epoch, commit, coordinator_epoch,
                                           sorted(metadata.partitions), still_mine)
        while written and still_mine():
            stored = metadata.record(COMPLETE_COMMIT if commit else COMPLETE_ABORT, now_ms(), partitions=set())
            error = await self._write(metadata, stored)
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            await asyncio.sleep(RETRY_BACKOFF_S)  # (too few in-sync replicas: Kafka retries the append too)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    # --- expiration ---

    async def run_expiration(self, interval_ms: int) -> None:
        """transaction.remove.expired.transaction.cleanup.interval.ms timer, as Kafka's."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.expire(self.broker.config.get_int("transactional.id.expiration.ms"))

    async def expire(self, expiration_ms: int, now: int | None = None) -> int:
        """Forget the transactional ids idle for transactional.id.expiration.ms with no transaction
        open (a tombstone each, as Kafka writes); returns how many went."""
        now = now_ms() if now is None else now
        idle = [m for m in self.transactions.values()
                if m.state in COMPLETED and not m.pending and now - m.last_update_ms > expiration_ms]
        expired = 0
        for metadata in idle:
            try:
                await self.log.append_replicated(metadata.log_partition,
                                                 [(transaction_key(metadata.transactional_id), None)])
            except CoordinatorError:
                continue  # (no longer the coordinator, or too few replicas: the next pass tries again)
            if self.transactions.get(metadata.transactional_id) is metadata and metadata.state in COMPLETED:
                del self.transactions[metadata.transactional_id]
                expired += 1
        if expired:
            log.info("expired %d transactional ids idle for over %d ms", expired, expiration_ms)
        return expired

    # --- the log ---

    async def _write(self, metadata: TransactionMetadata, stored: StoredTransaction,
                     last_producer_epoch: int | None = None) -> ErrorCode:
        """Write a state change and take it once it is on the in-sync replicas (see
        TransactionMetadata.apply for `last_producer_epoch`)."""
        epoch = self.coordinator_epochs.get(metadata.log_partition)
        metadata.pending = True
        try:
            await self.log.append_replicated(metadata.log_partition, [(
                transaction_key(metadata.transactional_id), transaction_value(stored, empty=stored.status == EMPTY))])
        except CoordinatorError as exc:
            return exc.code
        finally:
            metadata.pending = False
            metadata.wake()  # (its waiters look again once this task yields: after the change below is taken)
        if (self.coordinator_epochs.get(metadata.log_partition) != epoch
                or self.transactions.get(metadata.transactional_id) is not metadata):
            return ErrorCode.NOT_COORDINATOR  # (the partition moved while it was written)
        metadata.apply(stored, last_producer_epoch)
        return ErrorCode.NONE
