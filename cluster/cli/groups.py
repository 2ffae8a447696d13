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
