"""The `kraftwerk` command line: launch, inspect and use a cluster from a shell."""
from __future__ import annotations

import json
import signal
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import click
from kafka import TopicPartition
from kafka.errors import GroupIdNotFoundError, UnknownTopicOrPartitionError
from rich.console import Console
from rich.table import Table

from cluster.cli.errors import CommandLine, fail, group_error, kafka_exception_text, topic_error
from cluster.formats.control import ControlError
from cluster.launch.cluster import Cluster, ClusterError, cluster_class
from cluster.formats.topic_ids import topic_id_to_kafka_string

DEFAULT_DATA_DIR = "./.kraftwerk"
console = Console()

data_dir_option = click.option("--data-dir", default=DEFAULT_DATA_DIR, show_default=True, type=click.Path(),
                               help="where the cluster keeps its data, logs and cluster.json")
bootstrap_option = click.option("--bootstrap-server", default=None,
                                help="host:port of a node (default: the cluster in --data-dir)")
json_option = click.option("--json", "as_json", is_flag=True, help="print the same facts as JSON, for scripts")


def print_json(document) -> None:
    click.echo(json.dumps(document, indent=2))


def parse_pairs(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=what)
        parsed[key.strip()] = value.strip()
    return parsed


def attached(data_dir: str) -> Cluster:
    try:
        cluster = Cluster.attach(data_dir)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    if not cluster.running():
        raise click.ClickException(f"the cluster in {data_dir} is not running (kraftwerk up starts it)")
    return cluster


def bootstrap_servers(data_dir: str, bootstrap: str | None) -> str:
    return bootstrap or attached(data_dir).bootstrap_servers


@click.group(cls=CommandLine)
@click.version_option(package_name="kraftwerk")
def main():
    """kraftwerk: a Kafka-compatible cluster on one machine."""


@main.command()
@click.option("--nodes", type=int, default=None, help="number of broker nodes [default: 3, or as before in DATA_DIR]")
@click.option("--port", type=int, default=None, help="first node's port, the next nodes count up; 0 picks free ports "
                                                    "[default: 9092]")
@click.option("--host", default="127.0.0.1", show_default=True, help="address every listener binds to")
@data_dir_option
@click.option("--detach", is_flag=True, help="return once the cluster is ready and leave it running")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="broker config by Kafka's name, e.g. num.partitions=3 (repeatable)")
@click.option("--rack-of", "racks", multiple=True, metavar="NODE=RACK", help="a node's broker.rack (repeatable)")
@click.option("--backend", type=click.Choice(["process", "docker"]), default=None,
              help="processes on this machine, or a container per process on a docker network (README: Docker) "
                   "[default: process, or as before in DATA_DIR]")
@click.option("--image", default=None, help="docker backend: the image to run [default: built from this checkout]")
def up(nodes, port, host, data_dir, detach, settings, racks, backend, image):
    """Start a controller and NODES broker nodes; print the bootstrap servers."""
    previous = _previous_layout(data_dir)
    backend = backend or previous.get("backend", "process")
    backend_options = {"image": image} if backend == "docker" else {}
    cluster = cluster_class(backend)(nodes=nodes or previous.get("nodes", 3),
                      port=previous.get("base_port", 9092) if port is None else port,
                      host=host, data_dir=data_dir,
                      node_config={**previous.get("node_config", {}), **parse_pairs(settings, "--set")},
                      racks={**previous.get("racks", {}), **_node_racks(racks)}, **backend_options)
    try:
        cluster.start()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"[green]kraftwerk cluster ready[/] in {cluster.startup_seconds:.2f}s "
                  f"({cluster.node_count} nodes, data in {Path(data_dir).resolve()})")
    click.echo(f"bootstrap servers: {cluster.bootstrap_servers}")
    if detach:
        return
    _stay_in_foreground(cluster)


def _previous_layout(data_dir: str) -> dict:
    try:
        previous = Cluster.attach(data_dir)
    except ClusterError:
        return {}
    return {"nodes": previous.node_count, "base_port": previous.base_port, "node_config": previous.node_config,
            "racks": previous.racks, "backend": previous.backend}


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
            return status_tables(status_document(cluster.status(), cluster))

        with Live(view(), console=console, refresh_per_second=1) as live:
            while not stop.wait(1.0):  # the refresh rate of the view, not a wait for an event
                live.update(view())
    finally:
        cluster.stop()
        if not console.is_terminal:
            console.line()  # a live view written to a pipe or file ends without a newline
        console.print("cluster stopped; data kept in", str(cluster.data_dir))


@main.command()
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


@main.command()
@data_dir_option
@json_option
def status(data_dir, as_json):
    """Nodes, their processes and ports, and who leads what."""
    cluster = attached(data_dir)
    document = status_document(cluster.status(), cluster)
    if as_json:
        print_json(document)
    else:
        console.print(status_tables(document))


def status_document(state: dict, cluster: Cluster) -> dict:
    """The cluster's nodes and partitions as `kraftwerk status --json` prints them (the README shows the shape)."""
    led: dict[int, int] = {}
    for topic in state["topics"]:
        for partition in topic["partitions"]:
            led[partition["leader"]] = led.get(partition["leader"], 0) + 1
    brokers = {b["node_id"]: b for b in state["brokers"]}
    nodes = [{"node_id": node_id, "pid": node.pid, "host": cluster.node_host(node), "port": node.port,
              "admin_port": node.admin_port, "process": _process_state(node),
              "fenced": brokers.get(node_id, {}).get("fenced", True), "partitions_led": led.get(node_id, 0)}
             for node_id, node in sorted(cluster.nodes.items())]
    offsets = replica_offsets(cluster.replica_states(timeout=0.5))
    topics = [{"name": topic["name"], "topic_id": topic["topic_id"],
               "partitions": [_partition_facts(p, offsets.get((topic["name"], p["partition"]), {}))
                              for p in topic["partitions"]]}
              for topic in state["topics"]]
    return {"cluster_id": state["cluster_id"], "metadata_offset": state["metadata_offset"], "nodes": nodes,
            "topics": topics}


def _partition_facts(partition: dict, known: dict[int, dict]) -> dict:
    """One partition's leader, replicas, ISR, the leader's high watermark and each replica's lag (None: no answer)."""
    leader = known.get(partition["leader"])
    return {"partition": partition["partition"], "leader": partition["leader"],
            "leader_epoch": partition["leader_epoch"], "replicas": partition["replicas"], "isr": partition["isr"],
            "high_watermark": leader["high_watermark"] if leader else None,
            "lag": {str(r): _lag(leader, known.get(r)) for r in partition["replicas"]},
            "adding_replicas": partition.get("adding_replicas", []),
            "removing_replicas": partition.get("removing_replicas", [])}


def status_tables(document: dict):
    from rich.console import Group

    nodes = Table(title=f"cluster {document['cluster_id']}")
    for column in ("node", "pid", "address", "process", "state", "partitions led"):
        nodes.add_column(column)
    process_styles = {"dead": "[red]dead[/]", "paused": "[yellow]paused[/]", "running": "[green]running[/]"}
    for node in document["nodes"]:
        nodes.add_row(str(node["node_id"]), str(node["pid"]), f"{node['host']}:{node['port']}",
                      process_styles[node["process"]], "fenced" if node["fenced"] else "unfenced",
                      str(node["partitions_led"]))
    topics = Table(title="partitions", caption="hw: high watermark; lag: messages each replica's log is behind "
                                                "the leader's, by node; +/-: replicas being added / removed")
    for column in ("topic", "partition", "leader", "epoch", "replicas", "isr", "hw", "lag"):
        topics.add_column(column)
    for topic in document["topics"]:
        for p in topic["partitions"]:
            out_of_sync = set(p["replicas"]) - set(p["isr"])
            topics.add_row(topic["name"], str(p["partition"]), str(p["leader"]), str(p["leader_epoch"]),
                           _replicas_moving(p),
                           ",".join(map(str, p["isr"])) + (" [red](behind: " + ",".join(map(str, sorted(out_of_sync)))
                                                          + ")[/]" if out_of_sync else ""),
                           _unknown(p["high_watermark"]),
                           " ".join(f"{node}:{_unknown(lag)}" for node, lag in p["lag"].items()))
    return Group(nodes, topics)


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


@main.group()
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


@main.group()
def topic():
    """Create, list, describe and delete topics."""


# How long a command tries to reach a broker before it says it cannot (kafka-python waits 30 s).
BOOTSTRAP_TIMEOUT_MS = 10_000


def connect_failure(bootstrap: str, exc: Exception) -> str:
    return f"cannot reach a Kafka broker at {bootstrap} ({kafka_exception_text(exc)})"


def connected(client_class, bootstrap: str, **config):
    """A kafka-python producer or consumer for the CLI; a cluster it cannot reach is a one-line error."""
    from kafka.errors import KafkaError

    try:
        return client_class(bootstrap_servers=bootstrap, client_id="kraftwerk-cli",
                            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS, **config)
    except KafkaError as exc:
        fail(connect_failure(bootstrap, exc))


@contextmanager
def admin_client(data_dir: str, bootstrap: str | None):
    """A Kafka admin client for the cluster; a cluster it cannot reach is a one-line CLI error."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    servers = bootstrap_servers(data_dir, bootstrap)
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, client_id="kraftwerk-cli",
                                 bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
    except KafkaError as exc:
        fail(connect_failure(servers, exc))
    try:
        yield admin
    finally:
        admin.close()


def _count_or_default(value: int | None) -> int:
    return -1 if value is None else value  # -1: the cluster's num.partitions / default.replication.factor


@topic.command("create")
@click.argument("name")
@click.option("--partitions", type=int, default=None, help="[default: the cluster's num.partitions]")
@click.option("--replication-factor", type=int, default=None,
              help="[default: the cluster's default.replication.factor, min(3, nodes) for kraftwerk up]")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="topic config (repeatable)")
@data_dir_option
@bootstrap_option
def topic_create(name, partitions, replication_factor, configs, data_dir, bootstrap_server):
    """Create topic NAME."""
    wanted = {"num_partitions": _count_or_default(partitions),
              "replication_factor": _count_or_default(replication_factor),
              "configs": parse_pairs(configs, "--config")}
    with admin_client(data_dir, bootstrap_server) as admin:
        created = admin.create_topics({name: wanted}, raise_errors=False)["topics"][0]
    if created["error_code"]:
        fail(topic_error(name, created["error_code"], created.get("error_message")))
    click.echo(f"created topic {name} with {created['num_partitions']} partitions and replication factor "
               f"{created['replication_factor']}")


@topic.command("list")
@data_dir_option
@bootstrap_option
def topic_list(data_dir, bootstrap_server):
    """Names of all topics."""
    with admin_client(data_dir, bootstrap_server) as admin:
        names = sorted(admin.list_topics())
    for name in names:
        click.echo(name)


@topic.command("describe")
@click.argument("name")
@data_dir_option
@bootstrap_option
@json_option
def topic_describe(name, data_dir, bootstrap_server, as_json):
    """Partitions of topic NAME with leaders, replicas and ISR."""
    with admin_client(data_dir, bootstrap_server) as admin:
        described = admin.describe_topics([name])[0]
    if described["error_code"]:
        fail(topic_error(name, described["error_code"]))
    # Kafka's tools print topic ids in Kafka's base64 form, as `status` does.
    topic_id = topic_id_to_kafka_string(uuid.UUID(str(described["topic_id"])))
    document = {"name": name, "topic_id": topic_id, "partitions": [
        {"partition": p["partition_index"], "leader": p["leader_id"], "leader_epoch": p["leader_epoch"],
         "replicas": p["replica_nodes"], "isr": p["isr_nodes"]}
        for p in sorted(described["partitions"], key=lambda p: p["partition_index"])]}
    if as_json:
        print_json(document)
        return
    table = Table(title=f"{name} ({document['topic_id']})")
    for column in ("partition", "leader", "replicas", "isr"):
        table.add_column(column)
    for partition in document["partitions"]:
        table.add_row(str(partition["partition"]), str(partition["leader"]),
                      ",".join(map(str, partition["replicas"])), ",".join(map(str, partition["isr"])))
    console.print(table)


@topic.command("delete")
@click.argument("name")
@data_dir_option
@bootstrap_option
def topic_delete(name, data_dir, bootstrap_server):
    """Delete topic NAME and its data."""
    with admin_client(data_dir, bootstrap_server) as admin:
        deleted = admin.delete_topics([name], raise_errors=False)["topics"][0]
    if deleted["error_code"]:
        fail(topic_error(name, deleted["error_code"], deleted.get("error_message")))
    click.echo(f"deleted topic {name}")


@main.group()
def group():
    """List, describe, delete consumer groups and reset their offsets; rebalance them, remove members and move
    their coordinator on demand."""


@group.command("list")
@data_dir_option
@bootstrap_option
def group_list(data_dir, bootstrap_server):
    """Every consumer group with its state."""
    with admin_client(data_dir, bootstrap_server) as admin:
        groups = admin.list_groups()
    table = Table(title="consumer groups")
    for column in ("group", "state", "protocol type"):
        table.add_column(column)
    for listed in sorted(groups, key=lambda g: g["group_id"]):
        table.add_row(listed["group_id"], listed.get("group_state", ""), listed["protocol_type"])
    console.print(table)


def group_lag(bootstrap: str, partitions) -> dict:
    """TopicPartition -> log end offset, for the partitions a group has offsets in or is assigned."""
    from kafka import KafkaConsumer

    consumer = connected(KafkaConsumer, bootstrap)
    try:
        return consumer.end_offsets(list(partitions))
    finally:
        consumer.close()


@group.command("describe")
@click.argument("group_id", metavar="GROUP")
@data_dir_option
@bootstrap_option
@json_option
def group_describe(group_id, data_dir, bootstrap_server, as_json):
    """Members, assignments, committed offsets and lag, as kafka-consumer-groups.sh shows them."""
    bootstrap = bootstrap_servers(data_dir, bootstrap_server)
    with admin_client(data_dir, bootstrap) as admin:
        described = admin.describe_groups([group_id])[group_id]
        committed = admin.list_group_offsets(group_id)[group_id]
    if described.get("error"):
        fail(group_error(group_id, described["error"].errno))
    if described["group_state"] == "Dead" and not committed:
        fail(group_error(group_id, GroupIdNotFoundError.errno))  # what Kafka's tool says of a group nobody knows
    owner = _partition_owners(described)
    shown = {TopicPartition(topic, partition) for topic, partition in owner} | set(committed)
    document = group_document(group_id, described, owner, committed, group_lag(bootstrap, shown) if shown else {})
    if as_json:
        print_json(document)
        return
    console.print(f"group {group_id}: {document['state']}, protocol {document['protocol'] or '-'}, "
                  f"{len(document['members'])} members")
    table = Table()
    for column in ("topic", "partition", "committed", "log end", "lag", "member", "host", "client id"):
        table.add_column(column)
    for row in document["partitions"]:
        table.add_row(row["topic"], str(row["partition"]), _dash(row["committed"]), _dash(row["log_end"]),
                      _dash(row["lag"]), _dash(row["member_id"]), _dash(row["host"]), _dash(row["client_id"]))
    console.print(table)


def _partition_owners(described: dict) -> dict[tuple[str, int], dict]:
    """(topic, partition) -> the member it is assigned to."""
    owner = {}
    for member in described["members"]:
        for assigned in (member.get("member_assignment") or {}).get("assigned_partitions", []):
            for partition in assigned["partitions"]:
                owner[(assigned["topic"], partition)] = member
    return owner


def group_document(group_id: str, described: dict, owner: dict, committed: dict, ends: dict) -> dict:
    """A group's state, members and per-partition committed offset, log end and lag (None where unknown)."""
    rows = {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items()}
    for topic, partition in owner:
        rows.setdefault((topic, partition), None)
    log_ends = {(tp.topic, tp.partition): end for tp, end in ends.items()}
    partitions = []
    for (topic, partition), offset in sorted(rows.items()):
        end = log_ends.get((topic, partition))
        member = owner.get((topic, partition), {})
        partitions.append({"topic": topic, "partition": partition, "committed": offset, "log_end": end,
                           "lag": end - offset if end is not None and offset is not None else None,
                           "member_id": member.get("member_id"), "host": member.get("client_host"),
                           "client_id": member.get("client_id")})
    members = [{"member_id": m["member_id"], "client_id": m.get("client_id"), "host": m.get("client_host"),
                "assignment": sorted([a["topic"], p] for a in (m.get("member_assignment") or {})
                                     .get("assigned_partitions", []) for p in a["partitions"])}
               for m in described["members"]]
    return {"group_id": group_id, "state": described["group_state"], "protocol": described["protocol_data"] or None,
            "members": members, "partitions": partitions}


def _dash(value) -> str:
    return "-" if value is None else str(value)


@group.command("delete")
@click.argument("group_id", metavar="GROUP")
@data_dir_option
@bootstrap_option
def group_delete(group_id, data_dir, bootstrap_server):
    """Delete an empty group and its committed offsets."""
    from kafka import errors as kafka_errors

    with admin_client(data_dir, bootstrap_server) as admin:
        outcome = admin.delete_groups([group_id]).get(group_id, "OK")
    if outcome != "OK":
        fail(group_error(group_id, getattr(kafka_errors, outcome).errno))
    click.echo(f"deleted group {group_id}")


@group.command("reset-offsets")
@click.argument("group_id", metavar="GROUP")
@click.option("--topic", "topic_name", required=True)
@click.option("--to-earliest", "target", flag_value="earliest", help="the first offset of each partition")
@click.option("--to-latest", "target", flag_value="latest", help="the log end of each partition")
@click.option("--to-offset", type=int, default=None, help="this offset in every partition")
@click.option("--to-datetime", type=int, default=None, metavar="EPOCH_MS",
              help="the first offset at or after this timestamp (milliseconds)")
@data_dir_option
@bootstrap_option
def group_reset_offsets(group_id, topic_name, target, to_offset, to_datetime, data_dir, bootstrap_server):
    """Move an inactive group's committed offsets for TOPIC."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka import errors as Errors
    from kafka.structs import OffsetAndMetadata

    chosen = [t for t in (target, to_offset, to_datetime) if t is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime")
    bootstrap = bootstrap_servers(data_dir, bootstrap_server)
    with admin_client(data_dir, bootstrap) as admin:
        state = admin.describe_groups([group_id])[group_id]["group_state"]
    if state not in ("Empty", "Dead"):
        fail(f"offsets of consumer group '{group_id}' can only be reset while it is inactive, "
             f"but its state is {state}.")
    consumer = connected(KafkaConsumer, bootstrap)
    try:
        partitions = [TopicPartition(topic_name, p) for p in sorted(consumer.partitions_for_topic(topic_name) or ())]
        if not partitions:
            fail(topic_error(topic_name, Errors.UnknownTopicOrPartitionError.errno))
        earliest, latest = consumer.beginning_offsets(partitions), consumer.end_offsets(partitions)
        if target == "earliest":
            offsets = earliest
        elif target == "latest":
            offsets = latest
        elif to_offset is not None:
            offsets = {tp: min(max(to_offset, earliest[tp]), latest[tp]) for tp in partitions}
        else:
            found = consumer.offsets_for_times({tp: to_datetime for tp in partitions})
            offsets = {tp: found[tp].offset if found[tp] else latest[tp] for tp in partitions}
    finally:
        consumer.close()
    with admin_client(data_dir, bootstrap) as admin:
        results = admin.alter_group_offsets(group_id, {tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
    failures = {tp: error for tp, error in results.items() if error is not Errors.NoError}
    if failures:
        fail(group_error(group_id, next(iter(failures.values())).errno))
    for tp, offset in sorted(offsets.items()):
        click.echo(f"{tp.topic}-{tp.partition}\t{offset}")


@group.command("rebalance")
@click.argument("group_id", metavar="GROUP")
@data_dir_option
def group_rebalance(group_id, data_dir):
    """Start a rebalance of GROUP now, as when a member joins: every member is told on its next heartbeat."""
    started = attached(data_dir).rebalance_group(group_id)
    members = len(started["members"])
    click.echo(f"consumer group {group_id}: rebalance started on coordinator node {started['coordinator']} "
               f"(leaving generation {started['generation']}, {members} member{'s' * (members != 1)} to rejoin)")


@group.command("remove-member")
@click.argument("group_id", metavar="GROUP")
@click.argument("member")
@data_dir_option
def group_remove_member(group_id, member, data_dir):
    """Remove MEMBER (a static member's group.instance.id, or a member id) from GROUP, as Kafka's
    AdminClient.removeMembersFromConsumerGroup does; the others rebalance."""
    removed = attached(data_dir).remove_group_member(group_id, member)
    what = "static member" if removed["group_instance_id"] else "member"
    click.echo(f"consumer group {group_id}: removed {what} {member}")


@group.command("move-coordinator")
@click.argument("group_id", metavar="GROUP")
@click.option("--to", "to_node", type=int, default=None, help="node to coordinate the group "
                                                              "[default: another in-sync replica]")
@data_dir_option
def group_move_coordinator(group_id, to_node, data_dir):
    """Give GROUP's __consumer_offsets partition another leader, so its members must find the new coordinator."""
    moved = attached(data_dir).move_group_coordinator(group_id, to_node)
    click.echo(f"consumer group {group_id}: coordinator moved from node {moved['from']} to node {moved['to']} "
               f"({moved['partition']})")


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--key", default=None, help="key of every message")
@click.option("--partition", type=int, default=None, help="partition (default: by key, as the client chooses)")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", help="header (repeatable)")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@data_dir_option
@bootstrap_option
def produce(topic_name, values, key, partition, headers, acks, data_dir, bootstrap_server):
    """Send VALUES (or, without any, each line of standard input) to TOPIC."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    header_list = [(k, v.encode()) for k, v in parse_pairs(headers, "--header").items()]
    producer = connected(KafkaProducer, bootstrap_servers(data_dir, bootstrap_server),
                         acks=acks if acks == "all" else int(acks), max_block_ms=PRODUCE_METADATA_WAIT_MS)
    try:
        check_partition(topic_name, partition, _partitions_for_producer(producer, topic_name))
        lines = values or (line.rstrip("\n") for line in sys.stdin)
        futures = [producer.send(topic_name, value=value.encode(), key=key.encode() if key is not None else None,
                                 partition=partition, headers=header_list) for value in lines]
        producer.flush()
        for future in futures:
            try:
                metadata = future.get()
            except KafkaError as exc:
                fail(f"cannot write to topic '{topic_name}': {kafka_exception_text(exc)}")
            click.echo(f"{metadata.topic}-{metadata.partition}@{metadata.offset}", err=True)
    finally:
        producer.close()


# How long produce waits for a topic to appear (auto-creation takes well under a second).
PRODUCE_METADATA_WAIT_MS = 5000


def _partitions_for_producer(producer, topic_name: str) -> set[int]:
    """The topic's partitions, created first where the cluster creates topics on first use, as Kafka's producer does."""
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError, InvalidTopicError

    try:
        return producer.partitions_for(topic_name)
    except KafkaTimeoutError:
        fail(topic_error(topic_name, UnknownTopicOrPartitionError.errno))
    except (InvalidTopicError, TopicAuthorizationFailedError) as exc:
        fail(topic_error(topic_name, exc.errno))


def check_partition(topic_name: str, partition: int | None, available) -> None:
    if not available:
        fail(topic_error(topic_name, UnknownTopicOrPartitionError.errno))
    if partition is not None and partition not in available:
        fail(f"topic '{topic_name}' has no partition {partition} (its partitions are 0-{max(available)}).")


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset instead of the end")
@click.option("--partition", "partitions", type=int, multiple=True, help="only this partition (repeatable)")
@click.option("--max-messages", type=int, default=None, help="stop after this many messages")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="stop after this many idle seconds")
@click.option("--print-key", is_flag=True, help="print key<TAB>value")
@click.option("--format", "line_format", default=None, metavar="TEMPLATE",
              help="each message as TEMPLATE, with {topic} {partition} {offset} {timestamp} {key} {value} {headers}; "
                   "\\t and \\n are a tab and a newline (default: {value})")
@data_dir_option
@bootstrap_option
def consume(topic_name, from_beginning, partitions, max_messages, timeout, print_key, line_format, data_dir,
            bootstrap_server):
    """Print the values of TOPIC's messages, one per line."""
    from kafka import KafkaConsumer, TopicPartition

    template = _message_template(line_format, print_key)

    consumer = connected(KafkaConsumer, bootstrap_servers(data_dir, bootstrap_server), enable_auto_commit=False,
                         consumer_timeout_ms=int(timeout * 1000))
    try:
        available = consumer.partitions_for_topic(topic_name) or set()
        for partition in partitions or [None]:
            check_partition(topic_name, partition, available)
        chosen = partitions or sorted(available)
        consumer.assign([TopicPartition(topic_name, p) for p in chosen])
        if from_beginning:
            consumer.seek_to_beginning()
        for count, record in enumerate(consumer, start=1):
            click.echo(_format_message(template, record))
            if max_messages is not None and count >= max_messages:
                break
    finally:
        consumer.close()


def _message_template(line_format: str | None, print_key: bool) -> str:
    if line_format is None:
        return "{key}\t{value}" if print_key else "{value}"
    # Shells pass \t literally; kcat's -f takes the same escapes.
    return line_format.replace("\\t", "\t").replace("\\n", "\n")


def _format_message(template: str, record) -> str:
    def text(raw: bytes | None) -> str:
        return (raw or b"").decode(errors="replace")

    try:
        return template.format(topic=record.topic, partition=record.partition, offset=record.offset,
                               timestamp=record.timestamp, key=text(record.key), value=text(record.value),
                               headers=",".join(f"{k}={text(v)}" for k, v in record.headers or ()))
    except (KeyError, IndexError, ValueError) as exc:
        raise click.BadParameter(f"{template!r}: {exc}", param_hint="--format") from exc


@main.command()
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
def bench(nodes, messages, value_size, partitions, down_runs, against_mock, large_values, latency_rounds,
          startup_runs, scale, scale_nodes, scale_topics, scale_dir, idle_seconds, metadata_requests):
    """Start a fresh cluster on free ports and print start-up, produce, fetch, failover and stop figures
    (--against-mock: side by side with librdkafka's mock cluster; --scale: a 9,000-replica cluster)."""
    if against_mock:
        from cluster.bench.against_mock import side_by_side

        side_by_side(nodes=nodes, replication_factor=min(3, nodes), messages=messages, large_values=large_values,
                     console=console, latency_rounds=latency_rounds)
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


@main.command("check-failover")
@click.option("--duration", type=float, default=60, show_default=True, help="seconds of writes under faults")
@click.option("--seed", type=int, default=None, help="replay the faults of an earlier run")
@click.option("--faults", default="kill,stop,pause,isolate", show_default=True,
              help="comma-separated faults the nemesis picks from")
@click.option("--hold", default="2-5", show_default=True, callback=_seconds_range,
              help="MIN-MAX seconds each fault lasts")
@click.option("--gap", default="1-3", show_default=True, callback=_seconds_range,
              help="MIN-MAX seconds between faults, once every replica is back in sync")
@click.option("--producers", type=int, default=2, show_default=True)
@click.option("--partitions", type=int, default=3, show_default=True)
@click.option("--topic", default=None, help="a new topic to write [default: kraftwerk-failover-check-<time>]")
@data_dir_option
def check_failover(duration, seed, faults, hold, gap, producers, partitions, topic, data_dir):
    """Write numbered messages with acks=all while random nodes are killed, stopped, paused and
    isolated one at a time; then check that every acknowledged message is there once and in order.
    Exits 1 if any was lost, duplicated, moved or reordered."""
    from cluster.tools.failover_check import FailoverCheck, render

    cluster = attached(data_dir)
    try:
        check = FailoverCheck(cluster, duration_s=duration, seed=seed,
                              faults=tuple(f.strip() for f in faults.split(",") if f.strip()),
                              hold_s=hold, gap_s=gap, producers=producers, partitions=partitions,
                              topic=topic or f"kraftwerk-failover-check-{int(time.time())}", log=console.print)
        report = check.run()
    except (ValueError, ClusterError) as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(render(report))
    sys.exit(0 if report.ok else 1)


@main.command()
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


if __name__ == "__main__":
    sys.exit(main())


# Registers `node add`, `node remove` and `rebalance` on the groups above.
from cluster.cli import grow  # noqa: E402,F401
