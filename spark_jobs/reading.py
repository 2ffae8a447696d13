"""Reading one offset range in a Spark task, from the leader of its partition, as Arrow batches.

A librdkafka consumer is assigned the one partition (no group membership, nothing
committed); it fetches from whichever node leads the partition and follows a leader
change on its own. Each `consume()` call becomes one Arrow record batch with the columns
of Spark's Kafka source, built column by column.
"""
from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from spark_jobs.options import SourceOptions, consumer_config
from spark_jobs.planning import DataLossError, OffsetRange

CONSUME_BATCH = 20000
_CONSUME_WAIT_S = 0.5

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_MS_TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source columns, in its order; headers only when includeHeaders is true."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", _TIMESTAMP_TYPE), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def read_range(options: SourceOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of part, in offset order, up to (not including) part.end."""
    consumer = Consumer(consumer_config(options))
    schema = arrow_schema(options.include_headers)
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        stalled_since = time.monotonic()
        while position < part.end:
            messages = consumer.consume(min(CONSUME_BATCH, part.end - position), timeout=_CONSUME_WAIT_S)
            messages, position = _handle_errors(consumer, options, part, messages, position)
            if not messages:
                _check_stall(options, part, position, stalled_since)
                continue
            stalled_since = time.monotonic()
            offsets = [m.offset() for m in messages]
            keep = bisect.bisect_left(offsets, part.end)
            yield _record_batch(messages[:keep], offsets[:keep], part, schema)
            position = offsets[-1] + 1
    finally:
        consumer.close()


def _handle_errors(consumer, options, part, messages, position):
    """Drop error events; an offset gone by retention is data loss (fatal or skipped)."""
    if not any(m.error() for m in messages):
        return messages, position
    for message in messages:
        error = message.error()
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            continue
        if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            position = _skip_lost(consumer, options, part, position)
        elif not error.retriable():
            raise RuntimeError(f"Reading {part.topic}-{part.partition} at offset {position} failed: {error.str()}")
    return [m for m in messages if m.error() is None], position


def _skip_lost(consumer, options, part, position) -> int:
    low, _high = consumer.get_watermark_offsets(TopicPartition(part.topic, part.partition),
                                                timeout=options.request_timeout_s, cached=False)
    if options.fail_on_data_loss:
        raise DataLossError(
            f"Offsets {position}-{low - 1} of {part.topic}-{part.partition} are no longer in the topic (deleted by "
            "retention, or the partition was truncated) before the query read them. Set the source option "
            "'failOnDataLoss' to 'false' to skip them.")
    position = min(max(low, position), part.end)
    consumer.assign([TopicPartition(part.topic, part.partition, position)])
    return position


def _check_stall(options, part, position, stalled_since) -> None:
    if time.monotonic() - stalled_since > options.poll_timeout_ms / 1000:
        raise TimeoutError(
            f"No records of {part.topic}-{part.partition} arrived for kafkaConsumer.pollTimeoutMs="
            f"{options.poll_timeout_ms} ms while offsets {position}-{part.end - 1} were still to be read")


def _record_batch(messages, offsets, part, schema) -> pa.RecordBatch:
    count = len(messages)
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(part.topic, pa.string()), count),
        pa.repeat(pa.scalar(part.partition, pa.int32()), count),
        pa.array(offsets, pa.int64()),
        pa.array([s[1] for s in stamps], _MS_TIMESTAMP_TYPE).cast(_TIMESTAMP_TYPE),
        # librdkafka counts NOT_AVAILABLE=0, CREATE_TIME=1, LOG_APPEND_TIME=2; Spark (as Kafka) -1, 0, 1.
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if len(schema) > 7:
        columns.append(pa.array([m.headers() for m in messages], HEADERS_TYPE))  # null without headers, as Spark
    return pa.RecordBatch.from_arrays(columns, schema=schema)
