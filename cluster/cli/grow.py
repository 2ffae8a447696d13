"""`kraftwerk node add|remove`, `rebalance` and `reassign`: growing, shrinking and evening out a running
cluster, and moving partitions as a plan says."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.table import Table

from cluster.cli.app import attached, console, data_dir_option, json_option, print_json
from cluster.cli.errors import fail
from cluster.launch.cluster import Cluster, ClusterError
from cluster.tools.planner import PlannerError, balance_plan, leader_counts, replica_counts
from cluster.tools.reassignment import elect_preferred
from cluster.tools.reassignment_plan import plan_document

MB = 1 << 20
throttle_option = click.option("--throttle", type=float, default=None, metavar="MB/S",
                               help="cap replication traffic of the moves at this rate")


@click.command("add")
@click.option("--rack", default=None, help="the new node's broker.rack")
@data_dir_option
def node_add(rack, data_dir):
    """Start a node with the next free id in the running cluster."""
    cluster = attached(data_dir)
    try:
        node_id = cluster.add_node(rack=rack)
    except ClusterError as exc:
        fail(str(exc))
    where = f" in rack {rack}" if rack else ""
    click.echo(f"node {node_id} joined{where} at {cluster.host}:{cluster.nodes[node_id].port}")


@click.command("remove")
@click.argument("node_id", type=int)
@throttle_option
@data_dir_option
def node_remove(node_id, throttle, data_dir):
    """Decommission NODE_ID: move its replicas away, stop it, unregister it and delete its data."""
    cluster = attached(data_dir)
    try:
        cluster.remove_node(node_id, throttle_bytes_per_s=_bytes_per_s(throttle))
    except ClusterError as exc:
        fail(str(exc))
    click.echo(f"node {node_id} removed; nodes now {', '.join(map(str, sorted(cluster.nodes)))}")


def _bytes_per_s(mb_per_s: float | None) -> int | None:
    if mb_per_s is not None and mb_per_s <= 0:
        fail(f"--throttle must be a positive rate in MB/s, got {mb_per_s}")
    return None if mb_per_s is None else int(mb_per_s * MB)


@click.command()
@click.option("--dry-run", is_flag=True, help="print the plan, move nothing")
@throttle_option
@click.option("--plan-out", type=click.Path(dir_okay=False), default=None,
              help="write the plan as kafka-reassign-partitions.sh JSON (for reassign --file)")
@data_dir_option
def rebalance(dry_run, throttle, plan_out, data_dir):
    """Even out replicas and leaders over the nodes (±1 each) with the fewest moves, respecting racks."""
    cluster = attached(data_dir)
    rate = _bytes_per_s(throttle)
    before = cluster.assignment()
    try:
        moves = balance_plan(before, sorted(cluster.nodes), cluster.racks)
    except PlannerError as exc:
        fail(str(exc))
    _print_plan(before, moves, sorted(cluster.nodes))
    if plan_out:
        Path(plan_out).write_text(json.dumps(plan_document(moves), indent=2) + "\n")
        click.echo(f"plan written to {plan_out}")
    if dry_run or not moves:
        return
    try:
        _run_with_progress(cluster, moves, rate)
        elect_preferred(cluster, list(moves))
    except ClusterError as exc:
        fail(str(exc))
    after = cluster.assignment()
    click.echo("replicas per node: " + _counts(replica_counts(after, sorted(cluster.nodes))))
    click.echo("leaders per node:  " + _counts(leader_counts(after, sorted(cluster.nodes))))


def _counts(counts: dict[int, int]) -> str:
    return ", ".join(f"{node_id}: {count}" for node_id, count in sorted(counts.items()))


def _print_plan(before: dict, moves: dict, nodes: list[int]) -> None:
    after = {**before, **moves}
    click.echo(f"{len(moves)} of {len(before)} partitions change")
    for (topic, partition), replicas in sorted(moves.items()):
        click.echo(f"  {topic}-{partition}: {before[(topic, partition)]} -> {replicas}")
    click.echo("replicas per node: " + _counts(replica_counts(before, nodes)) + "  ->  "
               + _counts(replica_counts(after, nodes)))
    click.echo("leaders per node:  " + _counts(leader_counts(before, nodes)) + "  ->  "
               + _counts(leader_counts(after, nodes)))


def _run_with_progress(cluster: Cluster, moves: dict, rate: int | None) -> None:
    """Start the moves, then show partitions done, bytes left and the rate until none is moving."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    before = cluster.assignment()
    cluster.start_moves(moves, rate)
    columns = (TextColumn("moving"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} partitions"),
               TextColumn("{task.fields[left]}"), TextColumn("{task.fields[rate]}"), TimeElapsedColumn())
    started, total_left = time.monotonic(), _bytes_left(cluster, before, moves, set(moves))
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("moving", total=len(moves), left="", rate="")
        settled = False
        while not settled:
            settled = cluster.wait_reassigned(list(moves), timeout=1)  # wakes early when the moves end
            moving = set(cluster.list_reassignments()) & set(moves)
            left = _bytes_left(cluster, before, moves, moving)
            speed = max(total_left - left, 0) / max(time.monotonic() - started, 1e-3)
            progress.update(task, completed=len(moves) - len(moving), left=f"{left / MB:.1f} MB left",
                            rate=f"{speed / MB:.1f} MB/s")
    if rate is not None:
        cluster.clear_throttles()


def _bytes_left(cluster: Cluster, before: dict, moves: dict, moving: set) -> int:
    """For each partition still moving, what its new replicas lack of the bytes a current replica holds."""
    left = 0
    for key in moving:
        source = before[key][0]
        have = _partition_bytes(cluster, source, key)
        left += sum(max(have - _partition_bytes(cluster, r, key), 0) for r in moves[key] if r not in before[key])
    return left


def _partition_bytes(cluster: Cluster, node_id: int, key: tuple[str, int]) -> int:
    node_process = cluster.nodes.get(node_id)
    directory = node_process.data_dir / f"{key[0]}-{key[1]}" if node_process else None
    if directory is None or not directory.is_dir():
        return 0
    return sum(segment.stat().st_size for segment in directory.glob("*.log"))


@click.command()
@click.option("--file", "plan_file", type=click.Path(dir_okay=False), default=None,
              help="a plan in kafka-reassign-partitions.sh's JSON: move these partitions")
@click.option("--status", "show_status", is_flag=True, help="list the moves in progress")
@click.option("--cancel", is_flag=True, help="cancel the moves of the partitions in --file")
@click.option("--throttle", type=int, default=None, metavar="BYTES_PER_S",
              help="cap the moves' replication at this rate (Kafka's --throttle), until they are done")
@click.option("--wait", is_flag=True, help="return once the moves are complete, then lift the throttle")
@data_dir_option
@json_option
def reassign(plan_file, show_status, cancel, throttle, wait, data_dir, as_json):
    """Move partitions to other nodes as a kafka-reassign-partitions.sh plan says, or show moves in progress."""
    if show_status == bool(plan_file):
        raise click.UsageError("give either --file PLAN or --status")
    cluster = attached(data_dir)
    if show_status:
        _print_reassignments(cluster.list_reassignments(), as_json)
        return
    moves = _read_plan_file(plan_file)
    if cancel:
        moves = {key: None for key in moves}
    refused = {key: error for key, error in cluster.reassign(moves, throttle_bytes_per_s=throttle).items() if error}
    for (topic_name, partition), error in sorted(refused.items()):
        click.echo(f"{topic_name}-{partition}: {error}", err=True)
    if refused:
        fail(f"{len(refused)} of {len(moves)} partitions were refused")
    click.echo(f"{'cancelled' if cancel else 'started'} the reassignment of {len(moves)} partitions")
    if wait and not cancel:
        started = time.monotonic()
        while not cluster.wait_reassigned(list(moves), timeout=60):
            click.echo(f"{len(cluster.list_reassignments())} partitions still moving")
        click.echo(f"reassignment complete in {time.monotonic() - started:.1f} s")
        if throttle is not None:
            cluster.clear_throttles()


def _read_plan_file(path: str) -> dict:
    from cluster.tools.reassignment_plan import PlanError, read_plan

    try:
        return read_plan(Path(path).read_text())
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")
    except PlanError as exc:
        fail(f"{path} is not a reassignment plan: {exc}")


def _print_reassignments(ongoing: dict, as_json: bool) -> None:
    rows = [{"topic": topic_name, "partition": partition, **moving}
            for (topic_name, partition), moving in sorted(ongoing.items())]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("no partition reassignment is in progress")
        return
    table = Table(title="reassignments in progress")
    for column in ("topic", "partition", "replicas", "adding", "removing"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["topic"], str(row["partition"]), *(",".join(map(str, row[k])) for k in (
            "replicas", "adding_replicas", "removing_replicas")))
    console.print(table)
