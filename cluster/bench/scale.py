"""`kraftwerk bench --scale`: what a large idle cluster costs and how fast it answers.

One cluster of `nodes` nodes (9 by default) gets `topics` topics of 3 partitions and 3 replicas
(9,000 replicas by default) in one CreateTopics request, timed until its answer (which comes once
every live node has opened the new logs) and until every replica is in sync. Once the creation's
own work has settled, nothing is sent for `idle_seconds`: each node's share of a core and its
RSS over that window are the idle cost. Last, Metadata for every topic is timed as raw bytes on one
connection (cluster.bench.metadata.metadata_latency).

Creation time depends on the filesystem's state as much as on kraftwerk: on ext4, after many
files were created and deleted in the same place (a test run, an earlier bench), the same
creation takes several times as long, the difference kernel time in ext4's inode allocator. So
the nodes' CPU during the creation is printed too, in user space and in the kernel: a large
kernel share says the disk, not the cluster, was slow.
"""
from __future__ import annotations

import statistics
import tempfile
import time

from rich.console import Console
from rich.table import Table

from cluster.bench.metadata import (REPLICATION_FACTOR, TOPIC_PARTITIONS, bench_cluster, create_topics_time,
                                    metadata_latency)
from cluster.bench.replication import idle_cpu_and_rss
from cluster.bench.stats import user_and_kernel_cpu

SETTLE_S = 5  # ISR changes and first fetches that follow a creation are not idle cost
METADATA_VERSION = 12
PREFIX = "scale"


def scale_figures(nodes: int = 9, topics: int = 1000, idle_seconds: float = 20, metadata_requests: int = 200,
                  console: Console | None = None, parent_dir: str | None = None) -> Table:
    console = console or Console()
    parent_dir = parent_dir or tempfile.gettempdir()
    replicas = topics * TOPIC_PARTITIONS * REPLICATION_FACTOR
    console.log(f"starting {nodes} nodes in {parent_dir} and creating {topics} topics ({replicas:,} replicas)")
    with bench_cluster(nodes, parent_dir) as cluster:
        before = [user_and_kernel_cpu(node.pid) for node in cluster.nodes.values()]
        created_s = create_topics_time(cluster, topics, one_request=True, prefix=PREFIX)
        answered = time.perf_counter()
        for name in (f"{PREFIX}-{0:05d}", f"{PREFIX}-{topics - 1:05d}"):
            cluster.wait_in_sync(name, timeout=300)
        in_sync_s = created_s + time.perf_counter() - answered
        after = [user_and_kernel_cpu(node.pid) for node in cluster.nodes.values()]
        creation_user_s = sum(a[0] - b[0] for a, b in zip(after, before))
        creation_kernel_s = sum(a[1] - b[1] for a, b in zip(after, before))
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
    table.add_row("  nodes' CPU meanwhile, in user space (all nodes)", "s", f"{creation_user_s:.2f}")
    table.add_row("  nodes' CPU meanwhile, in the kernel (all nodes)", "s", f"{creation_kernel_s:.2f}")
    cpu = [node.cpu_percent for node in idle]
    table.add_row(f"idle CPU per node, mean over {idle_seconds:.0f} s", "% of a core", f"{statistics.mean(cpu):.2f}")
    table.add_row(f"idle CPU per node, max over {idle_seconds:.0f} s", "% of a core", f"{max(cpu):.2f}")
    table.add_row("RSS per idle node, max", "MB", f"{max(node.rss_mb for node in idle):.1f}")
    partitions = metadata["partitions"]
    for spread in ("p50", "p99", "max"):
        table.add_row(f"Metadata v{METADATA_VERSION}, all {partitions:,} partitions, {spread}", "ms",
                      f"{metadata[spread]:.2f}")
    console.print(table)
    return table
