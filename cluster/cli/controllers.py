"""`kraftwerk controller kill|stop|start|restart|pause|resume`: faults for the controller of a running cluster.

While the controller is down (or paused) the nodes serve on with the metadata they have: clients
produce to and consume from the partitions' leaders as before, but nothing that needs the
controller happens (a new topic, a leader for a dead node's partitions, an ISR change) until it is
back, when the nodes register with it again.
"""
from __future__ import annotations

import click

from cluster.cli.app import attached, data_dir_option
from cluster.cli.errors import fail
from cluster.launch.cluster import Cluster


@click.group()
def controller():
    """Faults for the controller: kill, stop, start, restart, pause, resume."""


def _check_controller(cluster: Cluster, controller_id: int | None, action: str) -> None:
    """The id names the cluster's controller; kill, stop and pause need a running one, start one that is not."""
    if controller_id is not None and controller_id != cluster.controller_id:
        fail(f"no controller {controller_id} in this cluster (controllers: {cluster.controller_id})")
    state = cluster.controller_state()
    if action == "start" and state != "dead":
        fail("the controller is already running (kraftwerk controller restart restarts it)")
    if action in ("kill", "stop", "pause") and state == "dead":
        fail("the controller is not running (kraftwerk controller start starts it)")
    if action == "resume" and state != "paused":
        fail(f"the controller is not paused (it is {state})")


def _controller_action(action: str, help_text: str):
    @controller.command(action, help=help_text)
    @click.argument("controller_id", type=int, required=False)
    @data_dir_option
    def command(controller_id, data_dir):
        cluster = attached(data_dir)
        _check_controller(cluster, controller_id, action)
        {
            "kill": cluster.kill_controller,
            "stop": cluster.stop_controller,
            "start": cluster.start_controller,
            "restart": cluster.restart_controller,
            "pause": cluster.pause_controller,
            "resume": cluster.resume_controller,
        }[action]()
        click.echo(f"controller {cluster.controller_id}: {action} done")
    return command


for _action, _help in (
    ("kill", "SIGKILL the controller, as a crash; the nodes serve on with the metadata they have."),
    ("stop", "Stop the controller gracefully."),
    ("start", "Start a stopped or killed controller again with its metadata log; the nodes register with it."),
    ("restart", "Stop (if running) and start the controller again."),
    ("pause", "SIGSTOP the controller: it lives on but answers nothing."),
    ("resume", "SIGCONT a paused controller."),
):
    _controller_action(_action, _help)
