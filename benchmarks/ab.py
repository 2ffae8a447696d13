"""A/B of acks=all latency against another commit: `python -m benchmarks.ab BASE`.

On a shared host the same code's acks=all latency moves from one minute to the next by more
than most single changes gain, so one run of each side says little. This checks BASE out
into a temporary git worktree and alternates runs of BASE and of this tree, `--pairs` times:
each run is a fresh 3-node cluster of that tree's code, `--rounds` single-message acks=all writes
of 100 bytes (a confluent-kafka producer, linger.ms=0) to a one-partition RF=3 topic, with each
node's CPU per write (user + kernel, from /proc) and the client's own. It prints every run as it
ends, then min / median per side. A change is worth keeping when it wins most pairs, not one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cluster.bench import stats

ROOT = Path(__file__).resolve().parent.parent
FIGURES = (("p50_ms", "p50", "ms"), ("p99_ms", "p99", "ms"), ("leader_us", "leader's CPU per write", "us"),
           ("followers_us", "both followers' CPU per write", "us"), ("client_us", "client's CPU per write", "us"))

# Run in a child whose imports come from the tree measured: its launcher starts that tree's nodes.
# It relies only on the launcher's Cluster, which every commit has (in cluster.launcher before the
# user floor moved to cluster/launch), and on cluster.bench.stats, whose source it is sent with.
_ONE_RUN = r'''
import json, os, sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
try:
    from cluster.launch.cluster import Cluster
except ImportError:
    from cluster.launcher import Cluster

rounds, warm_up = int(sys.argv[1]), 300

with Cluster(nodes=3) as cluster:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("ab", 1, 3)])["ab"].result(60)
    leader = admin.list_topics("ab", timeout=10).topics["ab"].partitions[0].leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": False})
    pids = {node_id: node.pid for node_id, node in cluster.nodes.items()}
    seconds = []
    for index in range(warm_up + rounds):
        if index == warm_up:
            before = {node_id: cpu_seconds(pid) for node_id, pid in pids.items()}
            client_before = sum(os.times()[:2])
        started = time.perf_counter()
        producer.produce("ab", value=b"v" * 100, partition=0)
        producer.flush(30)
        if index >= warm_up:
            seconds.append(time.perf_counter() - started)
    client = sum(os.times()[:2]) - client_before
    used = {node_id: cpu_seconds(pid) - before[node_id] for node_id, pid in pids.items()}
per_write_us = lambda cpu: cpu / rounds * 1e6
latency = spread(seconds)
print(json.dumps({"p50_ms": latency["p50"] * 1e3, "p99_ms": latency["p99"] * 1e3,
                  "leader_us": per_write_us(used[leader]),
                  "followers_us": per_write_us(sum(v for n, v in used.items() if n != leader)),
                  "client_us": per_write_us(client)}))
'''


def one_run(tree: Path, rounds: int) -> dict[str, float]:
    """One fresh cluster of `tree`'s code, measured; raises if the run fails."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONSAFEPATH", None)
    child = Path(stats.__file__).read_text() + _ONE_RUN
    result = subprocess.run([sys.executable, "-c", child, str(rounds)], cwd=tree, env=env,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"a run of {tree} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def worktree_of(commit: str, into: Path) -> str:
    """Check `commit` out (detached) at `into`; returns its short name."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), commit],
                   check=True, capture_output=True, text=True)
    return subprocess.run(["git", "-C", str(into), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()


def alternate(trees: dict[str, Path], pairs: int, rounds: int, console: Console) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {label: [] for label in trees}
    for pair in range(pairs):
        for label, tree in trees.items():
            figures = one_run(tree, rounds)
            runs[label].append(figures)
            console.print(f"pair {pair + 1}/{pairs} {label}: " + ", ".join(
                f"{name} {figures[key]:.3f} {unit}" if unit == "ms" else f"{name} {figures[key]:.0f} {unit}"
                for key, name, unit in FIGURES))
    return runs


def summary(runs: dict[str, list[dict]], pairs: int, rounds: int) -> Table:
    table = Table(title=f"acks=all RF=3, {pairs} alternating pairs of {rounds} writes: min / median")
    table.add_column("figure", justify="right")
    table.add_column("unit")
    for label in runs:
        table.add_column(label, justify="right")
    table.add_column("pairs this tree won", justify="right")
    base, ours = list(runs)
    for key, name, unit in FIGURES:
        cells = []
        for label in runs:
            values = [run[key] for run in runs[label]]
            digits = 3 if unit == "ms" else 0
            cells.append(f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f}")
        won = sum(mine[key] < theirs[key] for theirs, mine in zip(runs[base], runs[ours]))  # lower is better
        table.add_row(name, unit, *cells, f"{won} of {len(runs[ours])}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare this tree with (any git revision)")
    parser.add_argument("--pairs", type=int, default=6, help="alternating runs of each side")
    parser.add_argument("--rounds", type=int, default=3000, help="acks=all writes per run")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="kraftwerk-ab-") as scratch:
        base_tree = Path(scratch) / "base"
        base = worktree_of(args.base, base_tree)
        try:
            runs = alternate({f"base {base}": base_tree, "this tree": ROOT}, args.pairs, args.rounds, console)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
                           capture_output=True)
    console.print(summary(runs, args.pairs, args.rounds))


if __name__ == "__main__":
    main()
