"""The failover checker: acks=all writers against a nemesis, then an audit of every partition.

Producers write numbered messages ("<producer>:<partition>:<sequence>") with acks=all to a
replicated topic while a nemesis hits one random node at a time with a random fault (kill,
stop, pause, isolate) and heals it. Afterwards every partition is read from its start and
checked: each acknowledged message is present exactly once at its acknowledged offset, each
producer's messages in a partition are in order, and the gaps between acknowledgements show
how long writes were unavailable.
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError

from cluster.launcher import Cluster

FAULTS = ("kill", "stop", "pause", "isolate")
DEFAULT_TOPIC = "kraftwerk-failover-check"
UNAVAILABLE_AFTER_S = 1.0  # a gap between acknowledgements longer than this is reported
SEND_INTERVAL_S = 0.01
HEALTHY_TIMEOUT_S = 30
FLUSH_TIMEOUT_S = 60


@dataclass
class FaultRecord:
    fault: str
    node: int
    started_s: float
    healed_s: float | None = None


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
class Report:
    seed: int
    topic: str
    duration_s: float
    faults: list[FaultRecord]
    sent: int
    acknowledged: int
    failed: Counter
    lost: list[str]
    duplicated: list[str]
    misplaced: list[str]  # present once, but not at the offset its acknowledgement gave
    reordered: list[str]
    unacknowledged_present: int
    windows: list[Window]
    last_heal_s: float
    acknowledged_after_last_heal: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.misplaced or self.reordered)

    @property
    def longest_unavailable_s(self) -> float:
        return max((w.length_s for w in self.windows), default=0.0)


@dataclass
class _Producer:
    name: str
    partitions: int
    acks: dict[str, Ack] = field(default_factory=dict)
    failed: Counter = field(default_factory=Counter)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FailoverCheck:
    def __init__(self, cluster: Cluster, duration_s: float = 60, seed: int | None = None,
                 faults: tuple[str, ...] = FAULTS, producers: int = 2, partitions: int = 3,
                 topic: str = DEFAULT_TOPIC, log=print):
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
        self.log = log
        self.producers = [_Producer(f"p{i}", partitions) for i in range(producers)]
        self.fault_log: list[FaultRecord] = []
        self._stop = threading.Event()
        self._started = 0.0

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
            for writer in writers:
                writer.join(120)
            self._heal_everything()
        stopped_s = self.elapsed()
        self._wait_until_healthy()
        return self._audit(stopped_s)

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
                               request_timeout_ms=5000, retry_backoff_ms=100, linger_ms=5,
                               delivery_timeout_ms=120_000, metadata_max_age_ms=2000)
        sequence = 0
        try:
            while not self._stop.is_set():
                partition = sequence % self.partitions
                value = f"{producer.name}:{partition}:{sequence}"
                future = client.send(self.topic, value.encode(), partition=partition)
                future.add_callback(self._acknowledged, producer, value)
                future.add_errback(self._failed, producer)
                producer.sent += 1
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

    def _acknowledged(self, producer: _Producer, value: str, metadata) -> None:
        with producer.lock:
            producer.acks[value] = Ack(metadata.partition, metadata.offset, self.elapsed())

    @staticmethod
    def _failed(producer: _Producer, error) -> None:
        with producer.lock:
            producer.failed[type(error).__name__] += 1

    # --- the nemesis ---

    def _nemesis(self) -> None:
        deadline = self._started + self.duration_s
        while not self._stop.wait(self.random.uniform(1.0, 3.0)):
            hold_s = self.random.uniform(2.0, 5.0)
            if time.monotonic() + hold_s + 2 > deadline:
                break
            record = FaultRecord(self.random.choice(self.faults), self.random.choice(sorted(self.cluster.nodes)),
                                 self.elapsed())
            self.fault_log.append(record)
            self.log(f"{record.started_s:6.1f}s  {record.fault} node {record.node}")
            self._inject(record)
            self._stop.wait(hold_s)
            self._heal(record)
            record.healed_s = self.elapsed()
            self.log(f"{record.healed_s:6.1f}s  healed node {record.node}")
            self._wait_until_healthy()
        self._stop.wait(max(0.0, deadline - time.monotonic()))

    def _inject(self, record: FaultRecord) -> None:
        {
            "kill": self.cluster.kill_node,
            "stop": self.cluster.stop_node,
            "pause": self.cluster.pause_node,
            "isolate": self.cluster.isolate_node,
        }[record.fault](record.node)

    def _heal(self, record: FaultRecord) -> None:
        {
            "kill": self.cluster.restart_node,
            "stop": self.cluster.restart_node,
            "pause": self.cluster.resume_node,
            "isolate": self.cluster.heal_node,
        }[record.fault](record.node)

    def _heal_everything(self) -> None:
        for record in self.fault_log:
            if record.healed_s is None:
                self._heal(record)
                record.healed_s = self.elapsed()

    def _wait_until_healthy(self) -> None:
        if not self.cluster.wait_in_sync(self.topic, HEALTHY_TIMEOUT_S):
            self.log(f"warning: replicas of {self.topic} not all in sync after {HEALTHY_TIMEOUT_S}s")

    # --- the audit ---

    def _read_partitions(self) -> dict[int, list[tuple[int, str]]]:
        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, enable_auto_commit=False)
        try:
            partitions = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(partitions)
            consumer.seek_to_beginning()
            ends = consumer.end_offsets(partitions)
            records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(self.partitions)}
            deadline = time.monotonic() + 60
            while any(consumer.position(tp) < ends[tp] for tp in partitions) and time.monotonic() < deadline:
                for tp, batch in consumer.poll(timeout_ms=1000).items():
                    records[tp.partition].extend((r.offset, r.value.decode()) for r in batch)
            return records
        finally:
            consumer.close()

    def _audit(self, stopped_s: float) -> Report:
        log = self._read_partitions()
        acks = {value: ack for producer in self.producers for value, ack in producer.acks.items()}
        offsets_of: dict[str, list[tuple[int, int]]] = {}
        for partition, records in log.items():
            for offset, value in records:
                offsets_of.setdefault(value, []).append((partition, offset))
        lost = sorted(v for v in acks if v not in offsets_of)
        duplicated = sorted(v for v, where in offsets_of.items() if len(where) > 1)
        misplaced = sorted(v for v, ack in acks.items()
                           if len(offsets_of.get(v, [])) == 1 and offsets_of[v][0] != (ack.partition, ack.offset))
        last_heal_s = max((r.healed_s or 0.0 for r in self.fault_log), default=0.0)
        return Report(
            seed=self.seed, topic=self.topic, duration_s=stopped_s, faults=self.fault_log,
            sent=sum(p.sent for p in self.producers), acknowledged=len(acks),
            failed=sum((p.failed for p in self.producers), Counter()),
            lost=lost, duplicated=duplicated, misplaced=misplaced, reordered=_reordered(log),
            unacknowledged_present=sum(1 for v in offsets_of if v not in acks),
            windows=_unavailable_windows(acks, self.partitions, stopped_s), last_heal_s=last_heal_s,
            acknowledged_after_last_heal=sum(1 for a in acks.values() if a.at_s > last_heal_s),
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


def _unavailable_windows(acks: dict[str, Ack], partitions: int, stopped_s: float) -> list[Window]:
    windows = []
    for partition in range(partitions):
        times = sorted(a.at_s for a in acks.values() if a.partition == partition)
        for start, end in zip([0.0, *times], [*times, stopped_s]):
            if end - start > UNAVAILABLE_AFTER_S:
                windows.append(Window(partition, start, end))
    return sorted(windows, key=lambda w: w.start_s)


def render(report: Report):
    """The fault log, the unavailability windows and the verdict, as rich renderables."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    faults = Table(title=f"faults (seed {report.seed})")
    for column in ("at", "fault", "node", "healed at"):
        faults.add_column(column)
    for record in report.faults:
        faults.add_row(f"{record.started_s:.1f}s", record.fault, str(record.node),
                       f"{record.healed_s:.1f}s" if record.healed_s is not None else "-")
    windows = Table(title=f"writes unavailable for more than {UNAVAILABLE_AFTER_S:.0f}s")
    for column in ("partition", "from", "to", "length", "during"):
        windows.add_column(column)
    for window in report.windows:
        during = [f"{r.fault} {r.node}" for r in report.faults
                  if r.started_s <= window.end_s and (r.healed_s or report.duration_s) >= window.start_s]
        windows.add_row(str(window.partition), f"{window.start_s:.1f}s", f"{window.end_s:.1f}s",
                        f"{window.length_s:.2f}s", ", ".join(during) or "-")
    failed = ", ".join(f"{count} {name}" for name, count in report.failed.items()) or "none"
    summary = [
        f"{report.sent} sent, {report.acknowledged} acknowledged, failed sends: {failed}",
        f"lost {len(report.lost)}, duplicated {len(report.duplicated)}, at another offset {len(report.misplaced)}, "
        f"out of order {len(report.reordered)}; {report.unacknowledged_present} unacknowledged but written",
        f"longest unavailability {report.longest_unavailable_s:.2f}s; "
        f"{report.acknowledged_after_last_heal} acknowledged after the last fault was healed",
    ]
    for name, values in (("lost", report.lost), ("duplicated", report.duplicated),
                         ("at another offset", report.misplaced), ("out of order", report.reordered)):
        if values:
            summary.append(f"{name}: {', '.join(values[:20])}{' ...' if len(values) > 20 else ''}")
    verdict = Text("PASS: every acknowledged message is present once, in order" if report.ok
                   else "FAIL: acknowledged messages were lost, duplicated or reordered",
                   style="green" if report.ok else "bold red")
    return Group(faults, windows, *(Text(line) for line in summary), verdict)
