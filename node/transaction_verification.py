"""KIP-890's verification of a transaction's first write to a partition, before the leader appends it.

A transactional batch that would open its producer's transaction in a partition is appended only
if the transaction coordinator says the partition is part of that producer's open transaction
(AddPartitionsToTxn v4 with verify_only, or a direct call when the coordinator is this node).
Without it, a late retry of an aborted transaction's batch would open a transaction that no
marker ever ends, holding read_committed readers back for good ("hanging transactions"). Later
batches of an open transaction need no verification. `transaction.partition.verification.enable`
turns it off, as in Kafka.
"""
from __future__ import annotations

import logging

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.records import HEADER_SIZE, MAGIC_OFFSET, read_header
from node.peer_client import PeerUnavailable
from node.transactions.placement import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

VERIFY_VERSION = 4
# Produce answers may carry TRANSACTION_ABORTABLE from this version (KIP-890); before it, a
# partition outside the transaction is INVALID_TXN_STATE.
FIRST_TRANSACTION_ABORTABLE_VERSION = 11
VERIFY_TIMEOUT_S = 10.0
# What a produce answer says when the coordinator could not tell (Kafka's AddPartitionsToTxnManager):
# retriable errors every client retries on.
_PRODUCE_ERRORS = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
}

Partition = tuple[str, int]


def transactional_producer(records) -> tuple[int, int] | None:
    """(producer id, epoch) of a produce payload whose batch is transactional, read from its header."""
    if records is None or len(records) < HEADER_SIZE or records[MAGIC_OFFSET] != 2:
        return None
    header = read_header(records)
    if header.is_control or not header.is_transactional:
        return None
    return header.producer_id, header.producer_epoch


async def refusals(broker, transactional_id: str, writes: list[tuple[Partition, object]],
                   produce_version: int) -> dict[Partition, ErrorCode]:
    """The partitions of a transactional producer's Produce whose batch may not be appended, with
    the error to answer. `writes`: each partition and its records."""
    if not broker.config.get_bool("transaction.partition.verification.enable"):
        return {}
    to_verify: list[Partition] = []
    producer = None
    for partition, records in writes:
        found = transactional_producer(records)
        hosted = broker.replicas.partitions.get(partition)
        if found is None or hosted is None or hosted.producers.has_open_transaction(found[0]):
            continue
        producer = found
        to_verify.append(partition)
    if not to_verify:
        return {}
    answers = await _ask_coordinator(broker, transactional_id, *producer, to_verify)
    errors = dict(_PRODUCE_ERRORS)
    if produce_version < FIRST_TRANSACTION_ABORTABLE_VERSION:
        errors[ErrorCode.TRANSACTION_ABORTABLE] = ErrorCode.INVALID_TXN_STATE
    return {p: errors.get(e, e) for p, e in answers.items() if e != ErrorCode.NONE}


async def _ask_coordinator(broker, transactional_id: str, producer_id: int, epoch: int,
                           partitions: list[Partition]) -> dict[Partition, ErrorCode]:
    coordinator = broker.transactions
    info = broker.partition(TRANSACTION_STATE_TOPIC, coordinator.partition_of(transactional_id))
    if info is None or info.leader < 0:
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if info.leader == broker.node_id:
        return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    request = AddPartitionsToTxnRequest[VERIFY_VERSION](transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, verify_only=True,
        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=i) for t, i in by_topic.items()])])
    try:
        response = await broker.peers.send(info.leader, request, VERIFY_VERSION, AddPartitionsToTxnResponse,
                                           VERIFY_TIMEOUT_S)
    except PeerUnavailable as exc:
        log.info("cannot verify a transaction of %s with node %d: %s", transactional_id, info.leader, exc)
        return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if response.error_code:
        return dict.fromkeys(partitions, ErrorCode(response.error_code))
    found = {(t.name, p.partition_index): ErrorCode(p.partition_error_code)
             for r in response.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
    return {p: found.get(p, ErrorCode.UNKNOWN_SERVER_ERROR) for p in partitions}
