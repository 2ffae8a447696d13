"""Fetch sessions (KIP-227), the leader's side, as Kafka's FetchSession.scala keeps them.

A fetcher that follows many partitions names them all once, in a full fetch (session id 0,
epoch 0); the leader answers with a session id and remembers each partition's fetch state.
From then on the fetcher sends incremental fetches (that id, the next epoch) naming only the
partitions whose fetch offset or other fetch state changed, plus those it no longer wants
(forgotten topics), and the leader answers only the partitions with news: records, an error,
a diverging epoch, or a high watermark or log start offset other than it last sent.

Session metadata in a request, as Kafka reads it:
- id 0, epoch -1: no session (what librdkafka and KafkaJS send);
- any id, epoch 0: close that session if any and open a new one (full fetch);
- any id, epoch -1 otherwise: close that session and fetch without one;
- id, epoch > 0: incremental; an unknown id is FETCH_SESSION_ID_NOT_FOUND, another epoch than
  the session expects is INVALID_FETCH_SESSION_EPOCH, and a request that names topics by id in
  a session opened by names (or the reverse) is FETCH_SESSION_TOPIC_ID_ERROR.

The cache holds at most max.incremental.fetch.session.cache.slots sessions. When it is full, a
new session takes the place of one unused for min.incremental.fetch.session.eviction.ms, or
else of the smallest session it outranks (followers' sessions outrank consumers', then more
partitions outrank fewer); a session that outranks none is not cached (answered with id 0).
"""
from __future__ import annotations

import random
import time
from collections import OrderedDict
from dataclasses import dataclass

from cluster.formats.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
FIRST_SESSION_VERSION = 7
FIRST_TOPIC_ID_VERSION = 13
_INT32_MAX = (1 << 31) - 1


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`; it wraps to 1, since 0 and -1 mean full fetches."""
    return 1 if epoch >= _INT32_MAX else epoch + 1


@dataclass(slots=True)
class SessionTopic:
    """How a session partition names its topic: the name (v7-12) or the id (v13+); shaped like a
    request's FetchTopic so that the fetch handler plans it the same way."""

    topic: str | None
    topic_id: object


@dataclass(slots=True)
class CachedPartition:
    """One partition's fetch state in a session (shaped like a request's FetchPartition), and what
    the leader last answered for it."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    sent_high_watermark: int = -2  # never answered yet: the first answer always carries it
    sent_log_start_offset: int = -2

    @classmethod
    def from_request(cls, part) -> "CachedPartition":
        return cls(part.partition, part.fetch_offset, part.partition_max_bytes,
                   _field(part, "current_leader_epoch", -1), _field(part, "last_fetched_epoch", -1),
                   _field(part, "log_start_offset", -1))

    def update(self, part) -> None:
        self.fetch_offset = part.fetch_offset
        self.partition_max_bytes = part.partition_max_bytes
        self.current_leader_epoch = _field(part, "current_leader_epoch", -1)
        self.last_fetched_epoch = _field(part, "last_fetched_epoch", -1)
        self.log_start_offset = _field(part, "log_start_offset", -1)

    def has_news(self, fetch) -> bool:
        """Whether an incremental answer must carry this partition; remembers what it carries."""
        news = (bool(fetch.records) or fetch.error != ErrorCode.NONE or fetch.diverging is not None
                or fetch.leader is not None or fetch.high_watermark != self.sent_high_watermark
                or fetch.log_start_offset != self.sent_log_start_offset)
        self.sent_high_watermark = fetch.high_watermark
        self.sent_log_start_offset = fetch.log_start_offset
        return news


def _field(part, name: str, default: int) -> int:
    """A partition field absent from older request versions reads as Kafka's default."""
    value = getattr(part, name, default)
    return default if value is None else value


class FetchSession:
    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: "OrderedDict[tuple, CachedPartition]", topics: dict[object, SessionTopic], now_ms: float):
        self.id = session_id
        self.privileged = privileged  # a follower's session
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions  # (topic name or id, partition) -> CachedPartition
        self.topics = topics  # topic name or id -> SessionTopic
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.last_used_ms = now_ms

    def rank(self) -> tuple[bool, int]:
        """Which sessions a new one may take the place of: followers' first, then larger ones."""
        return self.privileged, len(self.partitions)

    def update(self, topics, forgotten, uses_topic_ids: bool) -> None:
        """Apply an incremental request: named partitions are added or updated, forgotten ones leave."""
        for ref, part in _named_partitions(topics, uses_topic_ids):
            key = (ref, part.partition)
            cached = self.partitions.get(key)
            if cached is None:
                self.topics.setdefault(ref, _session_topic(ref, uses_topic_ids))
                self.partitions[key] = CachedPartition.from_request(part)
            else:
                cached.update(part)
        for forgotten_topic in forgotten or ():
            ref = forgotten_topic.topic_id if uses_topic_ids else forgotten_topic.topic
            for index in forgotten_topic.partitions:
                self.partitions.pop((ref, index), None)


def _named_partitions(topics, uses_topic_ids: bool):
    for topic in topics:
        ref = topic.topic_id if uses_topic_ids else topic.topic
        for part in topic.partitions:
            yield ref, part


def _session_topic(ref, uses_topic_ids: bool) -> SessionTopic:
    return SessionTopic(None, ref) if uses_topic_ids else SessionTopic(ref, None)


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads and how its answer is shaped.

    `partitions`: (topic, partition) pairs for the handler to read, shaped like the request's.
    `error`: a session error the whole request is answered with (and nothing read).
    `session`: the incremental session the answer is filtered by; `new_session`: whether a
    session is to be opened once the full answer is known.
    """

    partitions: list
    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None
    new_session: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000, eviction_ms: int = 120_000, clock=time.monotonic):
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._clock = clock
        self.sessions: "OrderedDict[int, FetchSession]" = OrderedDict()  # least recently used first

    def _now_ms(self) -> float:
        return self._clock() * 1000

    def context(self, request, version: int, privileged: bool) -> FetchContext:
        """The context of a Fetch request: which partitions to read and how to answer."""
        uses_topic_ids = version >= FIRST_TOPIC_ID_VERSION
        session_id = request.session_id if version >= FIRST_SESSION_VERSION else INVALID_SESSION_ID
        epoch = request.session_epoch if version >= FIRST_SESSION_VERSION else FINAL_EPOCH
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)  # a full fetch closes the session it names
            requested = [(topic, part) for topic in request.topics for part in topic.partitions]
            return FetchContext(requested, new_session=epoch == INITIAL_EPOCH and version >= FIRST_SESSION_VERSION,
                                privileged=privileged, uses_topic_ids=uses_topic_ids)
        return self._incremental(request, session_id, epoch, uses_topic_ids)

    def _incremental(self, request, session_id: int, epoch: int, uses_topic_ids: bool) -> FetchContext:
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(request.topics, request.forgotten_topics_data, uses_topic_ids)
        if not session.partitions:
            # Nothing left to follow: the session closes and the answer carries no session id.
            del self.sessions[session_id]
            return FetchContext([])
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._now_ms()
        self.sessions.move_to_end(session_id)
        pairs = [(session.topics[ref], cached) for (ref, _), cached in session.partitions.items()]
        return FetchContext(pairs, session=session)

    def answer(self, context: FetchContext, fetches: list) -> tuple[int, list]:
        """(session id for the answer, the partition fetches it carries), once all were read.

        `fetches` line up with context.partitions. A full fetch that asked for a session opens
        one and carries every partition; an incremental one carries those with news."""
        if context.session is not None:
            cached = list(context.session.partitions.values())
            return context.session.id, [fetch for fetch, part in zip(fetches, cached) if part.has_news(fetch)]
        if context.new_session and context.partitions:
            session = self._open(context, fetches)
            return (session.id if session is not None else INVALID_SESSION_ID), fetches
        return INVALID_SESSION_ID, fetches

    def _open(self, context: FetchContext, fetches: list) -> FetchSession | None:
        partitions: "OrderedDict[tuple, CachedPartition]" = OrderedDict()
        topics: dict[object, SessionTopic] = {}
        for (topic, part), fetch in zip(context.partitions, fetches):
            ref = topic.topic_id if context.uses_topic_ids else topic.topic
            topics.setdefault(ref, _session_topic(ref, context.uses_topic_ids))
            cached = partitions[(ref, part.partition)] = CachedPartition.from_request(part)
            cached.has_news(fetch)  # the full answer carried it
        now_ms = self._now_ms()
        session = FetchSession(self._new_id(), context.privileged, context.uses_topic_ids, partitions, topics, now_ms)
        if len(self.sessions) >= self.max_sessions and not self._evict_for(session, now_ms):
            return None
        self.sessions[session.id] = session
        return session

    def _evict_for(self, newcomer: FetchSession, now_ms: float) -> bool:
        """Make room for newcomer (Kafka's FetchSessionCache.tryEvict); False if it must stay out."""
        oldest = next(iter(self.sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            del self.sessions[oldest.id]
            return True
        weakest = min(self.sessions.values(), key=FetchSession.rank)
        if weakest.rank() < newcomer.rank():
            del self.sessions[weakest.id]
            return True
        return False

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id
