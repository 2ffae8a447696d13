"""InitProducerId v0-6: a producer id and epoch, for idempotent and transactional producers.

Without a transactional id, a new id comes from the block the controller hands this node, and a
producer that names its id and epoch (v3+, KIP-360) gets the same id with the next epoch. With
one, this node must be its transaction coordinator (node.transactions.coordinator): the id's
producer gets its next epoch, which fences any older instance, and an open transaction of that
instance is aborted first (CONCURRENT_TRANSACTIONS until it is; the client retries).
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4, as Kafka answers older clients. A producer id
without an epoch, or an epoch without a producer id, is INVALID_REQUEST.

With an authorizer (node.security.authorizer), the request needs WRITE on the transactional id; an
idempotent producer, IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(CLUSTER_AUTHORIZATION_FAILED); what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: two-phase commit (v6's enable_2pc, KIP-939) is not served: such a request is
refused with UNSUPPORTED_VERSION.
"""
from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from cluster.formats.acls import IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = InitProducerIdRequest
RESPONSE = InitProducerIdResponse
VERSIONS = (0, 6)
MAX_EPOCH = 32767
FIRST_PRODUCER_FENCED_VERSION = 4


def _unauthorized(broker, header, transactional_id: str | None) -> ErrorCode | None:
    """As Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
    cluster or WRITE on some topic."""
    if broker.authorizer is None:
        return None
    if transactional_id is not None:
        if not authorizer.allowed(broker, header, WRITE, TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not (authorizer.allowed(broker, header, IDEMPOTENT_WRITE)
              or authorizer.allowed_by_type(broker, header, WRITE, TOPIC)):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


async def handle(broker, header, request):
    def reply(code, producer_id=-1, epoch=-1):
        if code == ErrorCode.PRODUCER_FENCED and header.api_version < FIRST_PRODUCER_FENCED_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=code, producer_id=producer_id,
                                            producer_epoch=epoch, ongoing_txn_producer_id=-1,
                                            ongoing_txn_producer_epoch=-1)

    expected_id, expected_epoch = (request.producer_id, request.producer_epoch) if header.api_version >= 3 else (-1, -1)
    if (expected_id == -1) != (expected_epoch == -1):  # a producer id without its epoch, or the reverse
        return reply(ErrorCode.INVALID_REQUEST)
    if getattr(request, "enable_2pc", False):
        return reply(ErrorCode.UNSUPPORTED_VERSION)
    refused = _unauthorized(broker, header, request.transactional_id)
    if refused:
        return reply(refused)
    if request.transactional_id is not None:
        return reply(*await broker.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected_id, expected_epoch))
    if expected_id >= 0 and 0 <= expected_epoch < MAX_EPOCH - 1:
        return reply(ErrorCode.NONE, expected_id, expected_epoch + 1)
    try:
        producer_id = await broker.producer_ids.allocate()
    except Exception:
        return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return reply(ErrorCode.NONE, producer_id, 0)
