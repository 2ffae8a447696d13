"""Where an acks=all write's time goes, step by step: `python -m benchmarks.timeline`.

Starts a 3-node cluster with cluster.runtime.timeline switched on, makes `--rounds`
single-message acks=all writes of 100 bytes to a one-partition RF=3 topic with a confluent-kafka
producer (linger.ms=0), and lines up the steps that the client, the leader and both followers
marked during each write on the one clock they share. It prints, per step, the median time since
the client's produce call and since the step before: what the leader does before the data leaves
for the followers, the hop to each follower and its append, the hop back, the leader's handling of
both follower fetches, and the hop of the answer to the client.

Then the write's critical path in seven parts, each a median over the writes: four hops between
processes, each from where the sender starts writing (the Produce to the leader, the leader's
answer to the second follower, that follower's Fetch back, the answer to the client), and the work
between them (the leader's before the data leaves, that follower's, the leader's after its Fetch
arrives).

With `--replication-factor 1` there are no followers and no critical path: the table is the leader's
own steps. `--pin-leader` gives every thread of the leader one CPU and every other process (the
other nodes, the controller, this one and its client) the others, so that the leader's steps cost
what its own code costs in place. Last, the bench times the leader's log append alone in a tight
loop in this process: the same code as the "log appended" step, run warm.

Medians are taken per step over the writes, so they do not add up to the median write exactly.
Followers' steps are counted in the order they happened in each write, whichever follower it was.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cluster.bench.stats import percentile
from cluster.runtime import timeline

WARM_UP_ROUNDS = 300
CLIENT_SENDS, CLIENT_DELIVERED = "produce called", "delivery reported"
LEADER_STEP, FOLLOWER_STEP = "produce appended", "follower got answer"
# A step is shown when it happened in at least this share of the writes.
MOSTLY = 0.9

Marks = list[tuple[int, str]]
# One write's steps: (where, step, nth time in the write) -> microseconds since its produce call.
WriteSteps = dict[tuple, float]


def timed_writes(directory: str, rounds: int, replication_factor: int = 3,
                 pin_leader: bool = False) -> list[tuple[int, int]]:
    """(start, end) in perf_counter_ns of each write, with the nodes marking their steps in directory."""
    os.environ["KRAFTWERK_TIMELINE"] = directory  # read by the nodes at start-up, not by this process
    from confluent_kafka import Producer

    from cluster.bench.replication import VALUE, latency_topic
    from cluster.launch.cluster import Cluster

    with Cluster(nodes=3) as cluster:
        topic = latency_topic(cluster.bootstrap_servers, replication_factor)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "acks": "all",
                             "enable.idempotence": False})
        if pin_leader:
            leader = producer.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
            pin_apart(cluster.nodes[leader].pid,
                      [os.getpid(), cluster.controller_pid, *(node.pid for node in cluster.nodes.values())])
        writes = []
        for index in range(WARM_UP_ROUNDS + rounds):
            started = time.perf_counter_ns()
            producer.produce(topic, value=VALUE, partition=0)
            if producer.flush(30):
                raise RuntimeError("a write was not acknowledged within 30 s")
            if index >= WARM_UP_ROUNDS:
                writes.append((started, time.perf_counter_ns()))
    return writes


def warm_append_us(appends: int = 20_000) -> float:
    """Microseconds per leader append of one 100-byte record to a log of its own, in a tight loop in
    this process: the code of the "log appended" step, run warm."""
    from cluster.bench.replication import VALUE
    from cluster.formats.partition_log import PartitionLog
    from cluster.formats.records import encode_batch, validate_batches

    batch = encode_batch([(None, VALUE)], timestamp=int(time.time() * 1000))
    batches = validate_batches(batch)
    with tempfile.TemporaryDirectory(prefix="kraftwerk-append-") as directory:
        partition_log = PartitionLog(Path(directory) / "warm-0")
        started = time.perf_counter_ns()
        for _ in range(appends):
            partition_log.append(batch, leader_epoch=0, batches=batches)
        elapsed = time.perf_counter_ns() - started
        partition_log.close()
    return elapsed / appends / 1000


def pin_apart(alone: int, others: list[int]) -> None:
    """Every thread of process `alone` on the first CPU this process may use, every thread of the
    others on the rest: a diagnostic of what the leader's steps cost with a core to itself."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin-leader needs two CPUs at least")
    for pid in {alone, *others}:
        for thread in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(thread), cpus[:1] if pid == alone else cpus[1:])
            except ProcessLookupError:
                pass  # a thread that ended meanwhile


def read_marks(directory: str) -> tuple[Marks, Marks]:
    """(the leader's marks, both followers' marks merged), each sorted by time."""
    leader: Marks = []
    followers: Marks = []
    for path in Path(directory).glob(f"*{timeline.SUFFIX}"):
        marks = [(int(at), step) for at, step in (line.rstrip("\n").split(" ", 1) for line in path.open())]
        steps = {step for _, step in marks}
        if LEADER_STEP in steps:
            leader = marks
        elif FOLLOWER_STEP in steps:
            followers += marks
    return sorted(leader), sorted(followers)


def steps_of_writes(writes: list[tuple[int, int]], leader: Marks, followers: Marks) -> list[WriteSteps]:
    """Each write's steps, the client's included, timed from its produce call."""
    steps_of_each = []
    for start, end in writes:
        steps = {("client", CLIENT_SENDS, 1): 0.0}
        for where, marks in (("leader", leader), ("followers", followers)):
            seen: Counter = Counter()
            for at, step in _between(marks, start, end):
                seen[step] += 1
                steps[(where, step, seen[step])] = (at - start) / 1000
        steps[("client", CLIENT_DELIVERED, 1)] = (end - start) / 1000
        steps_of_each.append(steps)
    return steps_of_each


def step_offsets(steps_of_each: list[WriteSteps]) -> dict[tuple, list[float]]:
    """(where, step, nth time in the write) -> its microseconds since the produce call, over the writes."""
    offsets: dict[tuple, list[float]] = defaultdict(list)
    for steps in steps_of_each:
        for key, since_send in steps.items():
            offsets[key].append(since_send)
    return offsets


def _between(marks: Marks, start: int, end: int) -> Marks:
    return marks[bisect_left(marks, (start, "")):bisect_right(marks, (end, "\uffff"))]


# (part, step it starts at, step it ends at): (where, step, nth time in the write) as in step_offsets.
# A hop starts where the sender starts writing: a woken receiver may run before the write returns.
CRITICAL_PATH = (
    ("hop: the Produce to the leader", ("client", CLIENT_SENDS, 1), ("leader", "request read", 1)),
    ("leader, until it writes the second follower's answer", ("leader", "request read", 1),
     ("leader", "answer writing", 2)),
    ("hop: the second follower starting on its answer", ("leader", "answer writing", 2),
     ("followers", FOLLOWER_STEP, 2)),
    ("that follower, until it sends its next Fetch", ("followers", FOLLOWER_STEP, 2),
     ("followers", "follower sent fetch", 2)),
    ("hop: that Fetch read by the leader", ("followers", "follower sent fetch", 2), ("leader", "request read", 3)),
    ("leader, until it writes the Produce answer", ("leader", "request read", 3), ("leader", "answer writing", 3)),
    ("hop: the answer to the client", ("leader", "answer writing", 3), ("client", CLIENT_DELIVERED, 1)),
)


def critical_path(steps_of_each: list[WriteSteps]) -> list[tuple[str, float]]:
    """(part, median microseconds) of CRITICAL_PATH, over the writes that have both of its steps."""
    parts: dict[str, list[float]] = defaultdict(list)
    for at in steps_of_each:
        for name, start, end in CRITICAL_PATH:
            if start in at and end in at:
                parts[name].append(at[end] - at[start])
    return [(name, statistics.median(parts[name])) for name, _, _ in CRITICAL_PATH if parts[name]]


def critical_path_table(parts: list[tuple[str, float]]) -> Table:
    table = Table(title="its critical path: hops between processes and the work between them")
    table.add_column("part")
    table.add_column("median us", justify="right")
    for name, median in parts:
        table.add_row(name, f"{median:.0f}")
    hops = sum(median for name, median in parts if name.startswith("hop"))
    table.add_row("hops, together", f"{hops:.0f}")
    table.add_row("work, together", f"{sum(median for _, median in parts) - hops:.0f}")
    return table


def timeline_table(offsets: dict[tuple, list[float]], writes: int, replication_factor: int = 3) -> Table:
    rows = sorted(((statistics.median(times), key) for key, times in offsets.items() if len(times) >= MOSTLY * writes))
    table = Table(title=f"one acks=all write, RF={replication_factor}: median of {writes} writes")
    for column in ("step", "where", "us since produce called", "us since the step before"):
        table.add_column(column, justify="left" if column in ("step", "where") else "right")
    before = 0.0
    for median, (where, step, nth) in rows:
        name = step if nth == 1 else f"{step} ({_ordinal(nth)})"
        table.add_row(name, where, f"{median:.0f}", f"{median - before:.0f}")
        before = median
    return table


def _ordinal(nth: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(nth, f"{nth}th")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000, help="acks=all writes to time")
    parser.add_argument("--replication-factor", type=int, choices=(1, 3), default=3,
                        help="the topic's replicas: 1 times the leader's own steps alone")
    parser.add_argument("--pin-leader", action="store_true",
                        help="the leader on a CPU of its own, every other process and this one on the others")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kraftwerk-timeline-") as directory:
        writes = timed_writes(directory, args.rounds, args.replication_factor, args.pin_leader)
        leader, followers = read_marks(directory)
    if not leader or (args.replication_factor > 1 and not followers):
        raise SystemExit("the nodes wrote no timeline: did they stop gracefully?")
    durations = sorted((end - start) / 1000 for start, end in writes)
    console = Console()
    console.print(f"{len(writes)} writes: p50 {statistics.median(durations):.0f} us, "
                  f"p99 {percentile(durations, 0.99):.0f} us")
    steps_of_each = steps_of_writes(writes, leader, followers)
    console.print(timeline_table(step_offsets(steps_of_each), len(writes), args.replication_factor))
    if args.replication_factor > 1:
        console.print(critical_path_table(critical_path(steps_of_each)))
    console.print(f"the log append alone (\"produce validated\" to \"log appended\"), in a tight loop in this "
                  f"process: {warm_append_us():.1f} us each")


if __name__ == "__main__":
    main()
