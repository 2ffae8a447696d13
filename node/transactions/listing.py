"""Which transactional ids ListTransactions lists, by Kafka's TransactionStateManager.listTransactionStates.

Every filter given must match: the state (one of the names asked for; names Kafka does not know
are reported back and match nothing), the producer id, the duration (longer than so many ms since
the transaction started, compared with the start of the last transaction, so also ids whose last
transaction started that long ago, and ids that never started one, whose start is -1) and the
transactional id pattern (a regular expression the whole id must match). Ids in state Dead are
never listed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from node.transactions.state import DEAD, STATE_NAMES, TransactionMetadata

STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}


class BadPattern(ValueError):
    """A transactional id pattern that is not a regular expression (INVALID_REGULAR_EXPRESSION)."""


@dataclass(frozen=True)
class ListFilter:
    states: frozenset[int] | None = None  # None: any state
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    pattern: re.Pattern | None = None
    # State names asked for that Kafka does not know; answered back as UnknownStateFilters.
    unknown_states: tuple[str, ...] = ()

    @classmethod
    def of(cls, state_names: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
           pattern: str | None = None) -> "ListFilter":
        names = list(state_names)
        compiled = None
        if pattern:
            try:
                compiled = re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as exc:
                raise BadPattern(f"{pattern!r}: {exc}") from None
        return cls(states=frozenset(STATES_BY_NAME[n] for n in names if n in STATES_BY_NAME) if names else None,
                   producer_ids=frozenset(producer_ids), duration_ms=duration_ms, pattern=compiled,
                   unknown_states=tuple(n for n in names if n not in STATES_BY_NAME))

    def matches(self, metadata: TransactionMetadata, now_ms: int) -> bool:
        if metadata.state == DEAD:
            return False  # being expired, as Kafka leaves it out
        if self.producer_ids and metadata.producer_id not in self.producer_ids:
            return False
        if self.states is not None and metadata.state not in self.states:
            return False
        if self.duration_ms >= 0 and now_ms - metadata.start_ms <= self.duration_ms:
            return False
        return self.pattern is None or self.pattern.fullmatch(metadata.transactional_id) is not None


def listed(transactions: Iterable[TransactionMetadata], wanted: ListFilter, now_ms: int) -> list[TransactionMetadata]:
    """The transactions the filter lets through, by transactional id."""
    return sorted((m for m in transactions if wanted.matches(m, now_ms)), key=lambda m: m.transactional_id)
