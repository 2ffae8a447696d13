"""The failover checker: acks=all writers and a consumer group against a nemesis, then an audit.

Producers write numbered messages ("<producer>:<partition>:<sequence>") with acks=all to a
replicated topic, and the members of a consumer group read it (cluster/tools/group_readers.py),
while a nemesis hits one random node at a time with a random fault (kill, stop, pause, isolate,
delay) and heals it. Meanwhile members of the group restart, and with `rebalance` a node is
added and the planner's moves run, then a node is removed. Afterwards every partition is read
from its start and checked: each acknowledged message is present exactly once at its
acknowledged offset, each producer's messages in a partition are in order, the group read every
acknowledged message, read nothing the log does not hold, and never committed past the log's
end; the gaps between acknowledgements show how long writes were unavailable. Every message found
wrong is reported with where it was acknowledged, when, during which fault, and what the
partition holds there now; every error a client saw, expected during failover or not; every
line the cluster logged at ERROR meanwhile. The seed replays the choices of fault, node and times.
With `transactions`, transactional writers (cluster/tools/transaction_writers.py) write to two
topics of their own meanwhile, and a read_committed reader audits their transactions afterwards.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from cluster.formats.control import ControlError
from cluster.launch.cluster import Cluster, ClusterError
from cluster.tools import reassignment
from cluster.tools.failover_records import (
    Ack, ChangeRecord, Evidence, Failure, FaultRecord, Report, Window,
)
from cluster.tools.group_readers import CLASSIC, ClientError, GroupAudit, GroupReaders, committed_offsets
from cluster.tools.planner import PlannerError, balance_plan
from cluster.tools.topic_creations import TopicCreations
from cluster.tools.transaction_writers import TransactionWriters

FAULTS = ("kill", "stop", "pause", "isolate", "delay")
# With controller faults, the active controller is hit too, between the nodes' faults.
CONTROLLER_FAULTS = ("controller-kill", "controller-pause", "controller-isolate")
TRANSACTION_STATE_TOPIC = "__transaction_state"
DELAY_MS = 500
# The Cluster call (with its arguments after the node) that injects each fault, and the one that heals it.
INJECT = {"kill": ("kill_node",), "stop": ("stop_node",), "pause": ("pause_node",), "isolate": ("isolate_node",),
          "delay": ("delay_node", DELAY_MS)}
HEAL = {"kill": ("restart_node",), "stop": ("restart_node",), "pause": ("resume_node",), "isolate": ("heal_node",),
        "delay": ("heal_node",)}
INJECT.update({"controller-kill": ("kill_controller",), "controller-pause": ("pause_controller",),
               "controller-isolate": ("isolate_controller",)})
HEAL.update({"controller-kill": ("start_controller",), "controller-pause": ("resume_controller",),
             "controller-isolate": ("heal_controller",)})
DEFAULT_STRATEGY = "range,roundrobin"  # librdkafka's default partition.assignment.strategy
REBALANCE_THROTTLE_BYTES_PER_S = 50 << 20
CHANGE_TIMEOUT_S = 300
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
                 gap_s: tuple[float, float] = (1.0, 3.0), group_members: int = 3,
                 strategy: str = DEFAULT_STRATEGY, rebalance: bool = False, transactions: int = 0,
                 group_protocol: str = CLASSIC, controller_faults: bool = False, log=print):
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
        self.cluster = cluster
        self.duration_s = duration_s
        self.seed = seed if seed is not None else random.randrange(1 << 31)
        self.random = random.Random(self.seed)
        self.change_random = random.Random(self.seed + 1)  # the changes run in a thread of their own
        self.faults = faults + (CONTROLLER_FAULTS if controller_faults else ())
        self.controller_faults = controller_faults
        self.creations: TopicCreations | None = None  # with controller faults: an admin creating topics
        self.partitions = partitions
        self.topic = topic
        self.hold_s = hold_s  # how long a fault lasts, drawn uniformly from this range
        self.gap_s = gap_s  # the quiet time before the next fault, after the ISR is full again
        self.log = log
        self.producers = [_Producer(f"p{i}", partitions) for i in range(producers)]
        self.fault_log: list[FaultRecord] = []
        self.group_members, self.strategy, self.rebalance = group_members, strategy, rebalance
        self.group_protocol = group_protocol
        self.readers: GroupReaders | None = None
        self.change_log: list[ChangeRecord] = []
        # With transactional writers: the two topics they write, and the writers once started.
        self.transaction_topics = [f"{topic}-txn-a", f"{topic}-txn-b"] if transactions else []
        self.transactional_ids = transactions
        self.transaction_writers: TransactionWriters | None = None
        self._busy_nodes: set[int] = set()  # faulted, or being added or removed: left alone by the others
        self._busy_lock = threading.Lock()
        self._deck: list[str] = []
        self._stop = threading.Event()
        self._started = 0.0
        self._sending_stopped_s = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    # --- running ---

    def run(self) -> Report:
        group = f", a {self.group_protocol} group of {self.group_members} ({self.strategy or 'default assignor'})" \
            if self.group_members else ""
        transactional = f", {self.transactional_ids} transactional writers" if self.transactional_ids else ""
        self.log(f"failover check: seed {self.seed}, {self.duration_s:.0f}s, faults {', '.join(self.faults)}{group}"
                 f"{transactional}{', with a node added, a rebalance and a node removed' if self.rebalance else ''}")
        self._started = time.monotonic()  # (for what happens while the topics are made ready)
        self._create_topic()
        if self.transactional_ids:
            self.transaction_writers = TransactionWriters(
                self._connection(), self.transaction_topics, self.partitions, self.transactional_ids,
                self.seed, self._stop, self.elapsed, prefix=f"{self.topic}-txn").prepare()
            self._wait_until_healthy()  # (__transaction_state too, now that it exists)
        logs = _LogWatch(self.cluster)
        self._started = time.monotonic()
        if self.group_members:
            self.readers = GroupReaders(self._connection(), self.topic, f"{self.topic}-readers",
                                        self.group_members, self.strategy, self.elapsed,
                                        protocol=self.group_protocol).start()
        try:
            self._run_under_faults()
            return self._audit(self._wait_until_healthy(), logs)
        finally:
            if self.readers:
                self.readers.stop()

    def _run_under_faults(self) -> None:
        """Writers, changes and the nemesis until the run's end; then every fault healed."""
        threads = [threading.Thread(target=self._write, args=(p,), name=f"writer-{p.name}") for p in self.producers]
        changes = threading.Thread(target=self._changes, name="changes")
        for thread in [*threads, changes]:
            thread.start()
        if self.transaction_writers:
            self.transaction_writers.start()
        if self.controller_faults:
            # One replica fewer than the nodes: a creation still succeeds while one node is down.
            replicas = max(1, min(3, len(self.cluster.nodes) - 1))
            self.creations = TopicCreations(self._connection(), f"{self.topic}-created", replicas,
                                            self._stop, self.elapsed).start()
        try:
            self._nemesis()
        finally:
            self._stop.set()
            self._sending_stopped_s = self.elapsed()
            for thread in threads:
                thread.join(FLUSH_TIMEOUT_S + 30)
            if self.transaction_writers:
                self.transaction_writers.join(FLUSH_TIMEOUT_S + 30)
            if self.creations:
                self.creations.join(FLUSH_TIMEOUT_S)
            changes.join(CHANGE_TIMEOUT_S + 30)
            self._heal_everything()

    def _connection(self) -> dict:
        """librdkafka's settings that reach the cluster as its super user (TLS, SASL as it runs)."""
        return {"bootstrap.servers": self.cluster.bootstrap_servers, **self.cluster.client_config()}

    def _create_topic(self) -> None:
        replicas = min(3, len(self.cluster.nodes))
        existing = {t["name"] for t in self.cluster.status()["topics"]}
        for topic in [self.topic, *self.transaction_topics]:
            if topic in existing:
                raise ValueError(f"topic {topic} exists already: give the check a new one")
            self.cluster.create_topic(topic, partitions=self.partitions, replication_factor=replicas,
                                      config={"min.insync.replicas": str(min(2, replicas))})
        self._wait_until_healthy()

    def _write(self, producer: _Producer) -> None:
        client = KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers, acks="all", enable_idempotence=True,
                               request_timeout_ms=PRODUCER_REQUEST_TIMEOUT_MS, retry_backoff_ms=100, linger_ms=5,
                               delivery_timeout_ms=120_000, metadata_max_age_ms=2000,
                               **self.cluster.kafka_python_config())
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
        failure = Failure(partition, value, type(error).__name__, str(error), self.elapsed(),
                          expected=bool(getattr(error, "retriable", False)))
        with producer.lock:
            producer.failures.append(failure)

    # --- the nemesis ---

    def _nemesis(self) -> None:
        deadline = self._started + self.duration_s
        while not self._stop.wait(self.random.uniform(*self.gap_s)):
            hold_s = self.random.uniform(*self.hold_s)
            if time.monotonic() + hold_s + 2 > deadline:
                break
            fault = self._next_fault()
            on_controller = fault in CONTROLLER_FAULTS
            node = self._active_controller() if on_controller else self._take_node(self.random)
            if node is None:
                continue  # every node is being added or removed, or no controller is active
            record = FaultRecord(fault, node, self.elapsed())
            self.fault_log.append(record)
            self.log(f"{record.started_s:6.1f}s  {record.fault} {'' if on_controller else 'node '}{record.node}")
            if self._act(record, INJECT[record.fault]):
                self._stop.wait(hold_s)
            self._heal(record)
            if not on_controller:
                self._release_node(node)
            self._wait_until_healthy()
        self._stop.wait(max(0.0, deadline - time.monotonic()))

    def _next_fault(self) -> str:
        """Faults are dealt from a shuffled deck, so that a short run still meets every one."""
        if not self._deck:
            self._deck = self.random.sample(self.faults, len(self.faults))
        return self._deck.pop()

    def _take_node(self, chooser: random.Random) -> int | None:
        """A random node that no fault or change is busy with, now busy; None when there is none."""
        with self._busy_lock:
            free = [n for n in sorted(list(self.cluster.nodes)) if n not in self._busy_nodes]
            if not free:
                return None
            node = chooser.choice(free)
            self._busy_nodes.add(node)
            return node

    def _active_controller(self) -> int | None:
        try:
            return self.cluster.active_controller_id()
        except (ClusterError, ControlError, OSError) as exc:
            self.log(f"warning: no active controller to hit: {exc}")
            return None

    def _release_node(self, node: int) -> None:
        with self._busy_lock:
            self._busy_nodes.discard(node)

    def _act(self, record: FaultRecord, call: tuple) -> bool:
        """One Cluster call of a fault; a refusal is kept in the fault log rather than ending the run,
        so that the audit still tells what happened to the messages."""
        action, *arguments = call
        try:
            getattr(self.cluster, action)(record.node, *arguments)
            return True
        except (ClusterError, ControlError, OSError) as exc:
            record.error = f"{action}: {exc}"
            self.log(f"warning: {action}({record.node}) failed: {exc}")
            return False

    def _heal(self, record: FaultRecord) -> None:
        self._act(record, HEAL[record.fault])
        record.healed_s = self.elapsed()
        self.log(f"{record.healed_s:6.1f}s  healed {'controller' if record.fault in CONTROLLER_FAULTS else 'node'} "
                 f"{record.node}")

    def _heal_everything(self) -> None:
        for record in self.fault_log:
            if record.healed_s is None:
                self._heal(record)

    def _wait_until_healthy(self) -> bool:
        """Until every replica of the checked topics (and of the transactions' state, once there is
        some) is in sync again."""
        topics = [self.topic, *self.transaction_topics]
        if self.transaction_writers:
            topics.append(TRANSACTION_STATE_TOPIC)
        lagging = [topic for topic in topics if not self.cluster.wait_in_sync(topic, HEALTHY_TIMEOUT_S)]
        for topic in lagging:
            self.log(f"warning: replicas of {topic} not all in sync after {HEALTHY_TIMEOUT_S}s")
        return not lagging

    # --- changes of the group and of the cluster ---

    def _changes(self) -> None:
        """Members restart (with a group); with rebalance a node is added and the planner's moves run,
        then a node is removed: each at its fraction of the run, beside the faults."""
        schedule = []
        if self.readers:
            schedule += [(0.35, self._restart_member), (0.75, self._restart_member)]
        if self.rebalance:
            schedule += [(0.2, self._grow_and_rebalance), (0.55, self._remove_a_node)]
        for fraction, change in sorted(schedule, key=lambda item: item[0]):
            if self._stop.wait(max(0.0, self._started + fraction * self.duration_s - time.monotonic())):
                return
            change()

    def _change(self, name: str, action) -> None:
        record = ChangeRecord(name, self.elapsed())
        self.change_log.append(record)
        self.log(f"{record.started_s:6.1f}s  {name}")
        try:
            record.detail = action()
        except (ClusterError, ControlError, PlannerError, KafkaError, OSError) as exc:
            record.error = str(exc)
            self.log(f"warning: {name} failed: {exc}")
        record.finished_s = self.elapsed()
        self.log(f"{record.finished_s:6.1f}s  {record.detail or name + ' failed'}")

    def _restart_member(self) -> None:
        index = self.change_random.randrange(len(self.readers.members))
        old = self.readers.members[index].name
        self._change(f"restart group member {old}",
                     lambda: f"member {old} left, {self.readers.restart_one(index)} joined")

    def _grow_and_rebalance(self) -> None:
        with self._busy_lock:
            arriving = max(self.cluster.nodes) + 1
            self._busy_nodes.add(arriving)

        def grow() -> str:
            node_id = self.cluster.add_node()
            moves = balance_plan(self.cluster.assignment(), sorted(self.cluster.nodes), self.cluster.racks)
            reassignment.run_plan(self.cluster, moves, REBALANCE_THROTTLE_BYTES_PER_S, CHANGE_TIMEOUT_S)
            reassignment.elect_preferred(self.cluster, list(moves))
            return f"node {node_id} added, {len(moves)} partitions moved"

        try:
            self._change("add a node and rebalance", grow)
        finally:
            self._release_node(arriving)

    def _remove_a_node(self) -> None:
        node = self._take_node(self.change_random)
        if node is None:
            return

        def remove() -> str:
            self.cluster.remove_node(node, REBALANCE_THROTTLE_BYTES_PER_S, CHANGE_TIMEOUT_S)
            return f"node {node} removed"

        try:
            self._change(f"remove node {node}", remove)
        finally:
            self._release_node(node)

    # --- the audit ---

    def _read_partitions(self) -> tuple[dict[int, list[tuple[int, str]]], dict[int, tuple[int, int]]]:
        """Every record of every partition from its start to its end offset (the high watermark), and
        the partitions that could not be read to the end in time."""
        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, enable_auto_commit=False,
                                 **self.cluster.kafka_python_config())
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

    def _audit(self, in_sync: bool, logs: _LogWatch) -> Report:
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
        failures = sorted((f for p in self.producers for f in p.failures), key=lambda f: f.at_s)
        client_errors = [ClientError(f"producer {f.value.split(':')[0]}", f.error, f.detail, f.at_s, f.expected)
                         for f in failures]
        group = self._audit_group(set(acks), log) if self.readers else None
        if self.readers:
            client_errors += self.readers.errors
        transactions = self.transaction_writers.audit() if self.transaction_writers else None
        if self.transaction_writers:
            client_errors += self.transaction_writers.errors
        creations = self.creations.audit() if self.creations else None
        if self.creations:
            client_errors += self.creations.errors
        client_errors.sort(key=lambda e: e.at_s)
        return Report(
            seed=self.seed, topic=self.topic, duration_s=self._sending_stopped_s, faults=self.fault_log,
            sent=sum(p.sent for p in self.producers), acknowledged=len(acks),
            failures=failures,
            lost=lost, duplicated=duplicated, misplaced=misplaced, reordered=reordered,
            unacknowledged_present=sorted(v for v in offsets_of if v not in acks),
            windows=_unavailable_windows(acks, self.partitions, self._sending_stopped_s), last_heal_s=last_heal_s,
            acknowledged_after_last_heal=sum(1 for a in acks.values() if a.at_s > last_heal_s),
            in_sync_at_end=in_sync, evidence=evidence, unread=unread, changes=self.change_log, group=group,
            client_errors=client_errors, cluster_errors=logs.errors_since_start(), transactions=transactions,
            creations=creations,
        )

    def _audit_group(self, acknowledged: set[str], log: dict[int, list[tuple[int, str]]]) -> GroupAudit:
        """The group reads on until it has read every partition to its end, leaves, and is audited."""
        ends = {partition: (records[-1][0] + 1 if records else 0) for partition, records in log.items()}
        caught_up = self.readers.wait_caught_up(ends)
        if not caught_up:
            self.log("warning: the group did not read every partition to its end in time")
        self.readers.stop()
        final = committed_offsets(self._connection(), self.topic, self.readers.group, self.partitions)
        return self.readers.audit(acknowledged, log, ends, caught_up, final)


class _LogWatch:
    """The lines the cluster's processes log at ERROR from now on (the local backend's log files)."""

    def __init__(self, cluster: Cluster):
        self.directory = cluster.data_dir / "logs"
        self.sizes = {path: path.stat().st_size for path in self._logs()}

    def _logs(self) -> list:
        return sorted(self.directory.glob("*.log")) if self.directory.is_dir() else []

    def errors_since_start(self) -> list[str]:
        lines = []
        for path in self._logs():
            with open(path, "rb") as log_file:
                log_file.seek(self.sizes.get(path, 0))
                text = log_file.read().decode(errors="replace")
            lines += [f"{path.stem}: {line}" for line in text.splitlines() if " ERROR " in line]
        return lines


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
