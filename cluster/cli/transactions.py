"""`kraftwerk txn ...`: transactions as kafka-transactions.sh lists, describes and repairs them, with its
commands, columns and table layout; cluster/tools/transaction_tools.py does the work."""
from __future__ import annotations

import re

import click

from cluster.cli.app import admin_client, bootstrap_option, data_dir_option, json_option, print_json
from cluster.tools.transaction_tools import (
    abort_transaction, describe_producers, describe_transaction, find_hanging, list_transactions,
)

# Kafka's transaction states, as ListTransactions filters on them.
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")


def kafka_table(headers: list[str], rows: list[list[str]]) -> str:
    """Rows as Kafka's tools print them (ToolsUtils.prettyPrintTable): every column padded to its widest
    value and followed by a tab, the header line first even when there are no rows."""
    widths = [max([len(header), *(len(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    return "".join("".join(value.ljust(width) + "\t" for value, width in zip(line, widths)) + "\n"
                   for line in [headers, *rows])


def _show(document, as_json: bool, headers: list[str], rows: list[list]) -> None:
    if as_json:
        print_json(document)
    else:
        click.echo(kafka_table(headers, [[str(value) for value in row] for row in rows]), nl=False)


def _none(value) -> str:
    return "None" if value is None else str(value)


def _minus_one(value) -> int:
    return -1 if value is None else value


def _pattern(ctx, param, value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise click.BadParameter(f"{value!r} is not a regular expression ({exc})") from None
    return value


@click.group()
def txn():
    """List and describe transactions and the producers of partitions; find and abort hanging
    transactions, as kafka-transactions.sh does."""


@txn.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="only transactions in this state "
                                                                                  "(repeatable)")
@click.option("--producer-id", "producer_ids", multiple=True, type=int, help="only this producer's (repeatable)")
@click.option("--duration-filter", type=int, default=None, metavar="MS",
              help="only transactions running longer than this many milliseconds")
@click.option("--transactional-id-pattern", default=None, metavar="REGEX", callback=_pattern,
              help="only transactional ids this regular expression matches whole")
@data_dir_option
@bootstrap_option
@json_option
def txn_list(states, producer_ids, duration_filter, transactional_id_pattern, data_dir, bootstrap_server, as_json):
    """Every transactional id with its coordinator, producer id and state (ListTransactions to every node)."""
    with admin_client(data_dir, bootstrap_server) as admin:
        rows = list_transactions(admin, states, producer_ids, duration_filter, transactional_id_pattern)
    _show(rows, as_json, ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
          [[r["transactional_id"], r["coordinator"], r["producer_id"], r["state"]] for r in rows])


@txn.command("describe")
@click.argument("transactional_id", metavar="ID")
@data_dir_option
@bootstrap_option
@json_option
def txn_describe(transactional_id, data_dir, bootstrap_server, as_json):
    """The state of transactional id ID, as its coordinator describes it."""
    with admin_client(data_dir, bootstrap_server) as admin:
        d = describe_transaction(admin, transactional_id)
    _show(d, as_json, ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                       "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                       "TopicPartitions"],
          [[d["coordinator_id"], transactional_id, d["producer_id"], d["producer_epoch"], d["state"],
            d["transaction_timeout_ms"], _none(d["transaction_start_time_ms"]), _none(d["transaction_duration_ms"]),
            ",".join(f"{tp['topic']}-{tp['partition']}" for tp in d["topic_partitions"])]])


@txn.command("describe-producers")
@click.argument("topic")
@click.argument("partition", type=int)
@click.option("--broker-id", type=int, default=None, help="ask this replica [default: the partition's leader]")
@data_dir_option
@bootstrap_option
@json_option
def txn_describe_producers(topic, partition, broker_id, data_dir, bootstrap_server, as_json):
    """The producers PARTITION of TOPIC knows: epochs, last sequence and timestamp, open transaction."""
    with admin_client(data_dir, bootstrap_server) as admin:
        producers = describe_producers(admin, topic, partition, broker_id)
    _show(producers, as_json, ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                               "LastTimestamp", "CurrentTransactionStartOffset"],
          [[p["producer_id"], p["producer_epoch"], _minus_one(p["coordinator_epoch"]), p["last_sequence"],
            p["last_timestamp"], _none(p["current_transaction_start_offset"])] for p in producers])


@txn.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, required=True, help="the first offset of the transaction to abort")
@data_dir_option
@bootstrap_option
def txn_abort(topic, partition, start_offset, data_dir, bootstrap_server):
    """Abort a hanging transaction: the open transaction that starts at --start-offset in the partition gets
    an ABORT marker, and read_committed consumers read past it."""
    with admin_client(data_dir, bootstrap_server) as admin:
        aborted = abort_transaction(admin, topic, partition, start_offset)
    click.echo(f"aborted the transaction of producer {aborted['producer_id']} (epoch {aborted['producer_epoch']}) "
               f"that started at offset {start_offset} of {topic}-{partition}")


@txn.command("find-hanging")
@click.option("--broker-id", type=int, default=None, help="search the partitions with a replica on this node")
@click.option("--topic", default=None, help="search this topic's partitions")
@click.option("--partition", type=int, default=None, help="only this partition of --topic")
@click.option("--max-transaction-timeout", type=int, default=15, show_default=True, metavar="MINUTES",
              help="transactions open longer than this are candidates (the cluster's transaction.max.timeout.ms)")
@data_dir_option
@bootstrap_option
@json_option
def txn_find_hanging(broker_id, topic, partition, max_transaction_timeout, data_dir, bootstrap_server, as_json):
    """Transactions open on a partition longer than the maximum transaction timeout whose coordinator has no
    ongoing transaction of that producer including the partition: no marker will ever end them."""
    if topic is None and broker_id is None:
        raise click.UsageError("find-hanging needs --topic or --broker-id to limit the scope of the search")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    with admin_client(data_dir, bootstrap_server) as admin:
        found = find_hanging(admin, broker_id, topic, partition, max_transaction_timeout)
    _show(found, as_json, ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                           "LastTimestamp", "Duration(min)"],
          [[h["topic"], h["partition"], h["producer_id"], h["producer_epoch"], _minus_one(h["coordinator_epoch"]),
            h["start_offset"], h["last_timestamp"], h["duration_minutes"]] for h in found])
