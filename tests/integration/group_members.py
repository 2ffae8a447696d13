"""Consumer group members of every client library, each started and stopped the same way, and
a producer that keeps writing while they join and leave.

A member subscribes to one topic in one group with the assignment strategy it is given,
commits what it read before it reads on (so a clean close leaves nothing uncommitted), and
keeps what it read and every error its client reported: an exception, an error callback or
event, an error record or line. Python clients run in threads of the test process (their
ERROR log records are the test's to collect, with caplog); KafkaJS and Sarama run as the
programs of tests/clients, which print JSON lines.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from tests.integration.js_programs import JS_DIR
from tests.integration.observe import committed

# The shortest session Kafka's group.min.session.timeout.ms allows; heartbeats often enough
# that members hear of a rebalance within a fraction of a second.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 300
POLL_S = 0.1
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: bytes


class Member:
    """One member of a group: `start`, then `records` and `errors` at any time, then `stop`
    (a clean close: the member leaves the group)."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, strategy: str):
        self.name, self.bootstrap, self.topic, self.group, self.strategy = name, bootstrap, topic, group, strategy
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._errors: list[str] = []

    def read(self, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self._records.append(Record(partition, offset, value))

    def error(self, what: str) -> None:
        with self._lock:
            self._errors.append(what)

    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class ThreadMember(Member):
    """A member whose client runs in a thread of this process until `stop` is called."""

    def __init__(self, *args):
        super().__init__(*args)
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run_guarded, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            self.error(f"did not close within {STOP_TIMEOUT_S} s")

    def _run_guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # the member's client failed: the test reports it as this member's error
            self.error(f"{type(exc).__name__}: {exc}")

    def run(self) -> None:
        raise NotImplementedError


class ConfluentMember(ThreadMember):
    """Commits each message it read before it polls again, and what it read of a partition
    before it gives the partition up. Under cooperative-sticky a member reads on while its group
    rebalances, so a commit can meet the rebalance and be refused as Kafka refuses it
    (REBALANCE_IN_PROGRESS while the new generation is being synced, ILLEGAL_GENERATION when it
    was sent in the generation before); librdkafka hands that to the application, which commits
    the same offsets again after its next poll, as Kafka's consumer documentation asks."""

    def run(self) -> None:
        import confluent_kafka

        uncommitted: dict[int, int] = {}  # partition -> the offset to commit
        retried = {confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS, confluent_kafka.KafkaError.ILLEGAL_GENERATION} \
            if self.strategy == "cooperative-sticky" else set()

        def commit(consumer, partitions: list[int], retry: bool) -> None:
            offsets = [confluent_kafka.TopicPartition(self.topic, p, uncommitted[p]) for p in partitions]
            if not offsets:
                return
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except confluent_kafka.KafkaException as exc:
                if retry and exc.args[0].code() in retried:
                    return  # kept in uncommitted, for the next try
                self.error(f"commit: {exc}")
            for p in partitions:
                uncommitted.pop(p, None)

        def revoked(consumer, partitions) -> None:
            commit(consumer, [tp.partition for tp in partitions if tp.partition in uncommitted], retry=False)

        def lost(consumer, partitions) -> None:
            self.error(f"lost {sorted(tp.partition for tp in partitions)}")

        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
            "partition.assignment.strategy": self.strategy, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "error_cb": lambda err: self.error(f"error_cb: {err}"),
            "logger": logging.getLogger(f"confluent_kafka.{self.name}")})
        consumer.subscribe([self.topic], on_revoke=revoked, on_lost=lost)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(POLL_S)
                if message is not None and message.error() is not None:
                    self.error(f"poll: {message.error()}")
                elif message is not None:
                    self.read(message.partition(), message.offset(), message.value())
                    uncommitted[message.partition()] = message.offset() + 1
                commit(consumer, list(uncommitted), retry=True)
        finally:
            consumer.close()


KAFKA_PYTHON_ASSIGNORS = {
    "range": "kafka.coordinator.assignors.range:RangePartitionAssignor",
    "roundrobin": "kafka.coordinator.assignors.roundrobin:RoundRobinPartitionAssignor",
    "sticky": "kafka.coordinator.assignors.sticky.sticky_assignor:StickyPartitionAssignor",
    "cooperative-sticky": "kafka.coordinator.assignors.cooperative_sticky:CooperativeStickyAssignor",
}
AIOKAFKA_ASSIGNORS = {
    "range": "aiokafka.coordinator.assignors.range:RangePartitionAssignor",
    "roundrobin": "aiokafka.coordinator.assignors.roundrobin:RoundRobinPartitionAssignor",
    "sticky": "aiokafka.coordinator.assignors.sticky.sticky_assignor:StickyPartitionAssignor",
}


def assignor(where: str):
    """The assignor class at "module:Class", or None when the installed client has no such module."""
    module, _, name = where.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


class KafkaPythonMember(ThreadMember):
    def run(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
            partition_assignment_strategy=[assignor(KAFKA_PYTHON_ASSIGNORS[self.strategy])],
            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        try:
            while not self.stopping.is_set():
                batches = consumer.poll(timeout_ms=POLL_S * 1000)
                for records in batches.values():
                    for record in records:
                        self.read(record.partition, record.offset, record.value)
                if batches:
                    consumer.commit({tp: OffsetAndMetadata(records[-1].offset + 1, "", -1)
                                     for tp, records in batches.items()})
        finally:
            consumer.close()


class AiokafkaMember(ThreadMember):
    def run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        import aiokafka

        consumer = aiokafka.AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
            partition_assignment_strategy=(assignor(AIOKAFKA_ASSIGNORS[self.strategy]),),
            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        await consumer.start()
        try:
            while not self.stopping.is_set():
                batches = await consumer.getmany(timeout_ms=POLL_S * 1000)
                for records in batches.values():
                    for record in records:
                        self.read(record.partition, record.offset, record.value)
                if batches:
                    await consumer.commit({tp: records[-1].offset + 1 for tp, records in batches.items()})
        finally:
            await consumer.stop()


class ProgramMember(Member):
    """A member run as a program that prints a JSON line per message read ({"partition",
    "offset", "value"}), per error ({"error"}) and once it has left the group ({"closed"}),
    and leaves the group when it is sent SIGTERM."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self._closed = self._stopping = False
        self._process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        self._stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read_lines, name=self.name, daemon=True),
                         threading.Thread(target=lambda: self._stderr.extend(self._process.stderr), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_lines(self) -> None:
        for line in self._process.stdout:
            if not line.strip():
                continue
            try:
                printed = json.loads(line)
            except json.JSONDecodeError:
                self.error(f"unreadable output: {line!r}")
                continue
            if "offset" in printed:
                self.read(printed["partition"], printed["offset"], printed["value"].encode())
            elif "error" in printed:
                self.error(json.dumps(printed))
            elif "rebalance" in printed:
                continue  # told to rejoin: the protocol at work (tests/clients/js/member.js says why it is printed)
            elif printed.get("closed"):
                self._closed = True
        if not self._stopping:
            self._process.wait()
            self._readers[1].join()
            self.error(f"exited with {self._process.returncode} before it was stopped: {''.join(self._stderr)[-3000:]}")

    def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            self.error(f"did not close within {STOP_TIMEOUT_S} s")
        for reader in self._readers:
            reader.join()
        if self._process.returncode != 0 or not self._closed:
            self.error(f"exited with {self._process.returncode} (left the group: {self._closed}): "
                       f"{''.join(self._stderr)[-3000:]}")


class KafkaJSMember(ProgramMember):
    def command(self) -> list[str]:
        return ["node", str(JS_DIR / "member.js"), self.bootstrap, self.topic, self.group, self.strategy,
                str(SESSION_TIMEOUT_MS), str(HEARTBEAT_INTERVAL_MS)]


class SaramaMember(ProgramMember):
    def __init__(self, *args, binary: Path):
        super().__init__(*args)
        self.binary = binary  # tests/clients/go/sarama-group, built by go_programs

    def command(self) -> list[str]:
        return [str(self.binary), "-brokers", self.bootstrap, "-topic", self.topic, "-group", self.group,
                "-strategy", self.strategy, "-messages", "0", "-timeout", "300s",
                "-session-timeout", f"{SESSION_TIMEOUT_MS}ms", "-heartbeat-interval", f"{HEARTBEAT_INTERVAL_MS}ms",
                "-rebalance-backoff", f"{HEARTBEAT_INTERVAL_MS}ms"]


class Producer:
    """Writes one message to each partition of a topic every interval, from a thread, until
    `stop`, which returns every message acknowledged: (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = 0.1):
        self.topic, self.partitions, self.interval_s = topic, partitions, interval_s
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self._sent = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        round_number = 0
        while not self._stopping.is_set():
            for partition in range(self.partitions):
                value = f"{self.topic} {round_number} {partition}".encode()
                self._sent.append((value, self._producer.send(self.topic, value=value, partition=partition)))
            round_number += 1
            self._stopping.wait(self.interval_s)

    def stop(self) -> dict[tuple[int, int], bytes]:
        self._stopping.set()
        self._thread.join()
        try:
            self._producer.flush()
            written = {}
            for value, future in self._sent:
                metadata = future.get(30)
                written[(metadata.partition, metadata.offset)] = value
            assert len(written) == len(self._sent), "two messages acknowledged at one offset"
            return written
        finally:
            self._producer.close()


def client_errors(records: list[logging.LogRecord]) -> list[str]:
    """The log records at ERROR or above of the clients running in this process, but one: when
    kafka-python closes, it cancels its requests in flight, and it logs the cancellation of a
    metadata refresh at ERROR (of a fetch, at INFO). Only its own close cancels a request; a
    connection the broker drops fails with KafkaConnectionError, logged at ERROR too."""
    return [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.ERROR
            and not (r.name == "kafka.cluster" and r.getMessage() == "Metadata refresh: failed Cancelled")]


def wait_for_coordinator(cluster, group: str, timeout: float = 30.0) -> None:
    """Waits until the group's coordinator answers for it. The first group of a cluster creates
    `__consumer_offsets`, whose partitions answer COORDINATOR_LOAD_IN_PROGRESS until their
    leaders have loaded them, as Kafka's do; clients retry, but some log that at ERROR."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            committed(cluster, group)
            return
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def wait_until(condition, what: str, members: list[Member], timeout: float = 60.0) -> None:
    """Polls the members' progress until condition() holds; fails naming what did not happen,
    and what each member read and reported, once a member reports an error or at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        failed = any(m.errors() for m in members)
        if failed or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen {'before an error' if failed else f'within {timeout} s'}: "
                                 + "; ".join(f"{m.name} read {len(m.records())}, errors {m.errors()}" for m in members))
        time.sleep(0.05)

