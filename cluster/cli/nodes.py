"""`kraftwerk node kill|stop|start|...`: faults for one node of a running cluster."""
from __future__ import annotations

from contextlib import contextmanager

import click

from cluster.cli.app import attached, data_dir_option
from cluster.cli.errors import fail
from cluster.formats.control import ControlError
from cluster.launch.cluster import Cluster, ClusterError


@click.group()
def node():
    """Faults for one node of a running cluster: kill, stop, start, restart, pause, resume, isolate, heal,
    delay, inject-error."""


def attached_node(data_dir: str, node_id: int) -> Cluster:
    cluster = attached(data_dir)
    if node_id not in cluster.nodes:
        raise click.ClickException(f"no node {node_id} in this cluster (nodes {sorted(cluster.nodes)})")
    return cluster


def _node_action(action: str, help_text: str):
    @node.command(action, help=help_text)
    @click.argument("node_id", type=int)
    @data_dir_option
    def command(node_id, data_dir):
        cluster = attached_node(data_dir, node_id)
        _check_node_state(cluster, node_id, action)
        {
            "kill": cluster.kill_node,
            "stop": cluster.stop_node,
            "start": cluster.restart_node,
            "restart": cluster.restart_node,
            "pause": cluster.pause_node,
            "resume": cluster.resume_node,
        }[action](node_id)
        click.echo(f"node {node_id}: {action} done")
    return command


def _check_node_state(cluster: Cluster, node_id: int, action: str) -> None:
    """kill, stop, pause and resume need a running node; start one that is not."""
    alive = cluster.nodes[node_id].alive()
    if action == "start" and alive:
        fail(f"node {node_id} is already running (kraftwerk node restart {node_id} restarts it)")
    if action in ("kill", "stop", "pause", "resume") and not alive:
        fail(f"node {node_id} is not running (kraftwerk node start {node_id} starts it)")


for _action, _help in (
    ("kill", "SIGKILL the node, as a crash; the controller is told at once and moves its leaderships."),
    ("stop", "Stop the node gracefully; its leaderships move first (controlled shutdown)."),
    ("start", "Start a stopped or killed node again with its data."),
    ("restart", "Stop (if running) and start the node again."),
    ("pause", "SIGSTOP the node: it lives on but answers nothing."),
    ("resume", "SIGCONT a paused node."),
):
    _node_action(_action, _help)


@contextmanager
def node_fault_errors(node_id: int):
    try:
        yield
    except (ClusterError, ControlError, OSError) as exc:
        raise click.ClickException(f"node {node_id}: {exc}") from exc


def _print_faults(node_id: int, faults: dict) -> None:
    isolated = ", ".join(faults["isolated_from"]) or "nobody"
    pending = ", ".join(f"api {api}: {codes}" for api, codes in faults["injected_errors"]) or "none"
    click.echo(f"node {node_id}: isolated from {isolated}; delay {faults['delay_ms']} ms; injected errors {pending}")


def _party(value: str) -> str | int:
    if value in ("controller", "clients"):
        return value
    if value.isdigit():
        return int(value)
    raise click.BadParameter(f"{value!r}: expected controller, clients or a node id", param_hint="--from")


@node.command("isolate")
@click.argument("node_id", type=int)
@click.option("--from", "parties", multiple=True, metavar="PARTY",
              help="controller, clients or a peer node id (repeatable) [default: the controller and every peer]")
@data_dir_option
def node_isolate(node_id, parties, data_dir):
    """Cut NODE_ID off from the controller, peers and/or clients while its process lives on."""
    cluster = attached_node(data_dir, node_id)
    with node_fault_errors(node_id):
        _print_faults(node_id, cluster.isolate_node(node_id, [_party(p) for p in parties]))


@node.command("heal")
@click.argument("node_id", type=int)
@data_dir_option
def node_heal(node_id, data_dir):
    """End NODE_ID's isolation, delay and pending injected errors."""
    cluster = attached_node(data_dir, node_id)
    with node_fault_errors(node_id):
        _print_faults(node_id, cluster.heal_node(node_id))


@node.command("delay")
@click.argument("node_id", type=int)
@click.argument("delay_ms", type=int)
@data_dir_option
def node_delay(node_id, delay_ms, data_dir):
    """Add DELAY_MS of latency to every response of NODE_ID (0 removes it)."""
    cluster = attached_node(data_dir, node_id)
    with node_fault_errors(node_id):
        _print_faults(node_id, cluster.delay_node(node_id, delay_ms))


@node.command("inject-error")
@click.argument("node_id", type=int)
@click.argument("api")
@click.argument("error")
@click.option("--count", type=int, default=1, show_default=True, help="how many requests get the error")
@data_dir_option
def node_inject_error(node_id, api, error, count, data_dir):
    """Answer the next COUNT requests of API (Produce, Fetch, JoinGroup, ... or a key) on NODE_ID with ERROR
    (a Kafka error name such as NOT_LEADER_OR_FOLLOWER, or its code), without executing them."""
    cluster = attached_node(data_dir, node_id)
    with node_fault_errors(node_id):
        _print_faults(node_id, cluster.inject_error(node_id, api, error, count))
