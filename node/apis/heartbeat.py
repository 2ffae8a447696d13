"""Heartbeat v0-4: keeps a member's session alive and tells it when to rejoin.

Answered by the group coordinator: REBALANCE_IN_PROGRESS when the member must rejoin,
UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION when it is out of date, NOT_COORDINATOR on another node.
A KIP-848 consumer group has no classic members: UNKNOWN_MEMBER_ID.
A share group's id is answered GROUP_ID_NOT_FOUND, as Kafka answers it.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from cluster.formats.errors import ErrorCode

REQUEST = HeartbeatRequest
RESPONSE = HeartbeatResponse
VERSIONS = (0, 4)


async def handle(broker, header, request):
    error = broker.groups.owns(request.group_id) or broker.groups.share_group_refusal(request.group_id)
    if not error and broker.groups.consumer_group(request.group_id) is not None:
        error = ErrorCode.UNKNOWN_MEMBER_ID  # none of its members speaks the classic protocol
    error = error or broker.groups.classic.heartbeat(request.group_id, request.generation_id, request.member_id)
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=error)
