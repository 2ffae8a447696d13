"""InitProducerId v0-6: a producer id and epoch for idempotent producers.

A new id comes from the block the controller hands this node; a producer that names its id and
epoch (v3+) gets the same id with the next epoch.

Differs from Kafka: transactions are not built yet, so a transactional id gets
COORDINATOR_NOT_AVAILABLE.
"""
from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from cluster.formats.errors import ErrorCode

REQUEST = InitProducerIdRequest
RESPONSE = InitProducerIdResponse
VERSIONS = (0, 6)
MAX_EPOCH = 32767


async def handle(broker, header, request):
    def reply(code, producer_id=-1, epoch=-1):
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=code, producer_id=producer_id,
                                            producer_epoch=epoch, ongoing_txn_producer_id=-1,
                                            ongoing_txn_producer_epoch=-1)

    if request.transactional_id is not None:
        # A transactional producer needs a transaction coordinator, which does not exist yet.
        return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if header.api_version >= 3 and request.producer_id >= 0 and 0 <= request.producer_epoch < MAX_EPOCH - 1:
        return reply(ErrorCode.NONE, request.producer_id, request.producer_epoch + 1)
    try:
        producer_id = await broker.producer_ids.allocate()
    except Exception:
        return reply(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return reply(ErrorCode.NONE, producer_id, 0)
