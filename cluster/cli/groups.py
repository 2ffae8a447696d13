"""`kraftwerk group ...`: consumer groups as kafka-consumer-groups.sh shows and changes them, and the
rebalances, member removals and coordinator moves a test asks for."""
from __future__ import annotations

import click
from kafka import TopicPartition
from kafka.errors import GroupIdNotFoundError
from rich.table import Table

from cluster.cli.app import admin_client, attached, bootstrap_option, bootstrap_servers, connected, console, \
    data_dir_option, json_option, print_json
from cluster.cli.errors import fail, group_error, topic_error


@click.group()
def group():
    """List, describe, delete consumer groups and reset their offsets; rebalance them, remove members and move
    their coordinator on demand."""


@group.command("list")
@data_dir_option
@bootstrap_option
def group_list(data_dir, bootstrap_server):
    """Every group with its type (classic, consumer, share) and state."""
    with admin_client(data_dir, bootstrap_server) as admin:
        groups = admin.list_groups()
    table = Table(title="groups")
    for column in ("group", "type", "state", "protocol type"):
        table.add_column(column)
    for listed in sorted(groups, key=lambda g: g["group_id"]):
        table.add_row(listed["group_id"], listed.get("group_type") or "classic", listed.get("group_state", ""),
                      listed["protocol_type"])
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
    """Members, assignments, committed offsets and lag, as kafka-consumer-groups.sh shows them; a consumer
    group (KIP-848) with its epochs and each member's current and target assignment, a share group with
    its members and their assignments."""
    from cluster.tools import group_descriptions

    bootstrap = bootstrap_servers(data_dir, bootstrap_server)
    with admin_client(data_dir, bootstrap) as admin:
        document = group_descriptions.consumer_group(admin, group_id)
        if document is None:
            kind, described = group_descriptions.classic_or_share(admin, group_id)
            document = described if kind == "share" else None
        committed = admin.list_group_offsets(group_id)[group_id] if document is None or \
            document["type"] == "consumer" else {}
    if document is None:
        if described["group_state"] == "Dead" and not committed:
            fail(group_error(group_id, GroupIdNotFoundError.errno))  # what Kafka's tool says of a group nobody knows
        owner = _partition_owners(described)
        document = group_document(group_id, described, owner, committed)
    elif document["type"] == "consumer":
        document["partitions"] = _partition_rows(committed, {(t, p): m for m in document["members"]
                                                             for t, p in m["assignment"]})
    elif bootstrap_server is None:  # a share group's records in flight, from the leaders' admin ports
        from cluster.tools import group_tools

        document["partitions"] = group_tools.share_partitions(attached(data_dir), group_id)
    if document["type"] != "share":  # (a share group commits no offsets: its partitions are records in flight)
        _add_lag(bootstrap, document)
    if as_json:
        print_json(document)
        return
    _print_group(document)


def _print_group(document: dict) -> None:
    members = len(document["members"])
    if document["type"] == "classic":
        console.print(f"group {document['group_id']}: classic, {document['state']}, "
                      f"protocol {document['protocol'] or '-'}, {members} members")
    else:
        console.print(f"group {document['group_id']}: {document['type']}, {document['state']}, group epoch "
                      f"{document['group_epoch']}, assignment epoch {document['assignment_epoch']}, assignor "
                      f"{document['assignor']}, {members} members")
        table = Table()
        columns = ("member", "epoch", "client id", "host", "assigned") + \
            (("target",) if document["type"] == "consumer" else ())
        for column in columns:
            table.add_column(column)
        for m in document["members"]:
            row = [m["member_id"], str(m["member_epoch"]), m["client_id"], m["host"], _listed(m["assignment"])]
            table.add_row(*row, *([_listed(m["target_assignment"])] if document["type"] == "consumer" else []))
        console.print(table)
    if document["type"] == "share":
        _print_share_partitions(document.get("partitions", []))
        return
    table = Table()
    for column in ("topic", "partition", "committed", "log end", "lag", "member", "host", "client id"):
        table.add_column(column)
    for row in document["partitions"]:
        table.add_row(row["topic"], str(row["partition"]), _dash(row["committed"]), _dash(row["log_end"]),
                      _dash(row["lag"]), _dash(row["member_id"]), _dash(row["host"]), _dash(row["client_id"]))
    console.print(table)


def _print_share_partitions(partitions: list[dict]) -> None:
    """Records in flight per partition: between the start offset (all before it are done with) and the end."""
    if not partitions:
        return
    table = Table(title="records in flight")
    columns = ("topic", "partition", "leader", "start offset", "end offset", "available", "acquired",
               "acknowledged", "archived")
    for column in columns:
        table.add_column(column)
    for p in partitions:
        table.add_row(p["topic"], *(str(p[key]) for key in ("partition", "leader", "start_offset", "end_offset",
                                                               "available", "acquired", "acknowledged", "archived")))
    console.print(table)


def _listed(partitions: list) -> str:
    """[[topic, partition], ...] as topic:0,1 other:2."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items())) or "-"


def _add_lag(bootstrap: str, document: dict) -> None:
    """Fill in each partition row's log end and lag."""
    rows = document.get("partitions", [])
    if not rows:
        return
    ends = group_lag(bootstrap, {TopicPartition(r["topic"], r["partition"]) for r in rows})
    for row in rows:
        end = ends.get(TopicPartition(row["topic"], row["partition"]))
        row["log_end"] = end
        row["lag"] = end - row["committed"] if end is not None and row["committed"] is not None else None


def _partition_owners(described: dict) -> dict[tuple[str, int], dict]:
    """(topic, partition) -> the member it is assigned to."""
    owner = {}
    for member in described["members"]:
        for assigned in (member.get("member_assignment") or {}).get("assigned_partitions", []):
            for partition in assigned["partitions"]:
                owner[(assigned["topic"], partition)] = member
    return owner


def group_document(group_id: str, described: dict, owner: dict, committed: dict) -> dict:
    """A classic group's state, members and per-partition committed offsets (log ends and lag: _add_lag)."""
    members = [{"member_id": m["member_id"], "client_id": m.get("client_id"), "host": m.get("client_host"),
                "assignment": sorted([a["topic"], p] for a in (m.get("member_assignment") or {})
                                     .get("assigned_partitions", []) for p in a["partitions"])}
               for m in described["members"]]
    owners = {position: {"member_id": m["member_id"], "host": m.get("client_host"), "client_id": m.get("client_id")}
              for position, m in owner.items()}
    return {"group_id": group_id, "type": "classic", "state": described["group_state"],
            "protocol": described["protocol_data"] or None, "members": members,
            "partitions": _partition_rows(committed, owners)}


def _partition_rows(committed: dict, owner: dict) -> list[dict]:
    """A row per partition the group has an offset in or is assigned: its committed offset and owner."""
    rows = {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items()}
    for topic, partition in owner:
        rows.setdefault((topic, partition), None)
    return [{"topic": topic, "partition": partition, "committed": offset, "log_end": None, "lag": None,
             "member_id": owner.get((topic, partition), {}).get("member_id"),
             "host": owner.get((topic, partition), {}).get("host"),
             "client_id": owner.get((topic, partition), {}).get("client_id")}
            for (topic, partition), offset in sorted(rows.items())]


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
    from cluster.tools import group_descriptions

    with admin_client(data_dir, bootstrap) as admin:
        modern = group_descriptions.consumer_group(admin, group_id)  # DescribeGroups calls it Dead
        state = modern["state"] if modern else admin.describe_groups([group_id])[group_id]["group_state"]
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
    """Start a rebalance of GROUP now, as when a member joins: every member is told on its next heartbeat.
    A consumer group (KIP-848) gets a new group epoch and target assignment, which its members reconcile to."""
    started = attached(data_dir).rebalance_group(group_id)
    members = len(started["members"])
    plural = "s" * (members != 1)
    if started["group_type"] == "consumer":
        click.echo(f"consumer group {group_id}: rebalance started on coordinator node {started['coordinator']} "
                   f"(group epoch now {started['group_epoch']}, {members} member{plural} to reconcile)")
        return
    click.echo(f"consumer group {group_id}: rebalance started on coordinator node {started['coordinator']} "
               f"(leaving generation {started['generation']}, {members} member{plural} to rejoin)")


@group.command("remove-member")
@click.argument("group_id", metavar="GROUP")
@click.argument("member")
@data_dir_option
def group_remove_member(group_id, member, data_dir):
    """Remove MEMBER (a static member's group.instance.id, or a member id) from GROUP, as Kafka's
    AdminClient.removeMembersFromConsumerGroup does; the others rebalance. Of a consumer or share group,
    the coordinator takes the member out as if it had left, and its partitions go to the others."""
    removed = attached(data_dir).remove_group_member(group_id, member)
    what = "static member" if removed["group_instance_id"] else "member"
    kind = "share" if removed.get("group_type") == "share" else "consumer"
    epoch = f" (group epoch now {removed['group_epoch']})" if "group_epoch" in removed else ""
    click.echo(f"{kind} group {group_id}: removed {what} {member}{epoch}")


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
