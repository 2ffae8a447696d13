"""`kraftwerk bench --scale`: what a large idle cluster costs and how fast it answers.

One cluster of `nodes` nodes (9 by default) gets `topics` topics of 3 partitions and 3 replicas
(9,000 replicas by default) in one CreateTopics request, timed until its answer (which comes once
every live node has opened the new logs) and until every replica is in sync. Once the creation's
own work has settled, nothing is sent for `idle_seconds`: each node's share of a core and its
RSS over that window are the idle cost. Last, Metadata for every topic is timed as raw bytes on one
connection (cluster.bench_metadata.metadata_latency).

Creation time depends on the filesystem's state as much as on kraftwerk: on ext4 mounted with
`discard`, creating files right after a large directory tree was deleted took 2-3x as long here,
all of it kernel time. So before the cluster starts, one process creates the same replica
directories and files in the same place (`filesystem_baseline`): a slow baseline says the disk,
not the cluster, is slow today.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from rich.console import Console
from rich.table import Table

from cluster.bench_metadata import (REPLICATION_FACTOR, TOPIC_PARTITIONS, bench_cluster, create_topics_time,
                                    metadata_latency)
from cluster.bench_replication import idle_cpu_and_rss
from cluster.formats.log import write_atomically

SETTLE_S = 5  # ISR changes and first fetches that follow a creation are not idle cost
METADATA_VERSION = 12
PREFIX = "scale"


def filesystem_baseline(parent_dir: str, replicas: int) -> tuple[float, str]:
    """(seconds one process takes to create `replicas` directories in parent_dir, each with an empty
    log and two small files written through a rename, as a new replica has; the directory holding
    them, for the caller to remove once it has measured what depends on the disk)."""
    root = tempfile.mkdtemp(prefix="kraftwerk-bench-baseline-", dir=parent_dir)
    started = time.perf_counter()
    for index in range(replicas):
        directory = os.path.join(root, f"{PREFIX}-{index}")
        os.mkdir(directory)
        os.close(os.open(os.path.join(directory, "00000000000000000000.log"), os.O_WRONLY | os.O_CREAT, 0o644))
        write_atomically(os.path.join(directory, "partition.metadata"), "version: 0\n")
        write_atomically(os.path.join(directory, "leader-epoch-checkpoint"), "0\n1\n0 0\n")
    return time.perf_counter() - started, root


def scale_figures(nodes: int = 9, topics: int = 1000, idle_seconds: float = 20, metadata_requests: int = 200,
                  console: Console | None = None, parent_dir: str | None = None) -> Table:
    console = console or Console()
    parent_dir = parent_dir or tempfile.gettempdir()
    replicas = topics * TOPIC_PARTITIONS * REPLICATION_FACTOR
    baseline_s, baseline_dir = filesystem_baseline(parent_dir, replicas)
    try:
        table = _scale_table(nodes, topics, idle_seconds, metadata_requests, console, parent_dir, baseline_s)
    finally:
        shutil.rmtree(baseline_dir, ignore_errors=True)
    console.print(table)
    return table


def _scale_table(nodes: int, topics: int, idle_seconds: float, metadata_requests: int, console: Console,
                 parent_dir: str, baseline_s: float) -> Table:
    replicas = topics * TOPIC_PARTITIONS * REPLICATION_FACTOR
    console.log(f"starting {nodes} nodes in {parent_dir} and creating {topics} topics ({replicas:,} replicas)")
    with bench_cluster(nodes, parent_dir) as cluster:
        created_s = create_topics_time(cluster, topics, one_request=True, prefix=PREFIX)
        answered = time.perf_counter()
        for name in (f"{PREFIX}-{0:05d}", f"{PREFIX}-{topics - 1:05d}"):
            cluster.wait_in_sync(name, timeout=300)
        in_sync_s = created_s + time.perf_counter() - answered
        cluster.wait_ready()
        console.log(f"created in {created_s:.2f} s; letting it settle, then {idle_seconds:.0f} s without traffic")
        time.sleep(SETTLE_S)
        idle = idle_cpu_and_rss(cluster, idle_seconds)
        metadata_latency(cluster, requests=5, version=METADATA_VERSION)  # the first answers after a change build
        metadata = metadata_latency(cluster, metadata_requests, METADATA_VERSION)
    table = Table(title=f"kraftwerk bench --scale: {nodes} nodes, {topics:,} topics x {TOPIC_PARTITIONS} partitions "
                        f"x RF {REPLICATION_FACTOR} ({replicas:,} replicas)")
    for column in ("figure", "unit", "value"):
        table.add_column(column, justify="right")
    table.add_row(f"CreateTopics, {topics:,} topics in one request", "s", f"{created_s:.2f}")
    table.add_row("  until every replica is in sync", "s", f"{in_sync_s:.2f}")
    table.add_row(f"  the filesystem alone: {replicas:,} such directories, one process", "s", f"{baseline_s:.2f}")
    cpu = [node.cpu_percent for node in idle]
    table.add_row(f"idle CPU per node, mean over {idle_seconds:.0f} s", "% of a core", f"{statistics.mean(cpu):.2f}")
    table.add_row(f"idle CPU per node, max over {idle_seconds:.0f} s", "% of a core", f"{max(cpu):.2f}")
    table.add_row("RSS per idle node, max", "MB", f"{max(node.rss_mb for node in idle):.1f}")
    partitions = metadata["partitions"]
    for spread in ("p50", "p99", "max"):
        table.add_row(f"Metadata v{METADATA_VERSION}, all {partitions:,} partitions, {spread}", "ms",
                      f"{metadata[spread]:.2f}")
    return table
