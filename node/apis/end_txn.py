"""EndTxn v0-5: commit or abort the producer's open transaction.

Answered once the coordinator has written PrepareCommit or PrepareAbort to `__transaction_state`
(node.transactions.coordinator); the markers follow in the background, and the producer's next
transactional request waits until they and the completion are written (up to a second, then
CONCURRENT_TRANSACTIONS). A retry of an end already made is answered without error. Version 5
(KIP-890's transaction version 2) ends every transaction with a new producer epoch, which the
answer carries. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2, as Kafka answers older clients.

With an authorizer (node.security.authorizer), the request needs WRITE on the transactional id; what
is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: v5 bumps the epoch without KIP-890's implicit partition adds, which
come with transaction version 2 (ApiVersions does not finalize it, so clients stay on version 1).
An EndTxn that comes while the id's last change is still being written waits for it (up to a
second) where Kafka answers CONCURRENT_TRANSACTIONS at once.
"""
from __future__ import annotations

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

from cluster.formats.acls import TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = EndTxnRequest
RESPONSE = EndTxnResponse
VERSIONS = (0, 5)
FIRST_PRODUCER_FENCED_VERSION = 2
EPOCH_BUMP_VERSION = 5


async def handle(broker, header, request):
    version = header.api_version
    refusal = authorizer.refusal(broker, header, request, RESPONSE, WRITE, TRANSACTIONAL_ID, request.transactional_id)
    if refusal is not None:
        return refusal
    error, producer_id, epoch = await broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
        bump_epoch=version >= EPOCH_BUMP_VERSION)
    if error == ErrorCode.PRODUCER_FENCED and version < FIRST_PRODUCER_FENCED_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return RESPONSE[version](throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)
