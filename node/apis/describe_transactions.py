"""DescribeTransactions v0: the state of transactional ids this node coordinates, as
`kafka-transactions.sh describe` shows them.

Per id: NOT_COORDINATOR unless this node leads the id's `__transaction_state` partition,
COORDINATOR_LOAD_IN_PROGRESS while it loads it, TRANSACTIONAL_ID_NOT_FOUND for an id it has no
state for, INVALID_REQUEST for an empty id; otherwise the state by Kafka's name (Empty, Ongoing,
PrepareCommit, ...), the transaction timeout, the start of the current (or last) transaction (-1
before the first), the producer id and epoch, and the partitions of the transaction by topic.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on each transactional id;
only the partitions of topics it may DESCRIBE are shown; what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Differs from Kafka: while the markers of a prepared transaction are being written, every
partition of the transaction is listed until all have their marker (Kafka drops each partition
as its marker is written).
"""
from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeTransactionsRequest, DescribeTransactionsResponse

from cluster.formats.acls import DESCRIBE, TOPIC, TRANSACTIONAL_ID
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeTransactionsRequest
RESPONSE = DescribeTransactionsResponse
VERSIONS = (0, 0)

State = RESPONSE.TransactionState


def describe(broker, transactional_id: str):
    error, metadata = broker.transactions.described(transactional_id)
    if error:
        # The other fields keep their schema defaults (zeros), as in Kafka's answer.
        return State(error_code=error, transactional_id=transactional_id)
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(index)
    return State(error_code=ErrorCode.NONE, transactional_id=transactional_id,
                 transaction_state=metadata.state_name, transaction_timeout_ms=metadata.timeout_ms,
                 transaction_start_time_ms=metadata.start_ms, producer_id=metadata.producer_id,
                 producer_epoch=metadata.producer_epoch,
                 topics=[State.TopicData(topic=topic, partitions=indexes) for topic, indexes in by_topic.items()])


async def handle(broker, header, request):
    return RESPONSE[header.api_version](throttle_time_ms=0, transaction_states=[
        _authorized_describe(broker, header, t) for t in request.transactional_ids])


def _authorized_describe(broker, header, transactional_id: str):
    """As Kafka: DESCRIBE on the transactional id, and only the partitions of topics it may DESCRIBE."""
    if not authorizer.allowed(broker, header, DESCRIBE, TRANSACTIONAL_ID, transactional_id):
        return State(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=transactional_id)
    state = describe(broker, transactional_id)
    if broker.authorizer is not None and state.topics:
        denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, [t.topic for t in state.topics])
        state.topics = [t for t in state.topics if t.topic not in denied]
    return state
