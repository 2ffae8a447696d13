"""`kraftwerk bench` and `check-failover`: figures from a fresh cluster, and the nemesis that checks
acknowledged writes survive faults."""
from __future__ import annotations

import sys
import time

import click

from cluster.cli.app import attached, console, data_dir_option
from cluster.launch.cluster import ClusterError
from cluster.tools.failover_check import DEFAULT_STRATEGY, FAULTS, FailoverCheck


@click.command()
@click.option("--nodes", type=int, default=3, show_default=True)
@click.option("--messages", type=int, default=200_000, show_default=True)
@click.option("--value-size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=6, show_default=True)
@click.option("--down-runs", type=int, default=10, show_default=True,
              help="how many fresh clusters to stop for the cluster down figures (0: none)")
@click.option("--against-mock", is_flag=True,
              help="instead: client throughput side by side with librdkafka's mock cluster (RF=3, 4 partitions, "
                   "100-byte values, 1 MB values fetch), each figure with its ratio")
@click.option("--large-values", type=int, default=1000, show_default=True,
              help="with --against-mock: how many 1 MB values the large fetch figure reads")
@click.option("--latency-rounds", type=int, default=2000, show_default=True,
              help="with --against-mock: single-message acks=all writes per latency figure")
@click.option("--startup-runs", type=int, default=10, show_default=True,
              help="how many fresh clusters of 3 and of 9 nodes to start for the start-up figures (0: none)")
@click.option("--scale", is_flag=True,
              help="instead: a large idle cluster's creation time, CPU, memory and Metadata round trip")
@click.option("--scale-nodes", type=int, default=9, show_default=True, help="with --scale: nodes")
@click.option("--scale-topics", type=int, default=1000, show_default=True,
              help="with --scale: topics of 3 partitions and 3 replicas")
@click.option("--scale-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="with --scale: where the cluster's data lives [default: the system's temporary directory]")
@click.option("--idle-seconds", type=float, default=20, show_default=True, help="with --scale: the idle window")
@click.option("--metadata-requests", type=int, default=200, show_default=True,
              help="with --scale: Metadata requests timed")
@click.option("--quorum", is_flag=True,
              help="a quorum of three controllers: start-up, the active one killed (to a new one and to a "
                   "created topic), idle CPU and RSS per controller")
def bench(nodes, messages, value_size, partitions, down_runs, against_mock, large_values, latency_rounds,
          startup_runs, scale, scale_nodes, scale_topics, scale_dir, idle_seconds, metadata_requests, quorum):
    """Start a fresh cluster on free ports and print start-up, produce, fetch, failover and stop figures
    (--against-mock: side by side with librdkafka's mock cluster; --scale: a 9,000-replica cluster;
    --quorum: a quorum of three controllers)."""
    if against_mock:
        from cluster.bench.against_mock import side_by_side

        side_by_side(nodes=nodes, replication_factor=min(3, nodes), messages=messages, large_values=large_values,
                     console=console, latency_rounds=latency_rounds)
        return
    if quorum:
        from cluster.bench import quorum as quorum_bench

        console.print(quorum_bench.table(quorum_bench.measure()))
        return
    if scale:
        from cluster.bench.scale import scale_figures

        scale_figures(nodes=scale_nodes, topics=scale_topics, idle_seconds=idle_seconds,
                      metadata_requests=metadata_requests, console=console, parent_dir=scale_dir)
        return
    from cluster.bench.standard import run_benchmark

    run_benchmark(nodes=nodes, messages=messages, value_size=value_size, partitions=partitions, console=console,
                  down_runs=down_runs, startup_runs=startup_runs)


def _seconds_range(ctx, param, value: str) -> tuple[float, float]:
    """"2-5" -> (2.0, 5.0): the range a random duration is drawn from."""
    try:
        low, high = (float(part) for part in value.split("-"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected MIN-MAX in seconds, such as 2-5") from None
    if not 0 <= low <= high:
        raise click.BadParameter(f"{value!r}: expected 0 <= MIN <= MAX")
    return low, high


def _strategy(chosen: str | None, group_protocol: str) -> str:
    """What the members ask for: a classic group's partition.assignment.strategy is librdkafka's default
    unless chosen; a consumer group's assignor is the group's own unless chosen."""
    if chosen is not None:
        return chosen
    return "" if group_protocol == "consumer" else DEFAULT_STRATEGY


@click.command("check-failover")
@click.option("--duration", type=float, default=60, show_default=True, help="seconds of writes under faults")
@click.option("--seed", type=int, default=None, help="replay the faults and changes of an earlier run")
@click.option("--faults", default=",".join(FAULTS), show_default=True,
              help="comma-separated faults the nemesis picks from")
@click.option("--hold", default="2-5", show_default=True, callback=_seconds_range,
              help="MIN-MAX seconds each fault lasts")
@click.option("--gap", default="1-3", show_default=True, callback=_seconds_range,
              help="MIN-MAX seconds between faults, once every replica is back in sync")
@click.option("--producers", type=int, default=2, show_default=True)
@click.option("--partitions", type=int, default=3, show_default=True)
@click.option("--group-members", type=int, default=3, show_default=True,
              help="members of a consumer group reading the topic meanwhile (0: no group)")
@click.option("--group-protocol", type=click.Choice(["classic", "consumer"]), default="classic", show_default=True,
              help="the members' group.protocol: consumer makes them a KIP-848 consumer group")
@click.option("--strategy", default=None,
              help=f"the members' partition.assignment.strategy (classic, default {DEFAULT_STRATEGY}; e.g. "
                   "cooperative-sticky), or with --group-protocol consumer their group.remote.assignor "
                   "(uniform or range; default: the group's)")
@click.option("--rebalance", is_flag=True,
              help="also add a node and run the planner's moves, then remove a node, during the run")
@click.option("--transactions", is_flag=True,
              help="also run transactional writers over two topics of their own (TOPIC-txn-a, TOPIC-txn-b), "
                   "some transactions aborted on purpose, and audit them with a read_committed reader")
@click.option("--transactional-ids", type=int, default=3, show_default=True,
              help="with --transactions: how many transactional producers write")
@click.option("--controller-faults", is_flag=True,
              help="also kill, pause and isolate the active controller between the nodes' faults while an admin "
                   "client creates topics (TOPIC-created-N), and check that every acknowledged creation exists")
@click.option("--topic", default=None, help="a new topic to write [default: kraftwerk-failover-check-<time>]")
@data_dir_option
def check_failover(duration, seed, faults, hold, gap, producers, partitions, group_members, group_protocol, strategy,
                   rebalance, transactions, transactional_ids, controller_faults, topic, data_dir):
    """Write numbered messages with acks=all, and read them in a consumer group, while random nodes are
    killed, stopped, paused, isolated and delayed one at a time (and, with --rebalance, a node is added
    and one removed); then check that every acknowledged message is there once and in order, and the
    group read them all (with --transactions: every committed transaction whole, once and in order at
    read_committed, and no aborted one; with --controller-faults: every acknowledged topic creation
    exists). Exits 1 if any was lost, duplicated, moved or reordered, the
    group missed one, a transaction was not all-or-nothing, a client saw an error failover does not
    explain, or the cluster logged at ERROR."""
    from cluster.tools.failover_report import render

    cluster = attached(data_dir)
    try:
        check = FailoverCheck(cluster, duration_s=duration, seed=seed,
                              faults=tuple(f.strip() for f in faults.split(",") if f.strip()),
                              hold_s=hold, gap_s=gap, producers=producers, partitions=partitions,
                              group_members=group_members, group_protocol=group_protocol,
                              strategy=_strategy(strategy, group_protocol),
                              rebalance=rebalance,
                              transactions=transactional_ids if transactions else 0,
                              controller_faults=controller_faults,
                              topic=topic or f"kraftwerk-failover-check-{int(time.time())}", log=console.print)
        report = check.run()
    except (ValueError, ClusterError) as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(render(report))
    sys.exit(0 if report.ok else 1)
