"""`kraftwerk topic create|list|describe|delete|delete-records`."""
from __future__ import annotations

import uuid

import click
from rich.table import Table

from cluster.cli.app import admin_client, bootstrap_option, console, data_dir_option, json_option, parse_pairs, \
    print_json
from cluster.cli.errors import fail, kafka_exception_text, topic_error
from cluster.formats.topic_ids import topic_id_to_kafka_string


@click.group()
def topic():
    """Create, list, describe and delete topics."""


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
@click.option("--sizes", is_flag=True, help="also each replica's size on disk (DescribeLogDirs of every node)")
@data_dir_option
@bootstrap_option
@json_option
def topic_describe(name, sizes, data_dir, bootstrap_server, as_json):
    """Partitions of topic NAME with leaders, replicas and ISR."""
    with admin_client(data_dir, bootstrap_server) as admin:
        described = admin.describe_topics([name])[0]
        replica_sizes = _replica_sizes(admin, name) if sizes and not described["error_code"] else None
    if described["error_code"]:
        fail(topic_error(name, described["error_code"]))
    # Kafka's tools print topic ids in Kafka's base64 form, as `status` does.
    topic_id = topic_id_to_kafka_string(uuid.UUID(str(described["topic_id"])))
    document = {"name": name, "topic_id": topic_id, "partitions": [
        {"partition": p["partition_index"], "leader": p["leader_id"], "leader_epoch": p["leader_epoch"],
         "replicas": p["replica_nodes"], "isr": p["isr_nodes"]}
        for p in sorted(described["partitions"], key=lambda p: p["partition_index"])]}
    if replica_sizes is not None:
        for partition in document["partitions"]:
            partition["sizes"] = replica_sizes.get(partition["partition"], {})
    if as_json:
        print_json(document)
        return
    table = Table(title=f"{name} ({document['topic_id']})")
    for column in ("partition", "leader", "replicas", "isr", *(("bytes per replica",) if sizes else ())):
        table.add_column(column)
    for partition in document["partitions"]:
        extra = (", ".join(f"{node}: {size:,}" for node, size in sorted(partition["sizes"].items())),) if sizes else ()
        table.add_row(str(partition["partition"]), str(partition["leader"]),
                      ",".join(map(str, partition["replicas"])), ",".join(map(str, partition["isr"])), *extra)
    console.print(table)


def _replica_sizes(admin, topic: str) -> dict[int, dict[int, int]]:
    """partition -> {node id: bytes of its log}, as each node's DescribeLogDirs answers."""
    sizes: dict[int, dict[int, int]] = {}
    for answer in admin.describe_log_dirs([topic]):
        for log_dir in answer["log_dirs"]:
            for described in log_dir["topics"]:
                for partition in described["partitions"]:
                    sizes.setdefault(partition["partition_index"], {})[answer["broker"]] = partition["partition_size"]
    return sizes


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


@topic.command("delete-records")
@click.argument("name")
@click.option("--partition", "partitions", type=int, multiple=True,
              help="a partition to delete from (repeatable) [default: every partition]")
@click.option("--before", type=int, required=True,
              help="delete every record before this offset; -1: before the high watermark (everything committed)")
@data_dir_option
@bootstrap_option
def topic_delete_records(name, partitions, before, data_dir, bootstrap_server):
    """Delete the records of topic NAME before an offset (DeleteRecords, as kafka-delete-records.sh)."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    with admin_client(data_dir, bootstrap_server) as admin:
        if not partitions:
            described = admin.describe_topics([name])[0]
            if described["error_code"]:
                fail(topic_error(name, described["error_code"]))
            partitions = sorted(p["partition_index"] for p in described["partitions"])
        for partition in partitions:
            key = TopicPartition(name, partition)
            try:
                low_watermark = admin.delete_records({key: before}, timeout_ms=30_000)[key]["low_watermark"]
            except KafkaError as exc:
                fail(f"topic '{name}' partition {partition}: cannot delete before offset {before}: "
                     f"{kafka_exception_text(exc)}")
            click.echo(f"{name}-{partition}: records before offset {low_watermark} deleted")
