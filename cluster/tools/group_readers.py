"""The consumer group of the failover checker: members reading the checked topic under faults.

Each member is a confluent-kafka (librdkafka) consumer of one group, classic or (with the
`consumer` group protocol) a KIP-848 consumer group, in a thread of its own, committing automatically every 500 ms as applications commonly do. librdkafka hands every
error it meets to the application (the error callback, errored messages, commit callbacks), so
the members record each one with when it was seen; errors a client meets during failover on
Kafka too (a coordinator or leader moving, a connection dropped, a rebalance) are expected, any
other is reported. What the members read and committed is audited against the partitions' final
contents: every acknowledged message read at least once, nothing read that the log does not hold
at that offset, no committed offset past the log's end.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

SESSION_TIMEOUT_MS = 10_000
AUTO_COMMIT_INTERVAL_MS = 500
POLL_S = 0.2
CATCH_UP_TIMEOUT_S = 60
# What librdkafka reports while brokers die, pause, lose their partitions or move a group's
# coordinator, as it does against Kafka: connections dropped, requests timed out, a coordinator
# or leader elsewhere now, a generation ended by a rebalance.
EXPECTED_DURING_FAULTS = frozenset({
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_MSG_TIMED_OUT", "_WAIT_COORD", "_RESOLVE",
    "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "REBALANCE_IN_PROGRESS",
    "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE", "NETWORK_EXCEPTION",
    # KIP-848: a member whose heartbeats a failover interrupted past its session is fenced and joins
    # again, and its commits with the epoch it had are refused meanwhile, as on Kafka.
    "FENCED_MEMBER_EPOCH", "STALE_MEMBER_EPOCH",
})
CLASSIC, CONSUMER = "classic", "consumer"  # group.protocol
# Not errors: a commit with nothing new to commit, and the consumer being closed.
NOT_ERRORS = frozenset({"_NO_OFFSET", "_PARTITION_EOF", "_DESTROY"})


@dataclass
class ClientError:
    client: str  # the member, or the producer, that saw it
    error: str  # Kafka's (or the client library's) name for it, e.g. INCONSISTENT_GROUP_PROTOCOL
    detail: str
    at_s: float
    expected: bool


@dataclass
class Read:
    member: str
    partition: int
    offset: int
    value: str


@dataclass
class GroupAudit:
    group: str
    members: int
    strategy: str
    reads: int
    undelivered: list[str]  # acknowledged messages no member read
    phantom: list[Read]  # read, but the log holds something else (or nothing) at that offset
    committed_past_end: list[tuple[int, int, int]]  # (partition, committed offset, end offset)
    final_committed: dict[int, int]
    ends: dict[int, int]
    caught_up: bool  # the members read every partition to its end before they closed

    @property
    def ok(self) -> bool:
        return not (self.undelivered or self.phantom or self.committed_past_end) and self.caught_up


@dataclass
class _Member:
    name: str
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)


class GroupReaders:
    """`members` consumers of one group reading `topic` from its start. With the classic protocol
    `strategy` is their partition.assignment.strategy; with the consumer protocol, the server-side
    assignor they ask for (group.remote.assignor), or empty for the group's default."""

    def __init__(self, connection: dict, topic: str, group: str, members: int, strategy: str, elapsed,
                 protocol: str = CLASSIC):
        self.connection, self.topic, self.group, self.strategy = connection, topic, group, strategy
        self.protocol = protocol
        self.elapsed = elapsed
        self.members = [_Member(f"m{i}") for i in range(members)]
        self.reads: list[Read] = []
        self.commits: list[tuple[int, int]] = []  # (partition, offset) of every successful commit
        self.errors: list[ClientError] = []
        self.restarts = 0
        self._lock = threading.Lock()
        self._read_up_to: dict[int, int] = {}
        self._progress = threading.Condition(self._lock)

    def start(self) -> GroupReaders:
        for member in self.members:
            self._start(member)
        return self

    def restart_one(self, index: int) -> str:
        """A member leaves (closing its consumer, which commits what it read) and a new one joins."""
        old = self.members[index]
        old.stop.set()
        old.thread.join(30)
        self.restarts += 1
        new = self.members[index] = _Member(f"{old.name.split('.')[0]}.{self.restarts}")
        self._start(new)
        return new.name

    def _start(self, member: _Member) -> None:
        member.thread = threading.Thread(target=self._read, args=(member,), name=f"group-{member.name}", daemon=True)
        member.thread.start()

    def wait_caught_up(self, ends: dict[int, int], timeout: float = CATCH_UP_TIMEOUT_S) -> bool:
        """Until the members together have read every partition up to its end offset."""
        with self._progress:
            return self._progress.wait_for(
                lambda: all(self._read_up_to.get(p, 0) >= end for p, end in ends.items()), timeout)

    def stop(self) -> None:
        for member in self.members:
            member.stop.set()
        for member in self.members:
            member.thread.join(30)

    # --- one member ---

    def _read(self, member: _Member) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            **self.connection, "group.id": self.group, "client.id": f"failover-check-{member.name}",
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": AUTO_COMMIT_INTERVAL_MS, **self._protocol_config(),
            "log_level": 0,  # what it would log about failed connections arrives through error_cb
            "error_cb": lambda error: self._error(member, error),
            "on_commit": lambda error, partitions: self._committed(member, error, partitions),
        })
        try:
            consumer.subscribe([self.topic])
            while not member.stop.is_set():
                message = consumer.poll(POLL_S)
                if message is None:
                    continue
                if message.error():
                    self._error(member, message.error())
                    continue
                self._take(member, message)
        finally:
            consumer.close()  # leaves the group after committing what it read

    def _protocol_config(self) -> dict:
        if self.protocol == CONSUMER:
            # The session and assignment belong to the group coordinator under KIP-848: librdkafka
            # refuses session.timeout.ms and partition.assignment.strategy with this protocol.
            return {"group.protocol": CONSUMER, **({"group.remote.assignor": self.strategy} if self.strategy else {})}
        return {"session.timeout.ms": SESSION_TIMEOUT_MS, "partition.assignment.strategy": self.strategy}

    def _describe_strategy(self) -> str:
        if self.protocol == CONSUMER:
            return f"consumer protocol, {self.strategy or 'the group default'} assignor"
        return self.strategy

    def _take(self, member: _Member, message) -> None:
        read = Read(member.name, message.partition(), message.offset(), message.value().decode())
        with self._progress:
            self.reads.append(read)
            if read.offset + 1 > self._read_up_to.get(read.partition, 0):
                self._read_up_to[read.partition] = read.offset + 1
                self._progress.notify_all()

    def _committed(self, member: _Member, error, partitions) -> None:
        if error is None:
            with self._lock:
                self.commits.extend((tp.partition, tp.offset) for tp in partitions
                                    if tp.error is None and tp.offset >= 0)
        # A commit refused as a whole carries its error on every partition too: counted once.
        for failure in [error] if error is not None else [tp.error for tp in partitions if tp.error is not None]:
            self._error(member, failure)

    def _error(self, member: _Member, error) -> None:
        name = error.name()
        if name in NOT_ERRORS:
            return
        with self._lock:
            self.errors.append(ClientError(member.name, name, error.str(), self.elapsed(),
                                           expected=name in EXPECTED_DURING_FAULTS))

    # --- the audit ---

    def audit(self, acknowledged: set[str], log: dict[int, list[tuple[int, str]]], ends: dict[int, int],
              caught_up: bool, final_committed: dict[int, int]) -> GroupAudit:
        """log: every partition's records as the read-back found them; ends: their end offsets."""
        value_at = {(partition, offset): value for partition, records in log.items() for offset, value in records}
        with self._lock:
            reads, commits = list(self.reads), list(self.commits)
        delivered = {read.value for read in reads}
        committed_past_end = sorted({(p, offset, ends.get(p, 0)) for p, offset in [*commits, *final_committed.items()]
                                     if offset > ends.get(p, 0)})
        return GroupAudit(
            group=self.group, members=len(self.members), strategy=self._describe_strategy(), reads=len(reads),
            undelivered=sorted(acknowledged - delivered),
            phantom=[read for read in reads if value_at.get((read.partition, read.offset)) != read.value],
            committed_past_end=committed_past_end, final_committed=final_committed, ends=ends, caught_up=caught_up)


def committed_offsets(connection: dict, topic: str, group: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition of topic that has one (OffsetFetch)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**connection, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
