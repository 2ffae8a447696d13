"""`kraftwerk up`, `down` and `status`: start a cluster, stop it, and show its nodes and partitions."""
from __future__ import annotations

import signal
import threading
from pathlib import Path

import click
from rich.table import Table

from cluster.cli.app import attached, console, data_dir_option, json_option, parse_pairs, print_json
from cluster.formats.control import ControlError
from cluster.formats.metadata_log import read_meta_properties
from cluster.launch.cluster import CLUSTER_CLASSES, Cluster, ClusterError, DockerCluster, cluster_class
from cluster.launch.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, Security


@click.command()
@click.option("--nodes", type=int, default=None, help="number of broker nodes [default: 3, or as before in DATA_DIR]")
@click.option("--controllers", type=click.Choice(["1", "3", "5"]), default=None,
              help="controllers: one, or a KRaft quorum of 3 or 5 [default: 1, or as before in DATA_DIR]")
@click.option("--port", type=int, default=None, help="first node's port, the next nodes count up; 0 picks free ports "
                                                    "[default: 9092]")
@click.option("--host", default="127.0.0.1", show_default=True, help="address every listener binds to")
@data_dir_option
@click.option("--detach", is_flag=True, help="return once the cluster is ready and leave it running")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="broker config by Kafka's name, e.g. num.partitions=3 (repeatable)")
@click.option("--rack-of", "racks", multiple=True, metavar="NODE=RACK", help="a node's broker.rack (repeatable)")
@click.option("--backend", type=click.Choice(list(CLUSTER_CLASSES)), default=None,
              help="processes on this machine, or a container per process on a docker network (docs/docker.md) "
                   "[default: process, or as before in DATA_DIR]")
@click.option("--image", default=None, help="docker backend: the image to run [default: built from this checkout]")
@click.option("--security-protocol", type=click.Choice(SECURITY_PROTOCOLS, case_sensitive=False), default=None,
              help="the nodes' listener: TLS (SSL), SASL, or both (docs/security.md) [default: PLAINTEXT]")
@click.option("--sasl-mechanism", type=click.Choice(SASL_MECHANISMS, case_sensitive=False), default=None,
              help="SASL listeners: how clients log in [default: SCRAM-SHA-256]")
@click.option("--super-user", default=None,
              help="a user allowed everything, with a generated password; turns ACLs on [default: admin with SASL]")
@click.option("--user", "users", multiple=True, metavar="NAME", help="a SASL user made at start (repeatable)")
@click.option("--tls", is_flag=True, help="serve TLS (SSL, or SASL_SSL with --security-protocol)")
def up(nodes, controllers, port, host, data_dir, detach, settings, racks, backend, image, security_protocol,
       sasl_mechanism, super_user, users, tls):
    """Start a controller (or a quorum of CONTROLLERS) and NODES broker nodes; print the bootstrap servers."""
    previous = _previous_layout(data_dir)
    backend = backend or previous.get("backend", "process")
    backend_options = {"image": image} if backend == "docker" else {}
    try:
        security = previous.get("security") if not (security_protocol or sasl_mechanism or super_user or users or tls) \
            else Security.of(security_protocol, sasl_mechanism, super_user, tls, users)
        cluster = cluster_class(backend)(nodes=nodes or previous.get("nodes", 3),
                          port=previous.get("base_port", 9092) if port is None else port,
                          host=host, data_dir=data_dir,
                          node_config={**previous.get("node_config", {}), **parse_pairs(settings, "--set")},
                          racks={**previous.get("racks", {}), **_node_racks(racks)}, security=security,
                          controllers=int(controllers or previous.get("controllers", 1)), **backend_options)
        cluster.start()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    quorum = f"{len(cluster.controllers)} controllers, " if len(cluster.controllers) > 1 else ""
    console.print(f"[green]kraftwerk cluster ready[/] in {cluster.startup_seconds:.2f}s "
                  f"({quorum}{cluster.node_count} nodes, data in {Path(data_dir).resolve()})")
    click.echo(f"bootstrap servers: {cluster.bootstrap_servers}")
    if isinstance(cluster, DockerCluster):
        click.echo(f"bootstrap servers on the docker network {cluster.name}: {cluster.internal_bootstrap_servers}")
    if cluster.security.secured:
        click.echo("client config (in cluster.json): " +
                   " ".join(f"{key}={value}" for key, value in cluster.client_config().items()))
    if detach:
        return
    _stay_in_foreground(cluster)


def _previous_layout(data_dir: str) -> dict:
    try:
        previous = Cluster.attach(data_dir)
    except ClusterError:
        return {}
    return {"nodes": previous.node_count, "base_port": previous.base_port, "node_config": previous.node_config,
            "racks": previous.racks, "backend": previous.backend, "security": previous.security,
            "controllers": len(previous.controllers)}


def _node_racks(pairs: tuple[str, ...]) -> dict[int, str]:
    racks = parse_pairs(pairs, "--rack-of")
    if not all(node_id.isdigit() for node_id in racks):
        raise click.BadParameter("expected NODE=RACK with a node id, e.g. 1=a", param_hint="--rack-of")
    return {int(node_id): rack for node_id, rack in racks.items()}


def _stay_in_foreground(cluster: Cluster) -> None:
    from rich.live import Live

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print("Ctrl-C stops the cluster.")
    try:
        def view():
            return status_tables(status_document(controller_view(cluster), cluster))

        with Live(view(), console=console, refresh_per_second=1) as live:
            while not stop.wait(1.0):  # the refresh rate of the view, not a wait for an event
                live.update(view())
    finally:
        cluster.stop()
        if not console.is_terminal:
            console.line()  # a live view written to a pipe or file ends without a newline
        console.print("cluster stopped; data kept in", str(cluster.data_dir))


@click.command()
@data_dir_option
def down(data_dir):
    """Stop the cluster in DATA_DIR; every process ends, the data stays."""
    try:
        cluster = Cluster.attach(data_dir)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    was_running = cluster.running()
    cluster.stop()  # also ends nodes that outlived their controller
    click.echo(f"cluster in {data_dir} stopped" if was_running else f"the cluster in {data_dir} was not running")


@click.command()
@data_dir_option
@click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
              help="also the node coordinating this transactional id, and its __transaction_state partition "
                   "(repeatable)")
@json_option
def status(data_dir, transactional_ids, as_json):
    """Nodes, their processes and ports, and who leads what."""
    cluster = attached(data_dir)
    document = status_document(controller_view(cluster), cluster)
    if transactional_ids:
        document["transaction_coordinators"] = [cluster.transaction_coordinator(t) for t in transactional_ids]
    if as_json:
        print_json(document)
    else:
        console.print(status_tables(document))


def controller_view(cluster: Cluster) -> dict | None:
    """The active controller's status answer with its quorum's, and each running controller's own
    place in the quorum (`roles`); None when no controller runs or none acts."""
    running = [c for c in cluster.controller_ids if cluster.controller_state(c) == "running"]
    if not running:
        return None
    try:
        view = {**cluster.control("status", timeout=5), "quorum": cluster.control("describe_quorum", timeout=5)}
    except (ControlError, OSError):
        return None
    return {**view, "roles": _quorum_roles(cluster, running)}


def _quorum_roles(cluster: Cluster, controller_ids: list[int]) -> dict[int, dict]:
    """What each controller says of itself (`quorum_role`: role, epoch); those that do not answer are left out."""
    roles = {}
    for controller_id in controller_ids:
        try:
            roles[controller_id] = cluster.controller_control(controller_id, "quorum_role", timeout=2)
        except (ControlError, OSError):
            continue
    return roles


def status_document(state: dict | None, cluster: Cluster) -> dict:
    """The cluster's controller, nodes and partitions as `kraftwerk status --json` prints them (docs/cli.md
    shows the shape); without a controller's answer (state None), what the processes say, and no partitions."""
    answered = state is not None
    first_controller = cluster.controllers[cluster.controller_id]
    state = state or {"cluster_id": read_meta_properties(first_controller.data_dir).get("cluster.id"),
                      "metadata_offset": None, "brokers": [], "topics": []}
    led: dict[int, int] = {}
    for topic in state["topics"]:
        for partition in topic["partitions"]:
            led[partition["leader"]] = led.get(partition["leader"], 0) + 1
    brokers = {b["node_id"]: b for b in state["brokers"]}
    nodes = [{"node_id": node_id, "pid": node.pid, "host": cluster.node_host(node), "port": node.port,
              "address": cluster.address(node), **_internal_address(cluster, node), "admin_port": node.admin_port,
              "process": _process_state(node),
              "fenced": brokers.get(node_id, {}).get("fenced", True) if answered else None,
              "partitions_led": led.get(node_id, 0)}
             for node_id, node in sorted(cluster.nodes.items())]
    offsets = replica_offsets(cluster.replica_states(timeout=0.5))
    topics = [{"name": topic["name"], "topic_id": topic["topic_id"],
               "partitions": [_partition_facts(p, offsets.get((topic["name"], p["partition"]), {}))
                              for p in topic["partitions"]]}
              for topic in state["topics"]]
    return {"cluster_id": state["cluster_id"], "metadata_offset": state["metadata_offset"],
            "controllers": [_controller_facts(cluster, controller_id, state.get("quorum"),
                                              state.get("roles", {}).get(controller_id))
                            for controller_id in cluster.controller_ids],
            "nodes": nodes, "topics": topics}


def _controller_facts(cluster: Cluster, controller_id: int, quorum: dict | None, own: dict | None) -> dict:
    """A controller's process and, when the active controller answered, its place in the quorum: its
    role and epoch as it says them itself (else as the leader's DescribeQuorum answer implies), and
    how many offsets its log is behind the leader's, as kafka-metadata-quorum.sh's Lag. Nothing of
    the quorum for a controller that is not running."""
    process = cluster.controller_state(controller_id)
    voters = {v["replica_id"]: v for v in quorum["voters"]} if quorum else {}
    voter, leader = voters.get(controller_id), voters.get(quorum["leader_id"]) if quorum else None
    known = voter is not None and process == "running"
    if not known:
        role, epoch = None, None
    elif own is not None:
        role, epoch = own["role"], own["epoch"]
    else:
        role, epoch = "leader" if controller_id == quorum["leader_id"] else "follower", quorum["leader_epoch"]
    lag = leader["log_end_offset"] - voter["log_end_offset"] if known and leader and voter["log_end_offset"] >= 0 \
        else None
    return {"node_id": controller_id, "pid": cluster.controllers[controller_id].pid,
            "address": cluster.controller_address_of(controller_id), "process": process, "role": role,
            "leader_epoch": epoch, "lag": lag}


def _internal_address(cluster: Cluster, node) -> dict:
    """A docker node's second address: where containers on the cluster's network reach it ("address" is the host's)."""
    return {"internal_address": cluster.internal_address(node)} if isinstance(cluster, DockerCluster) else {}


def _partition_facts(partition: dict, known: dict[int, dict]) -> dict:
    """One partition's leader, replicas, ISR, the leader's high watermark and each replica's lag (None: no answer)."""
    leader = known.get(partition["leader"])
    return {"partition": partition["partition"], "leader": partition["leader"],
            "leader_epoch": partition["leader_epoch"], "replicas": partition["replicas"], "isr": partition["isr"],
            "high_watermark": leader["high_watermark"] if leader else None,
            "cleaned_up_to": leader.get("cleaned_up_to") if leader else None,
            "lag": {str(r): _lag(leader, known.get(r)) for r in partition["replicas"]},
            "adding_replicas": partition.get("adding_replicas", []),
            "removing_replicas": partition.get("removing_replicas", [])}


def status_tables(document: dict):
    from rich.console import Group

    controllers = Table(title=f"cluster {document['cluster_id']}")
    for column in ("controller", "pid", "address", "process", "role", "epoch", "lag"):
        controllers.add_column(column)
    process_styles = {"dead": "[red]dead[/]", "paused": "[yellow]paused[/]", "running": "[green]running[/]"}
    for c in document["controllers"]:
        controllers.add_row(str(c["node_id"]), str(c["pid"]), c["address"], process_styles[c["process"]],
                            c["role"] or "?", _unknown(c["leader_epoch"]), _unknown(c["lag"]))
    nodes = Table(title="nodes")
    internal = any("internal_address" in node for node in document["nodes"])
    for column in ("node", "pid", "address", *(("internal address",) if internal else ()), "process", "state",
                   "partitions led"):
        nodes.add_column(column)
    for node in document["nodes"]:
        nodes.add_row(str(node["node_id"]), str(node["pid"]), node["address"],
                      *((node.get("internal_address", ""),) if internal else ()), process_styles[node["process"]],
                      "?" if node["fenced"] is None else "fenced" if node["fenced"] else "unfenced",
                      str(node["partitions_led"]))
    compacted = any(p["cleaned_up_to"] is not None for topic in document["topics"] for p in topic["partitions"])
    topics = Table(title="partitions", caption="hw: high watermark; lag: messages each replica's log is behind "
                                                "the leader's, by node; +/-: replicas being added / removed"
                                                + ("; cleaned: where a compacted log's next cleaning starts on "
                                                   "its leader" if compacted else ""))
    for column in ("topic", "partition", "leader", "epoch", "replicas", "isr", "hw", *(("cleaned",) if compacted
                                                                                       else ()), "lag"):
        topics.add_column(column)
    for topic in document["topics"]:
        for p in topic["partitions"]:
            out_of_sync = set(p["replicas"]) - set(p["isr"])
            topics.add_row(topic["name"], str(p["partition"]), str(p["leader"]), str(p["leader_epoch"]),
                           _replicas_moving(p),
                           ",".join(map(str, p["isr"])) + (" [red](behind: " + ",".join(map(str, sorted(out_of_sync)))
                                                          + ")[/]" if out_of_sync else ""),
                           _unknown(p["high_watermark"]),
                           *((_unknown(p["cleaned_up_to"]) if p["cleaned_up_to"] is not None else "",)
                             if compacted else ()),
                           " ".join(f"{node}:{_unknown(lag)}" for node, lag in p["lag"].items()))
    if "transaction_coordinators" not in document:
        return Group(controllers, nodes, topics)
    return Group(controllers, nodes, topics, _coordinators_table(document["transaction_coordinators"]))


def _coordinators_table(placements: list[dict]) -> Table:
    table = Table(title="transaction coordinators", caption="the leader of each transactional id's "
                                                            "__transaction_state partition coordinates it")
    for column in ("transactional id", "partition", "coordinator"):
        table.add_column(column)
    for placed in placements:
        table.add_row(placed["transactional_id"], f"{placed['topic']}-{placed['partition']}",
                      str(placed["coordinator"]) if placed["coordinator"] >= 0 else "none yet")
    return table


def _replicas_moving(partition: dict) -> str:
    """Replicas, with those a reassignment adds marked + and those it removes marked -."""
    adding, removing = set(partition["adding_replicas"]), set(partition["removing_replicas"])
    return ",".join(f"[cyan]+{r}[/]" if r in adding else f"[magenta]-{r}[/]" if r in removing else str(r)
                    for r in partition["replicas"])


def _process_state(node) -> str:
    if not node.alive():
        return "dead"
    return "paused" if node.paused() else "running"


def _unknown(value) -> str:
    return "?" if value is None else str(value)


def replica_offsets(states: dict[int, dict]) -> dict[tuple[str, int], dict[int, dict]]:
    """(topic, partition) -> node id -> that replica's offsets, from Cluster.replica_states()."""
    offsets: dict[tuple[str, int], dict[int, dict]] = {}
    for node_id, state in states.items():
        for partition in state["partitions"]:
            offsets.setdefault((partition["topic"], partition["partition"]), {})[node_id] = partition
    return offsets


def _lag(leader: dict | None, replica: dict | None) -> int | None:
    """Messages the replica's log is behind the leader's log end; None when either did not answer."""
    if leader is None or replica is None:
        return None
    return max(0, leader["log_end_offset"] - replica["log_end_offset"])
