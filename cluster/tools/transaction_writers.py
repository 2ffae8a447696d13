"""The failover checker's transactional writers, and the audit of what a read_committed reader sees.

Each writer is a confluent-kafka (librdkafka) transactional producer with a transactional id of its
own, in a thread of its own. It writes one transaction after another, each a few records spread
over partitions of two topics (at least one of each), every record's value naming its transaction
and its position in it ("<transactional id>:<transaction>:<position>"); about one in five is
aborted on purpose once its records are written. Each transaction ends with an outcome:

- committed: commit_transaction returned;
- aborted: aborted on purpose, or the client said it must be aborted (an abortable error) and the
  abort went through, or it failed before a commit was ever asked for;
- unknown: a commit was asked for and the client could not say how it ended (it timed out, or the
  producer failed fatally): the transaction may be there whole, or not at all.

A producer that fails fatally is replaced by a new instance of the same transactional id, whose
InitProducerId fences the old one and aborts what it left open, as an application would do.

The audit waits until every transaction in the two topics is decided (each partition's last stable
offset is its high watermark), reads them from the start at read_committed, and checks: every
committed transaction present whole, each record once, where it was written; no record of an
aborted transaction; an unknown one whole or absent; each writer's records in order in every
partition; nothing present that no writer wrote.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from cluster.tools.group_readers import EXPECTED_DURING_FAULTS, ClientError

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
ABORT_ONE_IN = 5
RECORDS_PER_PARTITION = (1, 2)
EXTRA_PARTITIONS = (0, 2)  # partitions a transaction writes besides one of each topic
TRANSACTION_TIMEOUT_MS = 60_000
# A request held by a paused or isolated node is given up after this long (Kafka's default: 30 s).
REQUEST_TIMEOUT_MS = 5000
# How long one commit or abort is retried while the client calls its errors retriable.
END_TIMEOUT_S = 60
INIT_TIMEOUT_S = 60
PAUSE_S = 0.02  # between transactions: the writers' pace, not a wait for an event
READ_BACK_TIMEOUT_S = 60
POLL_S = 0.2
# Errors a transactional producer sees during failover on Kafka too: those of any client (a leader
# or coordinator moving, connections lost, requests timed out), and a coordinator still writing the
# markers of the last transaction. A fatal error (fenced, say) is never expected.
EXPECTED_TRANSACTIONAL = EXPECTED_DURING_FAULTS | frozenset({"CONCURRENT_TRANSACTIONS"})
# Delivery reports of an aborted transaction's records still queued: the abort, not an error.
PURGED = frozenset({"_PURGE_QUEUE", "_PURGE_INFLIGHT"})

Partition = tuple[str, int]


@dataclass
class Transaction:
    writer: str  # the transactional id
    number: int
    partitions: list[Partition]  # where each record went, by position
    begun_s: float
    ended_s: float | None = None
    outcome: str | None = None
    on_purpose: bool = False  # aborted because the writer chose to
    detail: str = ""  # the error that decided an outcome other than the one asked for

    @property
    def name(self) -> str:
        return f"{self.writer}:{self.number}"


@dataclass
class TransactionProblem:
    transaction: str
    outcome: str
    problem: str  # lost, partly visible, aborted but visible, duplicated, misplaced, out of order
    found: list[tuple[str, int, int]]  # (topic, partition, offset) of each record read
    expected: list[Partition]  # where its records were written
    begun_s: float | None
    ended_s: float | None


@dataclass
class TransactionAudit:
    writers: int
    topics: list[str]
    transactions: int
    committed: int
    aborted_on_purpose: int
    aborted_after_error: int
    unknown: int
    unknown_present: int
    records_read: int
    problems: list[TransactionProblem]
    strangers: list[str]  # values read that no writer wrote
    unread: dict[Partition, tuple[int, int]]  # (read up to, end) of partitions not read to their end
    undecided: list[Partition]  # partitions whose last stable offset never reached their high watermark
    # The longest a transactional id went without ending a transaction: (id, from, to) in seconds.
    longest_stall: tuple[str, float, float] | None = None

    @property
    def ok(self) -> bool:
        return not (self.problems or self.strangers or self.unread or self.undecided)

    def count(self, problem: str) -> int:
        return sum(1 for p in self.problems if p.problem == problem)


@dataclass
class _Writer:
    name: str
    random: random.Random
    thread: threading.Thread | None = None
    transactions: list[Transaction] = field(default_factory=list)


class TransactionWriters:
    """`writers` transactional producers writing to every partition of `topics` until `stop` is set."""

    def __init__(self, connection: dict, topics: list[str], partitions: int, writers: int, seed: int,
                 stop: threading.Event, elapsed, prefix: str = "failover-check"):
        self.connection, self.topics, self.partitions = connection, topics, partitions
        self.stop, self.elapsed = stop, elapsed
        self.writers = [_Writer(f"{prefix}-{i}", random.Random(seed * 31 + i)) for i in range(writers)]
        self.errors: list[ClientError] = []
        self._lock = threading.Lock()
        self._producers: list = []

    def prepare(self) -> TransactionWriters:
        """Start each writer's producer (InitProducerId, which also creates `__transaction_state`)
        before the run and its faults begin."""
        self._producers = [self._producer(writer) for writer in self.writers]
        return self

    def start(self) -> None:
        """Each writer writes in its own thread from now on."""
        for writer, producer in zip(self.writers, self._producers):
            writer.thread = threading.Thread(target=self._write, args=(writer, producer),
                                             name=f"transactions-{writer.name}", daemon=True)
            writer.thread.start()
        self._producers = []

    def join(self, timeout_s: float) -> None:
        for writer in self.writers:
            if writer.thread is not None:
                writer.thread.join(timeout_s)

    @property
    def transactions(self) -> list[Transaction]:
        with self._lock:
            return [t for writer in self.writers for t in writer.transactions]

    # --- one writer ---

    def _producer(self, writer: _Writer):
        """A started producer of the writer's transactional id: InitProducerId retried while retriable."""
        from confluent_kafka import KafkaException, Producer

        producer = Producer({
            **self.connection, "transactional.id": writer.name, "client.id": writer.name,
            "linger.ms": 5, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS, "request.timeout.ms": REQUEST_TIMEOUT_MS,
            "log_level": 0,  # what it would log about failed connections arrives through error_cb
            "error_cb": lambda error: self._error(writer, error),
        })
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while True:
            try:
                producer.init_transactions(max(1.0, deadline - time.monotonic()))
                return producer
            except KafkaException as exc:
                self._error(writer, exc.args[0])
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise

    def _write(self, writer: _Writer, producer) -> None:
        from confluent_kafka import KafkaException

        number = 0
        while not self.stop.is_set():
            transaction = self._plan(writer, number)
            with self._lock:
                writer.transactions.append(transaction)
            try:
                self._run(writer, producer, transaction)
            except KafkaException as exc:  # fatal: this instance can do no more
                self._error(writer, exc.args[0])
                self._decide(transaction, UNKNOWN if transaction.outcome == UNKNOWN else ABORTED, exc.args[0])
                producer = self._replace(writer)
                if producer is None:
                    return
            number += 1
            self.stop.wait(PAUSE_S)

    def _replace(self, writer: _Writer):
        from confluent_kafka import KafkaException

        while not self.stop.is_set():
            try:
                return self._producer(writer)
            except KafkaException:
                self.stop.wait(1.0)
        return None

    def _plan(self, writer: _Writer, number: int) -> Transaction:
        chooser = writer.random
        targets = [(topic, chooser.randrange(self.partitions)) for topic in self.topics]
        everywhere = [(topic, p) for topic in self.topics for p in range(self.partitions)]
        extra = chooser.randint(*EXTRA_PARTITIONS)
        others = [t for t in everywhere if t not in targets]
        targets += chooser.sample(others, min(extra, len(others)))
        records = [target for target in targets for _ in range(chooser.randint(*RECORDS_PER_PARTITION))]
        transaction = Transaction(writer.name, number, records, self.elapsed())
        transaction.on_purpose = chooser.randrange(ABORT_ONE_IN) == 0
        return transaction

    def _run(self, writer: _Writer, producer, transaction: Transaction) -> None:
        """One transaction, begun, written and ended; its outcome decided unless a fatal error ends it."""
        producer.begin_transaction()
        for position, (topic, partition) in enumerate(transaction.partitions):
            producer.produce(topic, value=f"{transaction.name}:{position}".encode(), partition=partition,
                             on_delivery=lambda error, _message: error and self._error(writer, error))
        if transaction.on_purpose:
            producer.flush(END_TIMEOUT_S)  # (so that the aborted records are written, and hidden)
            self._end(writer, producer, transaction, commit=False)
        else:
            self._end(writer, producer, transaction, commit=True)

    def _end(self, writer: _Writer, producer, transaction: Transaction, commit: bool) -> None:
        """Commit or abort, retried while the client calls its error retriable; a commit the client
        says must be aborted is aborted. Raises KafkaException for a fatal error, or when the client
        still calls its error retriable after END_TIMEOUT_S."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + END_TIMEOUT_S
        while True:
            if commit:
                transaction.outcome = UNKNOWN  # from the first EndTxn on, until the client tells
            try:
                (producer.commit_transaction if commit else producer.abort_transaction)(
                    max(1.0, deadline - time.monotonic()))
                self._decide(transaction, COMMITTED if commit else ABORTED)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or not (error.retriable() or error.txn_requires_abort() and commit) \
                        or time.monotonic() > deadline:
                    raise  # (a producer left mid-commit is replaced, as after a fatal error)
                self._error(writer, error)
                if not error.retriable():  # the client says this transaction must be aborted
                    commit = False
                    transaction.detail = f"{error.name()}: {error.str()}"

    def _decide(self, transaction: Transaction, outcome: str, error=None) -> None:
        transaction.outcome, transaction.ended_s = outcome, self.elapsed()
        if error is not None:
            transaction.detail = f"{error.name()}: {error.str()}"

    def _error(self, writer: _Writer, error) -> None:
        name = error.name()
        if name in PURGED:
            return
        with self._lock:
            self.errors.append(ClientError(f"transactional {writer.name}", name, error.str(), self.elapsed(),
                                           expected=name in EXPECTED_TRANSACTIONAL and not error.fatal()))

    # --- the audit ---

    def audit(self) -> TransactionAudit:
        log, unread, undecided = read_committed(self.connection, self.topics, self.partitions)
        return audit_transactions(self.transactions, log, len(self.writers), self.topics, unread, undecided)


def audit_transactions(transactions: list[Transaction], log: dict[Partition, list[tuple[int, str]]], writers: int,
                       topics: list[str], unread=None, undecided=None) -> TransactionAudit:
    """What a read_committed read-back (log: each partition's (offset, value), in offset order) says
    of the transactions the writers ended."""
    known = {t.name: t for t in transactions}
    found: dict[str, dict[int, list[tuple[str, int, int]]]] = {}
    strangers = []
    for (topic, partition), records in log.items():
        for offset, value in records:
            name, _, position = value.rpartition(":")
            if name not in known or not position.isdigit():
                strangers.append(value)
                continue
            found.setdefault(name, {}).setdefault(int(position), []).append((topic, partition, offset))
    problems = []
    for transaction in transactions:
        problems += _problems_of(transaction, found.get(transaction.name, {}))
    problems += _reordered(log, known)
    decided = [t for t in transactions if t.outcome is not None]
    return TransactionAudit(
        writers=writers, topics=topics, transactions=len(transactions),
        committed=sum(1 for t in decided if t.outcome == COMMITTED),
        aborted_on_purpose=sum(1 for t in decided if t.outcome == ABORTED and t.on_purpose),
        aborted_after_error=sum(1 for t in decided if t.outcome == ABORTED and not t.on_purpose),
        unknown=sum(1 for t in decided if t.outcome == UNKNOWN),
        unknown_present=sum(1 for t in decided if t.outcome == UNKNOWN and t.name in found),
        records_read=sum(len(records) for records in log.values()), problems=problems, strangers=strangers,
        unread=dict(unread or {}), undecided=list(undecided or []), longest_stall=_longest_stall(decided))


def _longest_stall(decided: list[Transaction]) -> tuple[str, float, float] | None:
    """The longest stretch in which one transactional id ended no transaction (from its first one's start)."""
    stalls = []
    for writer in {t.writer for t in decided}:
        mine = sorted((t for t in decided if t.writer == writer), key=lambda t: t.number)
        times = [mine[0].begun_s, *(t.ended_s for t in mine)]
        stalls += [(end - start, writer, start, end) for start, end in zip(times, times[1:])]
    if not stalls:
        return None
    _, writer, start, end = max(stalls)
    return writer, start, end


def _problems_of(transaction: Transaction, copies: dict[int, list[tuple[str, int, int]]]) -> list[TransactionProblem]:
    """What is wrong with what a read_committed reader sees of one transaction."""
    every = [where for position in sorted(copies) for where in copies[position]]

    def problem(kind: str) -> TransactionProblem:
        return TransactionProblem(transaction.name, transaction.outcome or "never ended", kind, every,
                                  transaction.partitions, transaction.begun_s, transaction.ended_s)

    if not copies:
        return [problem("lost")] if transaction.outcome == COMMITTED else []
    if transaction.outcome in (ABORTED, None):
        return [problem("aborted but visible" if transaction.outcome else "visible, never ended")]
    found = []
    if set(copies) != set(range(len(transaction.partitions))):
        found.append(problem("partly visible"))
    if any(len(where) > 1 for where in copies.values()):
        found.append(problem("duplicated"))
    if any((topic, partition) != transaction.partitions[position]
           for position, where in copies.items() if position < len(transaction.partitions)
           for topic, partition, _ in where):
        found.append(problem("misplaced"))
    return found


def _reordered(log: dict[Partition, list[tuple[int, str]]], known: dict[str, Transaction]) -> list[TransactionProblem]:
    """Records that come after a later record of the same writer in the same partition."""
    out_of_order = []
    for (topic, partition), records in log.items():
        last: dict[str, tuple[int, int]] = {}
        for offset, value in records:
            name, _, position = value.rpartition(":")
            transaction = known.get(name)
            if transaction is None or not position.isdigit():
                continue
            order = (transaction.number, int(position))
            if order < last.get(transaction.writer, (-1, -1)):  # (a record read twice is a duplicate)
                out_of_order.append(TransactionProblem(
                    name, transaction.outcome or "never ended", "out of order", [(topic, partition, offset)],
                    transaction.partitions, transaction.begun_s, transaction.ended_s))
            last[transaction.writer] = max(order, last.get(transaction.writer, (-1, -1)))
    return out_of_order


# --- reading back ---

def _ends(connection: dict, topics: list[str], partitions: int, isolation: str) -> dict[Partition, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**connection, "group.id": "failover-check-ends",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)[1]
                for t in topics for p in range(partitions)}
    finally:
        consumer.close()


def decided_ends(connection: dict, topics: list[str], partitions: int,
                 timeout_s: float = READ_BACK_TIMEOUT_S) -> tuple[dict[Partition, int], list[Partition]]:
    """Each partition's last stable offset once it is its high watermark (every transaction there
    decided), and the partitions where that did not come in time (a transaction left hanging)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    stable: dict[Partition, int] = {}
    while True:
        try:
            stable = _ends(connection, topics, partitions, "read_committed")
            written = _ends(connection, topics, partitions, "read_uncommitted")
        except KafkaException:
            written = {}
        undecided = [key for key in written if stable.get(key) != written[key]] if written else list(stable)
        if (written and not undecided) or time.monotonic() > deadline:
            return stable, undecided
        time.sleep(POLL_S)  # a condition on the cluster's state, looked at again until the deadline


def read_committed(connection: dict, topics: list[str], partitions: int, timeout_s: float = READ_BACK_TIMEOUT_S):
    """(each partition's (offset, value) at read_committed up to its decided end, the partitions not
    read to that end, the partitions never decided)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    ends, undecided = decided_ends(connection, topics, partitions, timeout_s)
    consumer = Consumer({**connection, "group.id": "failover-check-read-committed",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    keys = [(t, p) for t in topics for p in range(partitions)]
    consumer.assign([TopicPartition(t, p, 0) for t, p in keys])
    log: dict[Partition, list[tuple[int, str]]] = {key: [] for key in keys}
    positions = dict.fromkeys(keys, 0)
    deadline = time.monotonic() + timeout_s
    try:
        while any(positions[key] < ends.get(key, 0) for key in keys) and time.monotonic() < deadline:
            message = consumer.poll(POLL_S)
            if message is None:
                positions.update({(tp.topic, tp.partition): max(tp.offset, positions[(tp.topic, tp.partition)])
                                  for tp in consumer.position([TopicPartition(t, p) for t, p in keys])})
                continue
            if message.error():
                if message.error().fatal():
                    raise KafkaException(message.error())
                continue
            key = (message.topic(), message.partition())
            log[key].append((message.offset(), message.value().decode()))
            positions[key] = message.offset() + 1
    finally:
        consumer.close()
    unread = {key: (positions[key], ends.get(key, 0)) for key in keys if positions[key] < ends.get(key, 0)}
    return log, unread, undecided
