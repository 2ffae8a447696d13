"""An admin client that creates topics one after another while the failover check's faults run, and
the audit of what it was told: every topic whose creation was acknowledged must exist afterwards.

A creation answered with an error may or may not have happened (the controller may have committed
it before the answer was lost), as a failed send may or may not have been written: either way is
allowed. Errors a controller failover causes on Kafka too (no active controller yet, a timeout, a
lost connection) are expected; any other is reported as unexpected.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.tools.group_readers import ClientError

CREATE_INTERVAL_S = 0.5
REQUEST_TIMEOUT_S = 10
LIST_TIMEOUT_S = 30
# What a creation may fail with while the active controller changes, or (INVALID_REPLICATION_FACTOR)
# while a node is fenced and too few are left for the topic's replicas, on Kafka as here.
EXPECTED_ERRORS = {KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                   KafkaError._TRANSPORT, KafkaError.TOPIC_ALREADY_EXISTS, KafkaError._ALL_BROKERS_DOWN,
                   KafkaError.INVALID_REPLICATION_FACTOR}


@dataclass
class CreationAudit:
    attempted: int
    acknowledged: dict[str, float]  # topic -> when its creation was acknowledged
    missing: list[str]  # acknowledged, yet absent afterwards
    failed: int  # answered with an error (present afterwards or not)
    listed: bool = True  # False: the topics could not be listed at the end, so nothing is vouched for

    @property
    def ok(self) -> bool:
        return self.listed and not self.missing


@dataclass
class TopicCreations:
    connection: dict
    prefix: str
    replication_factor: int
    stop: threading.Event
    elapsed: Callable[[], float]
    acknowledged: dict[str, float] = field(default_factory=dict)
    errors: list[ClientError] = field(default_factory=list)
    attempted: int = 0
    _thread: threading.Thread | None = None

    def start(self) -> "TopicCreations":
        self._thread = threading.Thread(target=self._create, name="topic-creations")
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _create(self) -> None:
        admin = AdminClient(self.connection)
        while not self.stop.wait(CREATE_INTERVAL_S):
            name = f"{self.prefix}-{self.attempted}"
            self.attempted += 1
            future = admin.create_topics([NewTopic(name, 1, self.replication_factor)],
                                         request_timeout=REQUEST_TIMEOUT_S)[name]
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
                self.acknowledged[name] = self.elapsed()
            except KafkaException as exc:
                error = exc.args[0]
                self.errors.append(ClientError("topic creator", error.name(), f"{name}: {error.str()}",
                                               self.elapsed(), error.code() in EXPECTED_ERRORS or error.retriable()))
            except Exception as exc:  # the future timed out: no answer at all
                self.errors.append(ClientError("topic creator", type(exc).__name__, f"{name}: {exc}", self.elapsed(),
                                               True))

    def audit(self) -> CreationAudit:
        failed = len(self.errors)
        try:
            existing = set(AdminClient(self.connection).list_topics(timeout=LIST_TIMEOUT_S).topics)
        except KafkaException:
            return CreationAudit(self.attempted, dict(self.acknowledged), [], failed, listed=False)
        missing = sorted((name for name in self.acknowledged if name not in existing),
                         key=lambda name: int(name.rsplit("-", 1)[1]))
        return CreationAudit(self.attempted, dict(self.acknowledged), missing, failed)
