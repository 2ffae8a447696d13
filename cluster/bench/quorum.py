"""`kraftwerk bench --quorum`: what a quorum of three controllers costs and how fast it fails over.

- Start-up: a 3-node cluster with three controllers, from the call to ready, beside one with one
  controller (each started `runs` times, medians).
- Failover, `runs` times on one quorum: the active controller killed, then how long until another
  is active (its own `quorum_role`), and until a CreateTopics through a Kafka admin client is
  answered without an error (asked again at once after each error). The killed controller is
  started again between runs.
- Idle cost: each controller's CPU over an idle window, as a share of one core, and its RSS.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from rich.table import Table

from cluster.bench.stats import cpu_seconds, rss_mb
from cluster.launch.cluster import Cluster

FAILOVER_TIMEOUT_S = 30


@dataclass
class QuorumFigures:
    startup_s: list[float]
    startup_one_controller_s: list[float]
    elected_s: list[float]
    created_s: list[float]
    idle_cpu_percent: dict[int, float]
    rss_mb: dict[int, float]
    active: int


def _ready_s(controllers: int) -> tuple[float, Cluster]:
    started = time.perf_counter()
    cluster = Cluster(nodes=3, controllers=controllers).start()
    return time.perf_counter() - started, cluster


def _startups(controllers: int, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        ready_s, cluster = _ready_s(controllers)
        cluster.stop()
        times.append(ready_s)
    return times


def _until_created(cluster: Cluster, name: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.client_config()})
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic(name, 1, 3)], request_timeout=FAILOVER_TIMEOUT_S)[name].result()
            return
        except KafkaException:
            continue
    raise TimeoutError(f"{name} not created within {FAILOVER_TIMEOUT_S} s of the failover")


def _failover(cluster: Cluster, run: int) -> tuple[float, float]:
    """(seconds to another active controller, seconds to a created topic) after killing the active one."""
    killed = cluster.active_controller_id()
    started = time.perf_counter()
    cluster.kill_controller(killed)
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while cluster.active_controller_id() == killed and time.monotonic() < deadline:
        pass
    elected_s = time.perf_counter() - started
    _until_created(cluster, f"after-failover-{run}")
    created_s = time.perf_counter() - started
    cluster.start_controller(killed)
    return elected_s, created_s


def measure(runs: int = 5, idle_seconds: float = 10) -> QuorumFigures:
    startups_one = _startups(1, runs)
    startups = _startups(3, runs - 1)
    ready_s, cluster = _ready_s(3)
    startups.append(ready_s)
    try:
        elected, created = [], []
        for run in range(runs):
            elected_s, created_s = _failover(cluster, run)
            elected.append(elected_s)
            created.append(created_s)
        time.sleep(2)  # the restarted controller catches up before the idle window
        pids = {controller_id: cluster.controllers[controller_id].pid for controller_id in cluster.controller_ids}
        before = {controller_id: cpu_seconds(pid) for controller_id, pid in pids.items()}
        time.sleep(idle_seconds)
        idle = {controller_id: (cpu_seconds(pid) - before[controller_id]) / idle_seconds * 100
                for controller_id, pid in pids.items()}
        rss = {controller_id: rss_mb(pid) for controller_id, pid in pids.items()}
        active = cluster.active_controller_id()
    finally:
        cluster.stop()
    return QuorumFigures(startups, startups_one, elected, created, idle, rss, active)


def table(figures: QuorumFigures) -> Table:
    result = Table(title="a quorum of three controllers, 3 nodes")
    for column in ("figure", "median", "runs"):
        result.add_column(column, justify="right" if column != "figure" else "left")
    def row(what: str, samples: list[float], unit: str) -> None:
        result.add_row(what, f"{statistics.median(samples):.3f} {unit}", ", ".join(f"{s:.3f}" for s in samples))
    row("ready, three controllers", figures.startup_s, "s")
    row("ready, one controller", figures.startup_one_controller_s, "s")
    row("active controller killed → another active", figures.elected_s, "s")
    row("active controller killed → CreateTopics answered", figures.created_s, "s")
    for controller_id in sorted(figures.idle_cpu_percent):
        role = "active" if controller_id == figures.active else "standby"
        result.add_row(f"controller {controller_id} idle ({role})",
                       f"{figures.idle_cpu_percent[controller_id]:.2f}% of a core",
                       f"RSS {figures.rss_mb[controller_id]:.0f} MB")
    return result


def main() -> None:
    from rich.console import Console

    Console().print(table(measure()))


if __name__ == "__main__":
    main()
