"""Share sessions (KIP-932): the partitions a member fetches from this node, and the request epoch.

Keyed by (group id, member id), as Kafka's ShareSessionCache. ShareSessionEpoch 0 opens a session
(replacing one the member had) with the request's partitions; -1 closes it (a ShareFetch with
epoch -1 may only acknowledge); any other epoch must be the session's next one, else
INVALID_SHARE_SESSION_EPOCH, or SHARE_SESSION_NOT_FOUND when there is no session. An incremental
ShareFetch adds its partitions to the session and removes its ForgottenTopicsData, and fetches
every partition of the session. `group.share.max.share.sessions` bounds the sessions; when it is
reached, a new one evicts a session idle longer than `group.share.session.timeout.ms`, else the
request is answered SHARE_SESSION_LIMIT_REACHED.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from cluster.formats.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

PartitionKey = tuple  # (topic id, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # what the next request must carry
    partitions: dict[PartitionKey, None] = field(default_factory=dict)  # (ordered, without repeats)
    last_used: float = field(default_factory=time.monotonic)

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= MAX_EPOCH else self.epoch + 1
        self.last_used = time.monotonic()


@dataclass
class FetchContext:
    error: ErrorCode = ErrorCode.NONE
    session: ShareSession | None = None
    partitions: list[PartitionKey] = field(default_factory=list)  # what this request fetches
    final: bool = False  # epoch -1: acknowledgements only, then the session closes


class ShareSessionCache:
    def __init__(self, max_sessions: int, idle_ms: int):
        self.max_sessions = max_sessions
        self.idle_s = idle_ms / 1000
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch_context(self, group_id: str, member_id: str, epoch: int, requested: list[PartitionKey],
                      forgotten: list[PartitionKey], acknowledges: bool) -> FetchContext:
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            if requested and not acknowledges:
                return FetchContext(ErrorCode.INVALID_REQUEST)
            if key not in self.sessions:
                return FetchContext(ErrorCode.SHARE_SESSION_NOT_FOUND)
            return FetchContext(session=self.sessions[key], final=True)
        if epoch == INITIAL_EPOCH:
            if acknowledges:
                return FetchContext(ErrorCode.INVALID_REQUEST)
            self.sessions.pop(key, None)
            if not self._has_room():
                return FetchContext(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, 1, dict.fromkeys(requested))
            return FetchContext(session=session, partitions=list(session.partitions))
        session = self.sessions.get(key)
        if session is None:
            return FetchContext(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        for partition in forgotten:
            session.partitions.pop(partition, None)
        session.partitions.update(dict.fromkeys(requested))
        session.advance()
        return FetchContext(session=session, partitions=list(session.partitions))

    def acknowledge_session(self, group_id: str, member_id: str, epoch: int) -> tuple[ErrorCode, ShareSession | None]:
        """ShareAcknowledge's session check (Kafka's acknowledgeSessionUpdate)."""
        if epoch == INITIAL_EPOCH:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == FINAL_EPOCH:
            return ErrorCode.NONE, session
        if session.epoch != epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session.advance()
        return ErrorCode.NONE, session

    def has_group(self, group_id: str) -> bool:
        return any(group == group_id for group, _ in self.sessions)

    def close(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def _has_room(self) -> bool:
        if len(self.sessions) < self.max_sessions:
            return True
        now = time.monotonic()
        idle = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - idle.last_used >= self.idle_s:
            self.close(idle)
            return True
        return False
