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

Reading is event-driven too: an incremental fetch reads only the session's partitions that may
have news (named in the request, told of an append, a high watermark move or a new term since
they were last read, or answered with data or an error last time), and waits on the session as a
whole, so an idle session costs the same whatever its size. A follower whose partitions are
quiet in its session counts as caught up on them as of its last request (for the ISR).

The cache holds at most max.incremental.fetch.session.cache.slots sessions. When it is full, a
new session takes the place of one unused for min.incremental.fetch.session.eviction.ms, or
else of the smallest session it outranks (followers' sessions outrank consumers', then more
partitions outrank fewer); a session that outranks none is not cached (answered with id 0).
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from dataclasses import dataclass

from cluster.formats.errors import ErrorCode
from cluster.runtime.timed_wait import result_within

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
    def __init__(self, session_id: int, replica_id: int, uses_topic_ids: bool,
                 partitions: "OrderedDict[tuple, CachedPartition]", topics: dict[object, SessionTopic], now_ms: float):
        self.id = session_id
        self.replica_id = replica_id  # a follower's node id, or -1 for a consumer
        self.privileged = replica_id >= 0  # a follower's session
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions  # (topic name or id, partition) -> CachedPartition
        self.topics = topics  # topic name or id -> SessionTopic
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.last_used_ms = now_ms
        self.unread: set[tuple] = set()  # partitions that may have news since they were last read
        self.woken = False  # news since unread was last taken that a parked request would wake for
        self.waiter: asyncio.Future | None = None  # the request parked on this session, if any

    def rank(self) -> tuple[bool, int]:
        """Which sessions a new one may take the place of: followers' first, then larger ones."""
        return self.privileged, len(self.partitions)

    def update(self, topics, forgotten, uses_topic_ids: bool) -> tuple[list[tuple], list[tuple]]:
        """Apply an incremental request: named partitions are added or updated, forgotten ones leave.
        Returns (added, forgotten) partition keys."""
        added, gone = [], []
        for ref, part in _named_partitions(topics, uses_topic_ids):
            key = (ref, part.partition)
            cached = self.partitions.get(key)
            if cached is None:
                self.topics.setdefault(ref, _session_topic(ref, uses_topic_ids))
                self.partitions[key] = CachedPartition.from_request(part)
                added.append(key)
            else:
                cached.update(part)
            self.unread.add(key)
        for forgotten_topic in forgotten or ():
            ref = forgotten_topic.topic_id if uses_topic_ids else forgotten_topic.topic
            for index in forgotten_topic.partitions:
                if self.partitions.pop((ref, index), None) is not None:
                    gone.append((ref, index))
                self.unread.discard((ref, index))
        return added, gone

    def take_unread(self) -> list[tuple]:
        """The partitions to read now, as (topic, cached partition); told of news later, they are unread again."""
        taken = [(self.topics[key[0]], self.partitions[key]) for key in self.unread]
        self.unread = set()
        self.woken = False
        return taken

    def wake(self, key: tuple, high_watermark_only: bool = False) -> None:
        """News in a partition: read it next time, and answer a parked request now, unless all
        that moved is the high watermark and this is a follower's session. A follower learns
        the high watermark with its next data, or when its wait runs out, as from Kafka's
        DelayedFetch (which completes a follower's fetch on bytes alone): waking it for each
        move would double the leader's work per acks=all write."""
        self.unread.add(key)
        if high_watermark_only and self.privileged:
            return
        self.woken = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)

    def after_answer(self, read: list, fetches: list, keep_reading) -> None:
        """Which partitions just read must be read again next time: any answer with records may have
        left some out for want of room, errors and held-back partitions are news until resolved,
        and `keep_reading(fetch, replica_id)` names others (a follower outside the ISR, whose
        fetches are what lets the leader add it)."""
        carried_records = any(fetch.records for fetch in fetches)
        for (topic, cached), fetch in zip(read, fetches):
            key = (topic.topic_id if self.uses_topic_ids else topic.topic, cached.partition)
            if (carried_records or fetch.error or fetch.diverging is not None or fetch.held_back
                    or keep_reading(fetch, self.replica_id)):
                self.unread.add(key)


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
    replica_id: int = -1
    uses_topic_ids: bool = False

    async def wait(self, timeout_s: float) -> bool:
        """An incremental fetch waits on its whole session: True once a partition of it has news."""
        session = self.session
        if session.woken:
            return True
        session.waiter = asyncio.get_running_loop().create_future()
        try:
            return await result_within(session.waiter, timeout_s, timed_out=False)
        finally:
            session.waiter = None

    def take_woken(self) -> list:
        """The session's partitions with news that this request has not read yet (now part of it)."""
        reading = {id(cached) for _, cached in self.partitions}
        woken = [pair for pair in self.session.take_unread() if id(pair[1]) not in reading]
        self.partitions.extend(woken)
        return woken


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000, eviction_ms: int = 120_000, clock=time.monotonic,
                 keep_reading=lambda fetch, replica_id: False):
        self.keep_reading = keep_reading  # see FetchSession.after_answer
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._clock = clock
        self.sessions: "OrderedDict[int, FetchSession]" = OrderedDict()  # least recently used first
        # (topic name or id, partition) -> the sessions holding it, told of its news
        self._watching: dict[tuple, set[FetchSession]] = {}

    def _now_ms(self) -> float:
        return self._clock() * 1000

    def context(self, request, version: int, replica_id: int) -> FetchContext:
        """The context of a Fetch request: which partitions to read and how to answer."""
        uses_topic_ids = version >= FIRST_TOPIC_ID_VERSION
        session_id = request.session_id if version >= FIRST_SESSION_VERSION else INVALID_SESSION_ID
        epoch = request.session_epoch if version >= FIRST_SESSION_VERSION else FINAL_EPOCH
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id in self.sessions:
                self._drop(self.sessions[session_id])  # a full fetch closes the session it names
            requested = [(topic, part) for topic in request.topics for part in topic.partitions]
            return FetchContext(requested, new_session=epoch == INITIAL_EPOCH and version >= FIRST_SESSION_VERSION,
                                replica_id=replica_id, uses_topic_ids=uses_topic_ids)
        return self._incremental(request, session_id, epoch, uses_topic_ids)

    def _incremental(self, request, session_id: int, epoch: int, uses_topic_ids: bool) -> FetchContext:
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        added, forgotten = session.update(request.topics, request.forgotten_topics_data, uses_topic_ids)
        for key in added:
            self._watching.setdefault(key, set()).add(session)
        for key in forgotten:
            self._unwatch(key, session)
        if not session.partitions:
            # Nothing left to follow: the session closes and the answer carries no session id.
            self._drop(session)
            return FetchContext([])
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._now_ms()
        self.sessions.move_to_end(session_id)
        return FetchContext(session.take_unread(), session=session)

    def answer(self, context: FetchContext, fetches: list) -> tuple[int, list]:
        """(session id for the answer, the partition fetches it carries), once all were read.

        `fetches` line up with context.partitions. A full fetch that asked for a session opens
        one and carries every partition; an incremental one carries those with news."""
        if context.session is not None:
            carried = [fetch for fetch, (_, cached) in zip(fetches, context.partitions) if cached.has_news(fetch)]
            context.session.after_answer(context.partitions, fetches, self.keep_reading)
            return context.session.id, carried
        if context.new_session and context.partitions:
            session = self._open(context, fetches)
            return (session.id if session is not None else INVALID_SESSION_ID), fetches
        return INVALID_SESSION_ID, fetches

    def touched(self, topic: str, topic_id, partition: int, high_watermark_only: bool = False) -> None:
        """A partition got news (an append, a high watermark, a new term, removal): sessions holding
        it read it next, and a request parked on one of them wakes (see FetchSession.wake)."""
        for ref in (topic, topic_id):
            for session in self._watching.get((ref, partition), ()):
                session.wake((ref, partition), high_watermark_only)

    def read_next_for(self, followers, topic: str, topic_id, partition: int) -> None:
        """The sessions of these followers read the partition on their next request, without waking
        a parked one (it reads it when its wait runs out)."""
        for ref in (topic, topic_id):
            for session in self._watching.get((ref, partition), ()):
                if session.replica_id in followers:
                    session.unread.add((ref, partition))

    def quiet_partitions(self, replica_id: int, max_age_ms: float) -> tuple[set, set]:
        """The partitions quiet (nothing unread) in a session of this follower used within max_age_ms:
        keys (topic name, partition) of sessions opened by names, (topic id, partition) of the others."""
        by_name, by_id = set(), set()
        now_ms = self._now_ms()
        for session in self.sessions.values():
            if session.replica_id == replica_id and now_ms - session.last_used_ms <= max_age_ms:
                (by_id if session.uses_topic_ids else by_name).update(session.partitions.keys() - session.unread)
        return by_name, by_id

    def caught_up_ms(self, replica_id: int, topic: str, topic_id, partition: int) -> float | None:
        """When a follower last fetched a partition that is quiet in its session (nothing it lacks
        since it last read it), or None: such a follower is caught up as of that request."""
        for ref in (topic, topic_id):
            for session in self._watching.get((ref, partition), ()):
                if session.replica_id == replica_id and (ref, partition) not in session.unread:
                    return session.last_used_ms
        return None

    def _open(self, context: FetchContext, fetches: list) -> FetchSession | None:
        partitions: "OrderedDict[tuple, CachedPartition]" = OrderedDict()
        topics: dict[object, SessionTopic] = {}
        read = []
        for (topic, part), fetch in zip(context.partitions, fetches):
            ref = topic.topic_id if context.uses_topic_ids else topic.topic
            session_topic = topics.setdefault(ref, _session_topic(ref, context.uses_topic_ids))
            cached = partitions[(ref, part.partition)] = CachedPartition.from_request(part)
            cached.has_news(fetch)  # the full answer carried it
            read.append((session_topic, cached))
        now_ms = self._now_ms()
        session = FetchSession(self._new_id(), context.replica_id, context.uses_topic_ids, partitions, topics, now_ms)
        if len(self.sessions) >= self.max_sessions and not self._evict_for(session, now_ms):
            return None
        session.after_answer(read, fetches, self.keep_reading)
        self.sessions[session.id] = session
        for key in partitions:
            self._watching.setdefault(key, set()).add(session)
        return session

    def _evict_for(self, newcomer: FetchSession, now_ms: float) -> bool:
        """Make room for newcomer (Kafka's FetchSessionCache.tryEvict); False if it must stay out."""
        oldest = next(iter(self.sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._drop(oldest)
            return True
        weakest = min(self.sessions.values(), key=FetchSession.rank)
        if weakest.rank() < newcomer.rank():
            self._drop(weakest)
            return True
        return False

    def _drop(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        for key in session.partitions:
            self._unwatch(key, session)
        if session.waiter is not None and not session.waiter.done():
            session.waiter.set_result(True)

    def _unwatch(self, key: tuple, session: FetchSession) -> None:
        watchers = self._watching.get(key)
        if watchers is not None:
            watchers.discard(session)
            if not watchers:
                del self._watching[key]

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id
