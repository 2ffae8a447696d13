"""The failover checker: acks=all writers against a nemesis, then an audit of every partition.

Producers write numbered messages ("<producer>:<partition>:<sequence>") with acks=all to a
replicated topic while a nemesis hits one random node at a time with a random fault (kill,
stop, pause, isolate) and heals it. Afterwards every partition is read from its start and
checked: each acknowledged message is present exactly once at its acknowledged offset, each
producer's messages in a partition are in order, and the gaps between acknowledgements show
how long writes were unavailable. Every message found wrong is reported with where it was
acknowledged, when, during which fault, and what the partition holds there now; every failed
send with the client's error. The seed replays the nemesis's choices of fault, node and times.
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from cluster.formats.control import ControlError
from cluster.launch.cluster import Cluster, ClusterError

FAULTS = ("kill", "stop", "pause", "isolate")
# The Cluster call that injects each fault, and the one that heals it.
INJECT = {"kill": "kill_node", "stop": "stop_node", "pause": "pause_node", "isolate": "isolate_node"}
HEAL = {"kill": "restart_node", "stop": "restart_node", "pause": "resume_node", "isolate": "heal_node"}
DEFAULT_TOPIC = "kraftwerk-failover-check"
UNAVAILABLE_AFTER_S = 1.0  # a gap between acknowledgements longer than this is reported
SEND_INTERVAL_S = 0.01
HEALTHY_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60
READ_BACK_TIMEOUT_S = 60
# A request held by a paused or isolated leader is only given up after this long, so it bounds the
# unavailability a client sees below (Kafka's default is 30 s).
PRODUCER_REQUEST_TIMEOUT_MS = 5000


@dataclass
class FaultRecord:
    fault: str
    node: int
    started_s: float
    healed_s: float | None = None
    error: str | None = None  # the cluster refused to inject or heal it


@dataclass
class Window:
    partition: int
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Ack:
    partition: int
    offset: int
    at_s: float


@dataclass
class Failure:
    """A send the producer gave up on: it may or may not have been written."""
    partition: int
    value: str
    error: str  # the client's exception class, e.g. OutOfOrderSequenceNumberError
    detail: str  # its message, with the broker's error message when there is one
    at_s: float


@dataclass
class Evidence:
    """What the read-back shows for one message the audit found wrong."""
    value: str
    problem: str  # lost, duplicated, at another offset, out of order
    ack: Ack | None  # None: never acknowledged (a duplicate of a failed send)
    found: list[tuple[int, int]]  # (partition, offset) of each copy read back
    at_acknowledged_offset: str | None  # what the partition now holds at the acknowledged offset


@dataclass
class Report:
    seed: int
    topic: str
    duration_s: float
    faults: list[FaultRecord]
    sent: int
    acknowledged: int
    failures: list[Failure]
    lost: list[str]
    duplicated: list[str]
    misplaced: list[str]  # present once, but not at the offset its acknowledgement gave
    reordered: list[str]
    unacknowledged_present: list[str]  # failed sends that were written after all: allowed
    windows: list[Window]
    last_heal_s: float
    acknowledged_after_last_heal: int
    in_sync_at_end: bool = True
    evidence: list[Evidence] = field(default_factory=list)
    unread: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (read up to, end offset)

    @property
    def ok(self) -> bool:
        # A partition that could not be read to its end cannot vouch for its acknowledged messages.
        return not (self.lost or self.duplicated or self.misplaced or self.reordered or self.unread)

    @property
    def failed(self) -> Counter:
        return Counter(f.error for f in self.failures)

    @property
    def longest_unavailable_s(self) -> float:
        return max((w.length_s for w in self.windows), default=0.0)


@dataclass
class _Producer:
    name: str
    partitions: int
    acks: dict[str, Ack] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FailoverCheck:
    def __init__(self, cluster: Cluster, duration_s: float = 60, seed: int | None = None,
                 faults: tuple[str, ...] = FAULTS, producers: int = 2, partitions: int = 3,
                 topic: str = DEFAULT_TOPIC, hold_s: tuple[float, float] = (2.0, 5.0),
                 gap_s: tuple[float, float] = (1.0, 3.0), log=print):
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
        self.cluster = cluster
        self.duration_s = duration_s
        self.seed = seed if seed is not None else random.randrange(1 << 31)
        self.random = random.Random(self.seed)
        self.faults = faults
        self.partitions = partitions
        self.topic = topic
        self.hold_s = hold_s  # how long a fault lasts, drawn uniformly from this range
        self.gap_s = gap_s  # the quiet time before the next fault, after the ISR is full again
        self.log = log
        self.producers = [_Producer(f"p{i}", partitions) for i in range(producers)]
        self.fault_log: list[FaultRecord] = []
        self._stop = threading.Event()
        self._started = 0.0
        self._sending_stopped_s = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    # --- running ---

    def run(self) -> Report:
        self.log(f"failover check: seed {self.seed}, {self.duration_s:.0f}s, faults {', '.join(self.faults)}")
        self._create_topic()
        self._started = time.monotonic()
        writers = [threading.Thread(target=self._write, args=(p,), name=f"writer-{p.name}") for p in self.producers]
        for writer in writers:
            writer.start()
        try:
            self._nemesis()
        finally:
            self._stop.set()
            self._sending_stopped_s = self.elapsed()
            for writer in writers:
                writer.join(FLUSH_TIMEOUT_S + 30)
            self._heal_everything()
        in_sync = self._wait_until_healthy()
        return self._audit(in_sync)

    def _create_topic(self) -> None:
        replicas = min(3, len(self.cluster.nodes))
        existing = {t["name"] for t in self.cluster.status()["topics"]}
        if self.topic in existing:
            raise ValueError(f"topic {self.topic} exists already: give the check a new one")
        self.cluster.create_topic(self.topic, partitions=self.partitions, replication_factor=replicas,
                                  config={"min.insync.replicas": str(min(2, replicas))})
        self._wait_until_healthy()

    def _write(self, producer: _Producer) -> None:
        client = KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers, acks="all", enable_idempotence=True,
                               request_timeout_ms=PRODUCER_REQUEST_TIMEOUT_MS, retry_backoff_ms=100, linger_ms=5,
                               delivery_timeout_ms=120_000, metadata_max_age_ms=2000)
        sequence = 0
        try:
            while not self._stop.is_set():
                partition = sequence % self.partitions
                self._send(client, producer, partition, f"{producer.name}:{partition}:{sequence}")
                sequence += 1
                self._stop.wait(SEND_INTERVAL_S)  # the writers' pace, not a wait for an event
            client.flush(FLUSH_TIMEOUT_S)
        except KafkaTimeoutError:
            self.log(f"warning: producer {producer.name} still had unacknowledged messages after "
                     f"{FLUSH_TIMEOUT_S}s; they count as unacknowledged")
        finally:
            try:
                client.close(timeout=5)
            except KafkaTimeoutError:
                pass  # what it could not deliver is unacknowledged, which the audit reports

    def _send(self, client: KafkaProducer, producer: _Producer, partition: int, value: str) -> None:
        producer.sent += 1
        try:
            future = client.send(self.topic, value.encode(), partition=partition)
        except KafkaError as exc:  # no metadata or buffer space within max.block.ms: nothing was sent
            self._failed(producer, partition, value, exc)
            return
        future.add_callback(self._acknowledged, producer, value)
        future.add_errback(self._failed, producer, partition, value)

    def _acknowledged(self, producer: _Producer, value: str, metadata) -> None:
        with producer.lock:
            producer.acks[value] = Ack(metadata.partition, metadata.offset, self.elapsed())

    def _failed(self, producer: _Producer, partition: int, value: str, error) -> None:
        failure = Failure(partition, value, type(error).__name__, str(error), self.elapsed())
        with producer.lock:
            producer.failures.append(failure)

    # --- the nemesis ---

    def _nemesis(self) -> None:
        deadline = self._started + self.duration_s
        while not self._stop.wait(self.random.uniform(*self.gap_s)):
            hold_s = self.random.uniform(*self.hold_s)
            if time.monotonic() + hold_s + 2 > deadline:
                break
            record = FaultRecord(self.random.choice(self.faults), self.random.choice(sorted(self.cluster.nodes)),
                                 self.elapsed())
            self.fault_log.append(record)
            self.log(f"{record.started_s:6.1f}s  {record.fault} node {record.node}")
            if self._act(record, INJECT[record.fault]):
                self._stop.wait(hold_s)
            self._heal(record)
            self._wait_until_healthy()
        self._stop.wait(max(0.0, deadline - time.monotonic()))

    def _act(self, record: FaultRecord, action: str) -> bool:
        """One Cluster call of a fault; a refusal is kept in the fault log rather than ending the run,
        so that the audit still tells what happened to the messages."""
        try:
            getattr(self.cluster, action)(record.node)
            return True
        except (ClusterError, ControlError, OSError) as exc:
            record.error = f"{action}: {exc}"
            self.log(f"warning: {action}({record.node}) failed: {exc}")
            return False

    def _heal(self, record: FaultRecord) -> None:
        self._act(record, HEAL[record.fault])
        record.healed_s = self.elapsed()
        self.log(f"{record.healed_s:6.1f}s  healed node {record.node}")

    def _heal_everything(self) -> None:
        for record in self.fault_log:
            if record.healed_s is None:
                self._heal(record)

    def _wait_until_healthy(self) -> bool:
        if self.cluster.wait_in_sync(self.topic, HEALTHY_TIMEOUT_S):
            return True
        self.log(f"warning: replicas of {self.topic} not all in sync after {HEALTHY_TIMEOUT_S}s")
        return False

    # --- the audit ---

    def _read_partitions(self) -> tuple[dict[int, list[tuple[int, str]]], dict[int, tuple[int, int]]]:
        """Every record of every partition from its start to its end offset (the high watermark), and
        the partitions that could not be read to the end in time."""
        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, enable_auto_commit=False)
        try:
            partitions = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(partitions)
            consumer.seek_to_beginning()
            ends = consumer.end_offsets(partitions)
            records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(self.partitions)}
            deadline = time.monotonic() + READ_BACK_TIMEOUT_S
            while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in partitions):
                for tp, batch in consumer.poll(timeout_ms=1000).items():
                    records[tp.partition].extend((r.offset, r.value.decode()) for r in batch)
            unread = {tp.partition: (consumer.position(tp), ends[tp]) for tp in partitions
                      if consumer.position(tp) < ends[tp]}
            return records, unread
        finally:
            consumer.close()

    def _audit(self, in_sync: bool) -> Report:
        log, unread = self._read_partitions()
        for partition, (position, end) in unread.items():
            self.log(f"warning: partition {partition} read only up to offset {position} of {end}")
        acks = {value: ack for producer in self.producers for value, ack in producer.acks.items()}
        offsets_of: dict[str, list[tuple[int, int]]] = {}
        for partition, records in log.items():
            for offset, value in records:
                offsets_of.setdefault(value, []).append((partition, offset))
        lost = sorted(v for v in acks if v not in offsets_of)
        duplicated = sorted(v for v, where in offsets_of.items() if len(where) > 1)
        misplaced = sorted(v for v, ack in acks.items()
                           if len(offsets_of.get(v, [])) == 1 and offsets_of[v][0] != (ack.partition, ack.offset))
        reordered = _reordered(log)
        value_at = {(partition, offset): value for partition, records in log.items() for offset, value in records}
        evidence = [
            Evidence(value, problem, acks.get(value), offsets_of.get(value, []),
                     value_at.get((acks[value].partition, acks[value].offset)) if value in acks else None)
            for problem, values in (("lost", lost), ("duplicated", duplicated), ("at another offset", misplaced),
                                    ("out of order", reordered))
            for value in values
        ]
        last_heal_s = max((r.healed_s or 0.0 for r in self.fault_log), default=0.0)
        return Report(
            seed=self.seed, topic=self.topic, duration_s=self._sending_stopped_s, faults=self.fault_log,
            sent=sum(p.sent for p in self.producers), acknowledged=len(acks),
            failures=sorted((f for p in self.producers for f in p.failures), key=lambda f: f.at_s),
            lost=lost, duplicated=duplicated, misplaced=misplaced, reordered=reordered,
            unacknowledged_present=sorted(v for v in offsets_of if v not in acks),
            windows=_unavailable_windows(acks, self.partitions, self._sending_stopped_s), last_heal_s=last_heal_s,
            acknowledged_after_last_heal=sum(1 for a in acks.values() if a.at_s > last_heal_s),
            in_sync_at_end=in_sync, evidence=evidence, unread=unread,
        )


def _reordered(log: dict[int, list[tuple[int, str]]]) -> list[str]:
    """Messages that come after a later message of the same producer in the same partition."""
    out_of_order = []
    for records in log.values():
        last_sequence: dict[str, int] = {}
        for _, value in records:
            producer, _, sequence = value.split(":")
            if int(sequence) <= last_sequence.get(producer, -1):
                out_of_order.append(value)
            last_sequence[producer] = max(int(sequence), last_sequence.get(producer, -1))
    return out_of_order


def _unavailable_windows(acks: dict[str, Ack], partitions: int, sending_stopped_s: float) -> list[Window]:
    """Per partition, the gaps between consecutive acknowledgements (from the start, and up to the
    moment the writers stopped sending) longer than UNAVAILABLE_AFTER_S."""
    windows = []
    for partition in range(partitions):
        times = sorted(a.at_s for a in acks.values() if a.partition == partition)
        ends_at = max(sending_stopped_s, times[-1] if times else 0.0)
        for start, end in zip([0.0, *times], [*times, ends_at]):
            if end - start > UNAVAILABLE_AFTER_S:
                windows.append(Window(partition, start, end))
    return sorted(windows, key=lambda w: w.start_s)


def render(report: Report):
    """The fault log, the unavailability windows, failed sends and the verdict, as rich renderables."""
    from rich.console import Group
    from rich.text import Text

    parts = [_fault_table(report), _window_table(report)]
    if report.failures:
        parts.append(_failure_table(report))
    if report.evidence:
        parts.append(_evidence_table(report))
    parts.extend(Text(line) for line in _summary(report))
    verdict = Text("PASS: every acknowledged message is present once, in order" if report.ok
                   else "FAIL: acknowledged messages were lost, duplicated, moved or reordered, or not all read",
                   style="green" if report.ok else "bold red")
    return Group(*parts, verdict)


def _fault_table(report: Report):
    from rich.table import Table

    refusals = any(record.error for record in report.faults)
    faults = Table(title=f"faults (seed {report.seed})")
    for column in ("at", "fault", "node", "healed at", *(("refused",) if refusals else ())):
        faults.add_column(column)
    for record in report.faults:
        healed = f"{record.healed_s:.1f}s" if record.healed_s is not None else "-"
        faults.add_row(f"{record.started_s:.1f}s", record.fault, str(record.node), healed,
                       *((record.error or "",) if refusals else ()))
    return faults


def _during(report: Report, start_s: float, end_s: float) -> str:
    """The faults that overlapped a stretch of the run."""
    return ", ".join(f"{r.fault} {r.node}" for r in report.faults
                     if r.started_s <= end_s and (r.healed_s or report.duration_s) >= start_s) or "-"


def _window_table(report: Report):
    from rich.table import Table

    windows = Table(title=f"writes unavailable for more than {UNAVAILABLE_AFTER_S:.0f}s")
    for column in ("partition", "from", "to", "length", "during"):
        windows.add_column(column)
    for window in report.windows:
        windows.add_row(str(window.partition), f"{window.start_s:.1f}s", f"{window.end_s:.1f}s",
                        f"{window.length_s:.2f}s", _during(report, window.start_s, window.end_s))
    return windows


def _failure_table(report: Report):
    """Failed sends grouped by partition and error, with the faults they fell into."""
    from rich.table import Table

    groups: dict[tuple[int, str], list[Failure]] = {}
    for failure in report.failures:
        groups.setdefault((failure.partition, failure.error), []).append(failure)
    table = Table(title="sends that failed (each may or may not have been written)")
    for column in ("partition", "error", "count", "from", "to", "during", "first message"):
        table.add_column(column)
    for (partition, name), failures in sorted(groups.items(), key=lambda g: g[1][0].at_s):
        first, last = failures[0], failures[-1]
        table.add_row(str(partition), name, str(len(failures)), f"{first.at_s:.1f}s", f"{last.at_s:.1f}s",
                      _during(report, first.at_s, last.at_s), f"{first.value}: {first.detail}")
    return table


def _evidence_table(report: Report, limit: int = 40):
    """Each message the audit found wrong: where it was acknowledged, where it is, and what replaced it."""
    from rich.table import Table

    table = Table(title="messages not where they were acknowledged")
    for column in ("message", "problem", "acknowledged at", "when", "during", "read back at", "now at that offset"):
        table.add_column(column)
    for item in report.evidence[:limit]:
        acked = f"{item.ack.partition}/{item.ack.offset}" if item.ack else "never"
        when = f"{item.ack.at_s:.2f}s" if item.ack else "-"
        during = _during(report, item.ack.at_s, item.ack.at_s) if item.ack else "-"
        found = ", ".join(f"{p}/{o}" for p, o in item.found) or "nowhere"
        table.add_row(item.value, item.problem, acked, when, during, found, item.at_acknowledged_offset or "-")
    if len(report.evidence) > limit:
        table.caption = f"{len(report.evidence) - limit} more not shown"
    return table


def _summary(report: Report) -> list[str]:
    failed = ", ".join(f"{count} {name}" for name, count in report.failed.items()) or "none"
    lines = [
        f"{report.sent} sent, {report.acknowledged} acknowledged, failed sends: {failed}",
        f"lost {len(report.lost)}, duplicated {len(report.duplicated)}, at another offset {len(report.misplaced)}, "
        f"out of order {len(report.reordered)}; {len(report.unacknowledged_present)} unacknowledged but written",
        f"longest unavailability {report.longest_unavailable_s:.2f}s (producer request.timeout.ms "
        f"{PRODUCER_REQUEST_TIMEOUT_MS}); {report.acknowledged_after_last_heal} acknowledged after the last "
        "fault was healed",
    ]
    if not report.in_sync_at_end:
        lines.append(f"warning: not every replica of {report.topic} was back in sync before the read-back")
    for partition, (position, end) in sorted(report.unread.items()):
        lines.append(f"partition {partition}: read only up to offset {position} of {end}")
    written = report.unacknowledged_present
    if written:
        lines.append(f"unacknowledged but written: {', '.join(written[:20])}{' ...' if len(written) > 20 else ''}")
    return lines
