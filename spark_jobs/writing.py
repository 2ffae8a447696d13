"""Writing rows to topics from a Spark task with an idempotent librdkafka producer.

Rows carry `value` and optionally `key`, `topic`, `partition` and `headers`, as for
Spark's Kafka sink. A row without a partition goes where Kafka's default partitioner puts
it (murmur2 of the key, as a Java producer does). The task fails with the broker's error
if any record could not be delivered.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from spark_jobs.options import OptionError, SinkOptions

_QUEUE_FULL_WAIT_S = 0.1
_HEADER_STRUCT = StructType().add("key", StringType()).add("value", BinaryType())


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int


class DeliveryError(RuntimeError):
    """A record could not be written; the message carries the broker's (or client's) error."""


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's Kafka sink checks: a value column, string or binary key/value, typed topic/partition/headers."""
    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in columns:
        raise OptionError("Required attribute 'value' not found in the rows written to kraftwerk")
    for name in ("key", "value"):
        if name in columns and not isinstance(columns[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary, not {columns[name].simpleString()}")
    if options.topic is None and "topic" not in columns:
        raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option for "
                          "setting a topic.")
    expected = {"topic": StringType(), "partition": IntegerType(), "headers": ArrayType(_HEADER_STRUCT)}
    for name, wanted in expected.items():
        if name in columns and columns[name].simpleString() != wanted.simpleString():
            raise OptionError(f"{name} attribute type must be {wanted.simpleString()}, "
                              f"not {columns[name].simpleString()}")


def check_reachable(options: SinkOptions) -> None:
    """Fail the write at planning, not after message.timeout.ms in every task, when no node answers."""
    from confluent_kafka.admin import AdminClient

    from spark_jobs.options import DEFAULT_REQUEST_TIMEOUT_MS
    from spark_jobs.planning import cluster_metadata

    timeout_s = int(options.client_config.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)) / 1000
    connection = {k: v for k, v in options.client_config.items()
                  if k == "bootstrap.servers" or k.startswith(("security.", "sasl.", "ssl.", "client."))}
    cluster_metadata(AdminClient(connection), options.bootstrap_servers, timeout_s)


def producer_config(options: SinkOptions) -> dict:
    """Idempotent, acks=all and Kafka's murmur2 partitioner, unless the user's kafka.* options say otherwise."""
    user = options.client_config
    config = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random", "linger.ms": 5,
              "delivery.report.only.error": True}
    if user.get("acks", "all") not in ("all", "-1") and "enable.idempotence" not in user:
        config["enable.idempotence"] = False  # as a Java producer does when acks is set below all
    config.update(user)
    return config


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteCommit:
    failures: list[str] = []

    def on_delivery(error, message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    config = producer_config(options)
    config["on_delivery"] = on_delivery
    config["error_cb"] = lambda error: failures.append(error.str()) if error.fatal() else None
    try:
        producer = Producer(config)
    except KafkaException as error:
        raise OptionError(f"Invalid kafka.* option: {error.args[0].str()}") from None
    written = 0
    for batch in batches:
        written += _produce_batch(producer, options.topic, batch, failures)
    producer.flush()
    if failures:
        raise DeliveryError(f"{len(failures)} record(s) were not written; first: {failures[0]}")
    return WriteCommit(written)


def _column(batch: pa.RecordBatch, name: str) -> list | repeat:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else repeat(None)


def _produce_batch(producer: Producer, topic_option: str | None, batch: pa.RecordBatch, failures) -> int:
    topics = repeat(topic_option) if topic_option else _column(batch, "topic")
    rows = zip(_column(batch, "value"), _column(batch, "key"), topics, _column(batch, "partition"),
               _column(batch, "headers"))
    for value, key, topic, partition, headers in rows:
        if topic is None:
            raise OptionError("Null topic present in the data. Use the topic option for setting a default topic.")
        if headers:
            headers = [(h["key"], h["value"]) for h in headers]
        _produce(producer, topic, value, key, -1 if partition is None else partition, headers)
        if failures:
            raise DeliveryError(f"A record was not written: {failures[0]}")
    producer.poll(0)
    return batch.num_rows


def _produce(producer: Producer, topic, value, key, partition, headers) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(_QUEUE_FULL_WAIT_S)  # serves delivery reports until the queue has room
