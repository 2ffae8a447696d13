"""AddPartitionsToTxn v0-5: make partitions part of the producer's open transaction.

v0-3 come from a transactional producer before its first write to a partition: the transaction
coordinator (node.transactions.coordinator) records them in `__transaction_state`, opening the
transaction if none is open, and answers once that is on the in-sync replicas. A partition of an
unknown topic is UNKNOWN_TOPIC_OR_PARTITION and the others of the request OPERATION_NOT_ATTEMPTED,
as in Kafka. v4+ come from partition leaders, several transactions at once (KIP-890): with
`verify_only`, each partition is answered whether it is part of the producer's open transaction
(TRANSACTION_ABORTABLE if not); without, it is added. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
before v2.

With an authorizer (node.security.authorizer): v0-3, WRITE on the transactional id, then WRITE on
each topic (TOPIC_AUTHORIZATION_FAILED, the other partitions OPERATION_NOT_ATTEMPTED); v4+ (from
nodes), CLUSTER_ACTION on the cluster.

Differs from Kafka: a request that comes while the producer's last transaction is still being
completed (its markers and CompleteCommit or CompleteAbort being written) waits for that, up to a
second, where Kafka answers CONCURRENT_TRANSACTIONS at once. A producer that begins its next
transaction straight after a commit meets this every time, and clients retry CONCURRENT_TRANSACTIONS
only after a backoff (20 ms in librdkafka and Java) for what takes a few milliseconds; the wait
answers the same request as soon as it can succeed. Nothing else changes: after a second, or when
the completion cannot be written, the answer is Kafka's.
"""
from __future__ import annotations

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from cluster.formats.acls import CLUSTER_ACTION, TOPIC, TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = AddPartitionsToTxnRequest
RESPONSE = AddPartitionsToTxnResponse
VERSIONS = (0, 5)
FIRST_BATCHED_VERSION = 4
FIRST_PRODUCER_FENCED_VERSION = 2

TopicResult = RESPONSE.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult

Partition = tuple[str, int]


async def handle(broker, header, request):
    version = header.api_version
    if version >= FIRST_BATCHED_VERSION:  # (sent by nodes verifying a transaction's first write)
        refusal = authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
        if refusal is not None:
            return refusal
        results = [RESPONSE.AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id,
            topic_results=_topic_results(await _one_transaction(
                broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only)))
            for txn in request.transactions]
        return RESPONSE[version](throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=results)
    errors = _unauthorized(broker, header, request.v3_and_below_transactional_id, request.v3_and_below_topics) or \
        await _one_transaction(broker, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                               request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
    if version < FIRST_PRODUCER_FENCED_VERSION:
        errors = {p: ErrorCode.INVALID_PRODUCER_EPOCH if e == ErrorCode.PRODUCER_FENCED else e
                  for p, e in errors.items()}
    return RESPONSE[version](throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))


def _unauthorized(broker, header, transactional_id: str, topics) -> dict[Partition, ErrorCode] | None:
    """As Kafka: WRITE on the transactional id, then on each topic; when a topic is refused, its
    partitions are TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED."""
    if broker.authorizer is None:
        return None
    partitions = [(topic.name, index) for topic in topics for index in topic.partitions]
    if not authorizer.allowed(broker, header, WRITE, TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = authorizer.denied(broker, header, WRITE, TOPIC, [topic for topic, _ in partitions])
    if not denied:
        return None
    return {p: ErrorCode.TOPIC_AUTHORIZATION_FAILED if p[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
            for p in partitions}


async def _one_transaction(broker, transactional_id: str, producer_id: int, epoch: int, topics,
                           verify_only: bool) -> dict[Partition, ErrorCode]:
    partitions = [(topic.name, index) for topic in topics for index in topic.partitions]
    unknown = [p for p in partitions if broker.partition(*p) is None]
    if unknown:
        return {p: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if p in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for p in partitions}
    coordinator = broker.transactions
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
    error = await coordinator.add_partitions(transactional_id, producer_id, epoch, set(partitions))
    return dict.fromkeys(partitions, error)


def _topic_results(errors: dict[Partition, ErrorCode]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=index, partition_error_code=error))
    return [TopicResult(name=topic, results_by_partition=results) for topic, results in by_topic.items()]
