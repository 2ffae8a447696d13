"""Transactions as Kafka's kafka-transactions.sh inspects and repairs them, through kafka-python's
KafkaAdminClient (ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers):

- list_transactions: every coordinator's transactional ids, with their producer ids and states;
- describe_transaction: one id's state, as its coordinator answers;
- describe_producers: the producers a partition's leader (or a chosen replica) knows;
- abort_transaction: abort the open transaction that starts at an offset of a partition, as
  Kafka's tool does: the producer is the one DescribeProducers shows at that start offset, and an
  ABORT marker with its epoch and coordinator epoch goes to the partition's leader;
- find_hanging: Kafka's hanging transactions, open on a partition longer than the maximum
  transaction timeout while the producer's coordinator has no ongoing transaction including that
  partition (kafka-python's own find_hanging_transactions only looks at the coordinators' side).

Each takes a connected KafkaAdminClient and returns plain dicts; a refusal is a TransactionRefused
carrying Kafka's error code. `coordinator_placement` asks a cluster's nodes where an id is
coordinated.
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple, TypeVar

from kafka import TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import AbortTransactionSpec

from cluster.formats.errors import ErrorCode
from cluster.tools.errors import ClusterError, TransactionRefused
from cluster.tools.group_tools import first_answer

# kafka-transactions.sh find-hanging's default --max-transaction-timeout, in minutes (Kafka's
# transaction.max.timeout.ms).
MAX_TRANSACTION_TIMEOUT_MINUTES = 15
# DescribeProducers asks about this many partitions at most at a time, as Kafka's tool does.
BATCH = 500
# How long a coordinator that is not there yet (just created, loading) is waited for, and how often asked.
COORDINATOR_WAIT_S = 15.0
RETRY_BACKOFF_S = 0.2
_COORDINATOR_NOT_READY = (kafka_errors.CoordinatorNotAvailableError, kafka_errors.CoordinatorLoadInProgressError)

T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _asked(call: Callable[[], T], failed: str) -> T:
    """call(), again while the coordinator is not ready (as Kafka's admin client retries); a broker's
    refusal becomes a TransactionRefused."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        try:
            return call()
        except _COORDINATOR_NOT_READY as exc:
            if time.monotonic() >= deadline:
                raise TransactionRefused(failed, exc.errno) from None
        except kafka_errors.BrokerResponseError as exc:
            raise TransactionRefused(failed, exc.errno) from None
        time.sleep(RETRY_BACKOFF_S)  # a backoff between retries, as the admin client's retry.backoff.ms


def coordinator_placement(cluster, transactional_id: str) -> dict:
    """{"topic", "partition", "coordinator"}: the id's `__transaction_state` partition and its leader,
    as the first running node that answers sees them (coordinator -1: the topic does not exist yet)."""
    return first_answer(cluster, "transaction_coordinator", transactional_id=transactional_id)


def list_transactions(admin, states=(), producer_ids=(), duration_ms: int | None = None,
                      pattern: str | None = None) -> list[dict]:
    """Every coordinator's listing: {"transactional_id", "coordinator", "producer_id", "state"}, by
    coordinator, then transactional id."""
    found = _asked(lambda: admin.list_transactions(
        state_filters=list(states) or None, producer_id_filters=list(producer_ids) or None,
        duration_filter_ms=duration_ms, transactional_id_pattern=pattern), "Failed to list transactions")
    rows = [{"transactional_id": listing.transactional_id, "coordinator": coordinator,
             "producer_id": listing.producer_id, "state": listing.state.value}
            for coordinator, listings in found.items() for listing in listings]
    return sorted(rows, key=lambda row: (row["coordinator"], row["transactional_id"]))


def describe_transaction(admin, transactional_id: str, now_ms: int | None = None) -> dict:
    """The id's state as its coordinator describes it; the start time and duration are None before
    its first transaction."""
    described = _asked(lambda: admin.describe_transactions([transactional_id]),
                       f"Failed to describe transaction state of transactional-id '{transactional_id}'")
    description = described[transactional_id]
    start = description.transaction_start_time_ms
    now = _now_ms() if now_ms is None else now_ms
    return {"coordinator_id": description.coordinator_id, "transactional_id": transactional_id,
            "producer_id": description.producer_id, "producer_epoch": description.producer_epoch,
            "state": description.state.value, "transaction_timeout_ms": description.transaction_timeout_ms,
            "transaction_start_time_ms": start if start >= 0 else None,
            "transaction_duration_ms": now - start if start >= 0 else None,
            "topic_partitions": [{"topic": tp.topic, "partition": tp.partition}
                                 for tp in sorted(description.topic_partitions)]}


def _producer(state) -> dict:
    return {"producer_id": state.producer_id, "producer_epoch": state.producer_epoch,
            "coordinator_epoch": state.coordinator_epoch if state.coordinator_epoch >= 0 else None,
            "last_sequence": state.last_sequence, "last_timestamp": state.last_timestamp,
            "current_transaction_start_offset": state.current_transaction_start_offset
            if state.current_transaction_start_offset >= 0 else None}


def _where(broker_id: int | None) -> str:
    return "leader" if broker_id is None else f"broker {broker_id}"


def describe_producers(admin, topic: str, partition: int, broker_id: int | None = None,
                       failed: str | None = None) -> list[dict]:
    """The producers of one partition, as its leader (or replica `broker_id`) knows them; the
    coordinator epoch and open transaction's start offset are None where there is none."""
    wanted = TopicPartition(topic, partition)
    failed = failed or f"Failed to describe producers for partition {topic}-{partition} on {_where(broker_id)}"
    states = _asked(lambda: admin.describe_producers([wanted], broker_id=broker_id), failed)
    return [_producer(state) for state in states[wanted].active_producers]


def abort_transaction(admin, topic: str, partition: int, start_offset: int) -> dict:
    """Abort the open transaction that starts at start_offset in the partition: an ABORT marker, with
    the producer's id, epoch and coordinator epoch (0 when the partition has seen no marker of its)."""
    producers = describe_producers(admin, topic, partition,
                                   failed=f"Failed to validate producer state for partition {topic}-{partition}")
    found = next((p for p in producers if p["current_transaction_start_offset"] == start_offset), None)
    if found is None:
        raise ClusterError(f"Could not find any open transactions starting at offset {start_offset} "
                           f"on partition {topic}-{partition}")
    spec = AbortTransactionSpec(TopicPartition(topic, partition), found["producer_id"], found["producer_epoch"],
                                found["coordinator_epoch"] or 0)
    _asked(lambda: admin.abort_transaction(spec),
           f"Failed to abort the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) "
           f"on partition {topic}-{partition}")
    return {"topic": topic, "partition": partition, "start_offset": start_offset, "producer_id": spec.producer_id,
            "producer_epoch": spec.producer_epoch, "coordinator_epoch": spec.coordinator_epoch}


class OpenTransaction(NamedTuple):
    """A producer's transaction open on a partition, as DescribeProducers shows it."""
    topic: str
    partition: int
    producer: dict


def candidates(producers_by_partition: dict[tuple[str, int], list[dict]], now_ms: int,
               max_timeout_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer last wrote to the partition longer than max_timeout_ms ago."""
    return [OpenTransaction(topic, partition, producer)
            for (topic, partition), producers in sorted(producers_by_partition.items())
            for producer in producers
            if producer["current_transaction_start_offset"] is not None
            and now_ms - producer["last_timestamp"] > max_timeout_ms]


def hanging(open_transactions: list[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, set[tuple[str, int]] | None]) -> list[OpenTransaction]:
    """Kafka's rule: an open transaction hangs when no coordinator lists its producer id, or the id
    is unknown to its coordinator, or the coordinator's transaction does not include the partition
    (it would have written a marker there otherwise). `descriptions`: transactional id -> the
    partitions of its current transaction, None when the coordinator does not know it."""
    found = []
    for transaction in open_transactions:
        transactional_id = transactional_ids.get(transaction.producer["producer_id"])
        partitions = descriptions.get(transactional_id) if transactional_id is not None else None
        if partitions is None or (transaction.topic, transaction.partition) not in partitions:
            found.append(transaction)
    return found


def _partitions_to_search(admin, broker_id: int | None, topic: str | None,
                          partition: int | None) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    described = admin.describe_topics([topic] if topic is not None else None)
    found = []
    for one in described:
        if one["error_code"]:
            raise TransactionRefused(f"Failed to describe topic '{one['name']}'", one["error_code"])
        found += [(one["name"], p["partition_index"]) for p in one["partitions"]
                  if broker_id is None or broker_id in p["replica_nodes"]]
    return sorted(found)


def _producers_by_partition(admin, partitions: list[tuple[str, int]], broker_id: int | None) -> dict:
    by_partition = {}
    for first in range(0, len(partitions), BATCH):
        batch = [TopicPartition(topic, index) for topic, index in partitions[first:first + BATCH]]
        states = _asked(lambda: admin.describe_producers(batch, broker_id=broker_id),
                        f"Failed to describe producers for {len(batch)} partitions on {_where(broker_id)}")
        by_partition.update({(tp.topic, tp.partition): [_producer(s) for s in state.active_producers]
                             for tp, state in states.items()})
    return by_partition


def _current_partitions(admin, transactional_id: str) -> set[tuple[str, int]] | None:
    """The partitions of the id's current transaction; None when its coordinator does not know it."""
    try:
        described = _asked(lambda: admin.describe_transactions([transactional_id]),
                           f"Failed to describe transaction state of transactional-id '{transactional_id}'")
    except TransactionRefused as refused:
        if refused.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            return None
        raise
    return {(tp.topic, tp.partition) for tp in described[transactional_id].topic_partitions}


def find_hanging(admin, broker_id: int | None = None, topic: str | None = None, partition: int | None = None,
                 max_timeout_minutes: int = MAX_TRANSACTION_TIMEOUT_MINUTES, now_ms: int | None = None) -> list[dict]:
    """Hanging transactions on the partitions of `topic` (or one `partition` of it), or on those with a
    replica on `broker_id` (asked of that replica): {"topic", "partition", "producer_id", "producer_epoch",
    "coordinator_epoch", "start_offset", "last_timestamp", "duration_minutes"} each."""
    if topic is None and broker_id is None:
        raise ClusterError("finding hanging transactions needs a topic or a broker id to limit the search")
    if partition is not None and topic is None:
        raise ClusterError("a partition to search needs its topic")
    now = _now_ms() if now_ms is None else now_ms
    partitions = _partitions_to_search(admin, broker_id, topic, partition)
    found = candidates(_producers_by_partition(admin, partitions, broker_id), now, max_timeout_minutes * 60_000)
    if found:
        producer_ids = {transaction.producer["producer_id"] for transaction in found}
        listed = list_transactions(admin, producer_ids=sorted(producer_ids))
        transactional_ids = {row["producer_id"]: row["transactional_id"] for row in listed
                             if row["producer_id"] in producer_ids}
        descriptions = {t: _current_partitions(admin, t) for t in sorted(set(transactional_ids.values()))}
        found = hanging(found, transactional_ids, descriptions)
    return [{"topic": t.topic, "partition": t.partition, "producer_id": t.producer["producer_id"],
             "producer_epoch": t.producer["producer_epoch"], "coordinator_epoch": t.producer["coordinator_epoch"],
             "start_offset": t.producer["current_transaction_start_offset"],
             "last_timestamp": t.producer["last_timestamp"],
             "duration_minutes": (now - t.producer["last_timestamp"]) // 60_000} for t in found]
