"""AddOffsetsToTxn v0-4: make a group's `__consumer_offsets` partition part of the producer's transaction.

The transaction coordinator adds the partition that coordinates the group, so that the
transaction's end writes a marker there too and the offsets the producer then sends with
TxnOffsetCommit commit or abort with it. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

With an authorizer (node.security.authorizer), the request needs WRITE on the transactional id and
READ on the group; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: as with AddPartitionsToTxn, a request that comes while the producer's last
transaction is still being completed waits for that (up to a second) instead of being answered
CONCURRENT_TRANSACTIONS at once.
"""
from __future__ import annotations

from kafka.protocol.producer import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

from cluster.formats.acls import GROUP, READ, TRANSACTIONAL_ID, WRITE
from cluster.formats.errors import ErrorCode
from node.groups.placement import OFFSETS_TOPIC
from node.security import authorizer

REQUEST = AddOffsetsToTxnRequest
RESPONSE = AddOffsetsToTxnResponse
VERSIONS = (0, 4)
FIRST_PRODUCER_FENCED_VERSION = 2


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, WRITE, TRANSACTIONAL_ID, request.transactional_id) \
        or authorizer.refusal(broker, header, request, RESPONSE, READ, GROUP, request.group_id)
    if refusal is not None:
        return refusal
    partition = (OFFSETS_TOPIC, broker.groups.partition_of(request.group_id))
    error = await broker.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                     request.producer_epoch, {partition})
    if error == ErrorCode.PRODUCER_FENCED and header.api_version < FIRST_PRODUCER_FENCED_VERSION:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=error)
