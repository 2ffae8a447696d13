"""`kraftwerk produce` and `consume`: write messages from the shell and read them back."""
from __future__ import annotations

import sys

import click
from kafka.errors import UnknownTopicOrPartitionError

from cluster.cli.app import bootstrap_option, bootstrap_servers, connected, data_dir_option, parse_pairs
from cluster.cli.errors import fail, kafka_exception_text, topic_error


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--key", default=None, help="key of every message")
@click.option("--partition", type=int, default=None, help="partition (default: by key, as the client chooses)")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", help="header (repeatable)")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option("--print-offsets", is_flag=True,
              help="print TOPIC-PARTITION@OFFSET of each message written, on stderr")
@data_dir_option
@bootstrap_option
def produce(topic_name, values, key, partition, headers, acks, print_offsets, data_dir, bootstrap_server):
    """Send VALUES (or, without any, each line of standard input) to TOPIC.

    Quiet when every message is written, as kcat and kafka-console-producer.sh are; a failure is one line on
    stderr and exit status 1."""
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
            if print_offsets:
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


@click.command()
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
