"""Heartbeat v0-4: keeps a member's session alive and tells it when to rejoin.

Answered by the group coordinator: REBALANCE_IN_PROGRESS when the member must rejoin,
UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION when it is out of date, NOT_COORDINATOR on another node.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

REQUEST = HeartbeatRequest
RESPONSE = HeartbeatResponse
VERSIONS = (0, 4)


async def handle(broker, header, request):
    error = broker.groups.owns(request.group_id) or broker.groups.classic.heartbeat(
        request.group_id, request.generation_id, request.member_id)
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=error)
