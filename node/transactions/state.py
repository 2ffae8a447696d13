"""A transactional id's state, as Kafka's TransactionMetadata keeps it, and its record.

Empty → Ongoing (partitions added) → PrepareCommit or PrepareAbort (EndTxn, or the coordinator
aborting a transaction that timed out or whose producer started again) → CompleteCommit or
CompleteAbort (every partition has its marker) → Ongoing again with the next transaction. Each
change is written to `__transaction_state` before it takes effect here, and only one is in
flight at a time (`pending`); a client asking meanwhile waits a little for it (`settled`), then is
answered CONCURRENT_TRANSACTIONS.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from node.transactions.records import StoredTransaction

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = {EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit", PREPARE_ABORT: "PrepareAbort",
               COMPLETE_COMMIT: "CompleteCommit", COMPLETE_ABORT: "CompleteAbort", DEAD: "Dead",
               PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
COMPLETED = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
# Kafka bumps to a new producer id before the epoch reaches Short.MAX_VALUE.
MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1

Partition = tuple[str, int]


@dataclass
class TransactionMetadata:
    transactional_id: str
    log_partition: int  # of __transaction_state
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[Partition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # The epoch before the last bump (KIP-360: a producer retrying InitProducerId after a lost answer).
    last_producer_epoch: int = NO_EPOCH
    # A state change is being written; nothing else may start until it is.
    pending: bool = False
    # The transaction's abort when it outlives its timeout.
    timer: asyncio.TimerHandle | None = None
    # Requests waiting for the state change under way, or the prepared transaction's completion.
    settle_waiters: list[asyncio.Future] = field(default_factory=list)

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    def record(self, state: int, now_ms: int, partitions: set[Partition] | None = None,
               producer_id: int | None = None, producer_epoch: int | None = None,
               timeout_ms: int | None = None, start_ms: int | None = None) -> StoredTransaction:
        """What the log gets for a change to `state` (with whatever else changes with it)."""
        chosen = self.partitions if partitions is None else partitions
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(chosen):
            by_topic.setdefault(topic, []).append(index)
        return StoredTransaction(
            self.producer_id if producer_id is None else producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms, state, by_topic, now_ms,
            self.start_ms if start_ms is None else start_ms)

    def apply(self, stored: StoredTransaction, last_producer_epoch: int | None = None) -> None:
        """Take a change once it is written (or read back from the log). `last_producer_epoch`: the
        epoch a retry may still name, when the change decides it; otherwise an epoch bump keeps the
        epoch it replaced (a bump the producer itself asked for, naming its current epoch)."""
        if last_producer_epoch is not None:
            self.last_producer_epoch = last_producer_epoch
        elif stored.producer_epoch != self.producer_epoch or stored.producer_id != self.producer_id:
            self.last_producer_epoch = self.producer_epoch if stored.producer_id == self.producer_id else NO_EPOCH
        self.producer_id, self.producer_epoch = stored.producer_id, stored.producer_epoch
        self.timeout_ms, self.state = stored.timeout_ms, stored.status
        self.partitions = {(topic, index) for topic, indexes in stored.partitions.items() for index in indexes}
        self.last_update_ms, self.start_ms = stored.last_update_ms, stored.start_ms

    @property
    def settled(self) -> bool:
        """No state change is being written and no transaction is between its prepare and its completion."""
        return not self.pending and self.state not in PREPARED

    def wake(self) -> None:
        """Let the requests waiting for a change look again (after each write, and when unloaded)."""
        waiters, self.settle_waiters = self.settle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
