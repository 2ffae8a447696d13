"""ListTransactions v0-2: the transactional ids this node coordinates, with their producer ids and
states, as `kafka-transactions.sh list` asks every broker for them.

Filters (node.transactions.listing), all of which must match: states by Kafka's names (names it
does not know come back in UnknownStateFilters and match nothing), producer ids, from v1 a
duration (transactions that started more than so many ms ago) and from v2 a transactional id
pattern (KIP-1152), a regular expression the whole id must match; one that does not compile is
INVALID_REGULAR_EXPRESSION. COORDINATOR_LOAD_IN_PROGRESS while a `__transaction_state`
partition led here is still being loaded. Listed by transactional id.

With an authorizer (node.security.authorizer): only the transactional ids it may DESCRIBE are
listed.

Differs from Kafka: the pattern is a Python regular expression, not RE2/J (the common syntax is
the same; Python's takes lookarounds and backreferences that RE2/J refuses).
"""
from __future__ import annotations

from kafka.protocol.admin.transactions import ListTransactionsRequest, ListTransactionsResponse

from cluster.formats.acls import DESCRIBE, TRANSACTIONAL_ID
from cluster.formats.errors import ErrorCode
from node.security import authorizer
from node.transactions.listing import BadPattern, ListFilter, listed

REQUEST = ListTransactionsRequest
RESPONSE = ListTransactionsResponse
VERSIONS = (0, 2)
DURATION_VERSION = 1
PATTERN_VERSION = 2


async def handle(broker, header, request):
    version = header.api_version

    def answer(error: ErrorCode, unknown_states=(), states=()):
        return RESPONSE[version](throttle_time_ms=0, error_code=error, unknown_state_filters=list(unknown_states),
                                 transaction_states=list(states))

    try:
        wanted = ListFilter.of(
            request.state_filters, request.producer_id_filters,
            request.duration_filter if version >= DURATION_VERSION else -1,
            request.transactional_id_pattern if version >= PATTERN_VERSION else None)
    except BadPattern:
        return answer(ErrorCode.INVALID_REGULAR_EXPRESSION)
    coordinator = broker.transactions
    if coordinator.loading():
        return answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return answer(ErrorCode.NONE, wanted.unknown_states, [
        RESPONSE.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                  transaction_state=m.state_name)
        for m in listed(coordinator.coordinated(), wanted, broker.now_ms())
        if authorizer.allowed(broker, header, DESCRIBE, TRANSACTIONAL_ID, m.transactional_id)])
