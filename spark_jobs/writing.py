"""Writing rows to topics from a Spark task with an idempotent librdkafka producer.

Rows carry `value` and optionally `key`, `topic`, `partition` and `headers`, as for
Spark's Kafka sink. A row without a partition goes where Kafka's default partitioner puts
it (murmur2 of the key, as a Java producer does). The task fails with the broker's error
if any record could not be delivered.

With the sink option `transactionalIdPrefix`, each task writes its rows in one transaction with
the transactional id `<prefix>-<the task's partition id>`, committed once every row is written
and aborted when the task fails: read_committed readers see all of a task's rows or none. The id
is the same for every attempt of a task, so a retried task's producer fences an attempt that is
still running elsewhere and aborts what it left open (as the transactional ids of Flink's Kafka
sink do, one per subtask).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Callable

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from spark_jobs.options import OptionError, SinkOptions
from spark_jobs.task_input import input_ended_cleanly

_QUEUE_FULL_WAIT_S = 0.1
# librdkafka's transaction.timeout.ms; init, commit and abort wait as long for the coordinator.
_DEFAULT_TRANSACTION_TIMEOUT_MS = 60000
_HEADER_STRUCT = StructType().add("key", StringType()).add("value", BinaryType())


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int


class DeliveryError(RuntimeError):
    """A record could not be written; the message carries the broker's (or client's) error."""


class TaskInputCut(RuntimeError):
    """Spark ended a transactional task's rows early, because what computed them failed."""


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


def task_transactional_id(prefix: str) -> str:
    """`<prefix>-<partition id>` for the running Spark task: the same for each of its attempts."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("A transactional write runs in Spark tasks only")
    return f"{prefix}-{context.partitionId()}"


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch],
                  input_complete: Callable[[], bool] = input_ended_cleanly) -> WriteCommit:
    """Write every row; with a transactional id prefix, commit them together once `input_complete()` says that
    Spark sent them all, and abort them if anything fails."""
    failures: list[str] = []

    def on_delivery(error, message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    config = producer_config(options)
    config["on_delivery"] = on_delivery
    config["error_cb"] = lambda error: failures.append(error.str()) if error.fatal() else None
    transactional_id = None
    if options.transactional_id_prefix:
        transactional_id = config["transactional.id"] = task_transactional_id(options.transactional_id_prefix)
    try:
        producer = Producer(config)
    except KafkaException as error:
        raise OptionError(f"Invalid kafka.* option: {error.args[0].str()}") from None
    if transactional_id is None:
        written = sum(_produce_batch(producer, options.topic, batch, failures) for batch in batches)
        producer.flush()
        if failures:
            raise DeliveryError(f"{len(failures)} record(s) were not written; first: {failures[0]}")
        return WriteCommit(written)
    return _write_transaction(producer, transactional_id, options, batches, failures, input_complete)


def _write_transaction(producer: Producer, transactional_id: str, options: SinkOptions, batches, failures,
                       input_complete: Callable[[], bool]) -> WriteCommit:
    timeout_s = int(options.client_config.get("transaction.timeout.ms", _DEFAULT_TRANSACTION_TIMEOUT_MS)) / 1000
    _transaction_call(producer.init_transactions, timeout_s, transactional_id, "start")
    producer.begin_transaction()
    try:
        written = sum(_produce_batch(producer, options.topic, batch, failures) for batch in batches)
        if not input_complete():
            raise TaskInputCut(f"Spark cut this task's rows short after {written} (what computed them failed): "
                               f"the transaction of {transactional_id} is aborted")
        _transaction_call(producer.commit_transaction, timeout_s, transactional_id, "commit")
    except BaseException:
        refused = list(failures)  # (the abort purges what is still queued: those reports are not the cause)
        try:
            producer.abort_transaction(timeout_s)
        except KafkaException:
            pass  # (the coordinator aborts it when it times out, or the task's next attempt does)
        if refused:
            raise DeliveryError(f"{len(refused)} record(s) were not written, so the transaction of "
                                f"{transactional_id} is aborted; first: {refused[0]}") from None
        raise
    return WriteCommit(written)


def _transaction_call(call, timeout_s: float, transactional_id: str, what: str) -> None:
    """init_transactions or commit_transaction, called again while librdkafka says the error is retriable."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            call(max(deadline - time.monotonic(), 1.0))
            return
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable() and time.monotonic() < deadline:
                continue
            raise DeliveryError(f"Could not {what} the transaction of {transactional_id}: {error.str()}") from None


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
