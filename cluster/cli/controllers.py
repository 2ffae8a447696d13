"""`kraftwerk controller kill|stop|start|restart|pause|resume|isolate|heal|delay [ID]`: faults for a
controller of a running cluster.

ID names one of the cluster's controllers (`kraftwerk status` lists them): it may be left out when
there is one, and `active` names the quorum's leader. While a lone controller is down (or
paused), or a quorum has lost its majority, the nodes serve on with the metadata they have:
clients produce to and consume from the partitions' leaders as before, but nothing that needs the
controller happens (a new topic, a leader for a dead node's partitions, an ISR change) until it is
back, when the nodes register with it again. A quorum that loses its active controller elects
another, and the nodes follow it. An isolated controller lives on, cut off from the other
controllers and the nodes (an isolated leader resigns once no majority fetches from it).
"""
from __future__ import annotations

import click

from cluster.cli.app import attached, data_dir_option
from cluster.cli.errors import fail
from cluster.formats.control import ControlError
from cluster.launch.cluster import Cluster

ACTIVE = "active"


@click.group()
def controller():
    """Faults for a controller: kill, stop, start, restart, pause, resume, isolate, heal, delay."""


def _controller_id(cluster: Cluster, named: str | None) -> int:
    """The id ID names: a number, `active` (the quorum's leader), or nothing when there is one controller."""
    listed = ", ".join(map(str, cluster.controller_ids))
    if named is None:
        if len(cluster.controllers) > 1:
            fail(f"name a controller: this cluster runs {listed} (or `active`, the quorum's leader)")
        return cluster.controller_id
    if named == ACTIVE:
        try:
            return cluster.active_controller_id(timeout=10)
        except (ControlError, OSError) as exc:
            fail(f"no controller is active: {exc}")
    if not named.isdigit() or int(named) not in cluster.controllers:
        fail(f"no controller {named} in this cluster (controllers: {listed})")
    return int(named)


def _check_state(cluster: Cluster, controller_id: int, action: str) -> None:
    """kill, stop and pause need a running controller, start one that is not, resume a paused one."""
    state = cluster.controller_state(controller_id)
    name = "the controller" if len(cluster.controllers) == 1 else f"controller {controller_id}"
    if action == "start" and state != "dead":
        fail(f"{name} is already running (kraftwerk controller restart restarts it)")
    if action in ("kill", "stop", "pause") and state == "dead":
        fail(f"{name} is not running (kraftwerk controller start starts it)")
    if action == "resume" and state != "paused":
        fail(f"{name} is not paused (it is {state})")


def _controller_action(action: str, help_text: str):
    @controller.command(action, help=help_text)
    @click.argument("controller_id", metavar="[ID]", required=False)
    @data_dir_option
    def command(controller_id, data_dir):
        cluster = attached(data_dir)
        chosen = _controller_id(cluster, controller_id)
        _check_state(cluster, chosen, action)
        {
            "kill": cluster.kill_controller,
            "stop": cluster.stop_controller,
            "start": cluster.start_controller,
            "restart": cluster.restart_controller,
            "pause": cluster.pause_controller,
            "resume": cluster.resume_controller,
        }[action](chosen)
        click.echo(f"controller {chosen}: {action} done")
    return command


for _action, _help in (
    ("kill", "SIGKILL a controller, as a crash; the nodes serve on (and follow a quorum's new leader)."),
    ("stop", "Stop a controller gracefully."),
    ("start", "Start a stopped or killed controller again with its metadata log; the nodes register with it."),
    ("restart", "Stop (if running) and start a controller again."),
    ("pause", "SIGSTOP a controller: it lives on but answers nothing."),
    ("resume", "SIGCONT a paused controller."),
):
    _controller_action(_action, _help)


def _running_controller(data_dir: str, named: str | None) -> tuple[Cluster, int]:
    cluster = attached(data_dir)
    chosen = _controller_id(cluster, named)
    if cluster.controller_state(chosen) != "running":
        fail(f"controller {chosen} is {cluster.controller_state(chosen)}: its faults need it running")
    return cluster, chosen


def _print_faults(controller_id: int, faults: dict) -> None:
    click.echo(f"controller {controller_id}: {'isolated' if faults['isolated'] else 'not isolated'}; "
               f"delay {faults['delay_ms']} ms")


@controller.command("isolate")
@click.argument("controller_id", metavar="[ID]", required=False)
@data_dir_option
def controller_isolate(controller_id, data_dir):
    """Cut a controller off from the other controllers and the nodes; its process runs on."""
    cluster, chosen = _running_controller(data_dir, controller_id)
    _print_faults(chosen, cluster.isolate_controller(chosen))


@controller.command("heal")
@click.argument("controller_id", metavar="[ID]", required=False)
@data_dir_option
def controller_heal(controller_id, data_dir):
    """End a controller's isolation and delay."""
    cluster, chosen = _running_controller(data_dir, controller_id)
    _print_faults(chosen, cluster.heal_controller(chosen))


@controller.command("delay")
@click.argument("controller_id", metavar="ID")
@click.argument("delay_ms", type=click.IntRange(min=0))
@data_dir_option
def controller_delay(controller_id, delay_ms, data_dir):
    """DELAY_MS more on everything controller ID sends (0 removes it); ID may be `active`."""
    cluster, chosen = _running_controller(data_dir, controller_id)
    _print_faults(chosen, cluster.delay_controller(chosen, delay_ms))
