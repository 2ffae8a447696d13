"""The quorum's timeouts, as Kafka's QuorumConfig names them (`controller.quorum.*`).

Differs from Kafka in the defaults only: Kafka's election timeout is 1000 ms and its fetch timeout
2000 ms; a dev cluster here should elect a new leader within about a second of losing one, so the
election timeout is 500 ms (plus up to as much again of random jitter, as Kafka adds) and the fetch
timeout 1000 ms. A follower's fetch waits at most `fetch_max_wait_ms` at the leader (Kafka's
500 ms), and an unanswered request is sent again after `request_timeout_ms` (Kafka's 2000 ms),
both shorter so that a lost fetch is retried well within the fetch timeout.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_ms: int = 500
    fetch_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    fetch_max_wait_ms: int = 250
    request_timeout_ms: int = 400
    retry_backoff_ms: int = 50
    fetch_max_entries: int = 500

    @property
    def check_quorum_timeout_ms(self) -> int:
        """Kafka's LeaderState resigns when a majority has not fetched for 1.5 fetch timeouts."""
        return self.fetch_timeout_ms * 3 // 2
