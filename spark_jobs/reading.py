"""Reading one offset range in a Spark task, from the leader of its partition, as Arrow batches.

A librdkafka consumer is assigned the one partition (no group membership, nothing
committed); it fetches from whichever node leads the partition and follows a leader
change on its own. Each `consume()` call becomes one Arrow record batch with the columns
of Spark's Kafka source, built column by column.

Not every offset holds a record the consumer hands out: transaction markers never do, records
of aborted transactions do not at read_committed, and compaction removes records. As Spark's
KafkaDataConsumer, the task skips such offsets without a word: they are not data loss (only
offsets below the log start are). The range is done once the consumer's position (which moves
past markers and aborted records) or the end of the partition it reports reaches the range's end.
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
    assigned = TopicPartition(part.topic, part.partition)
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        stalled_since = time.monotonic()
        while position < part.end:
            messages = consumer.consume(min(CONSUME_BATCH, part.end - position), timeout=_CONSUME_WAIT_S)
            messages, position, end_seen = _handle_errors(consumer, options, part, messages, position)
            before = position
            if messages:
                offsets = [m.offset() for m in messages]
                keep = bisect.bisect_left(offsets, part.end)
                if keep:
                    yield _record_batch(messages[:keep], offsets[:keep], part, schema)
                position = offsets[-1] + 1
            if position < part.end:
                # Offsets that hold nothing to read (markers, aborted records) still move the position.
                position = max(position, end_seen, consumer.position([assigned])[0].offset)
            if position > before or messages:
                stalled_since = time.monotonic()
            else:
                _check_stall(options, part, position, stalled_since)
    finally:
        consumer.close()


def _handle_errors(consumer, options, part, messages, position):
    """Drop error events; an offset gone by retention is data loss (fatal or skipped). Also returns the offset
    the end of the partition was last reported at (-1 if it was not): every record before it has arrived."""
    end_seen = -1
    if not any(m.error() for m in messages):
        return messages, position, end_seen
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() == KafkaError._PARTITION_EOF:
            end_seen = message.offset()
        elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            position = _skip_lost(consumer, options, part, position)
            end_seen = -1
        elif not error.retriable():
            raise RuntimeError(f"Reading {part.topic}-{part.partition} at offset {position} failed: {error.str()}")
    return [m for m in messages if m.error() is None], position, end_seen


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
        level = " (at read_committed, a transaction still open holds them back)" if options.read_committed else ""
        raise TimeoutError(
            f"No records of {part.topic}-{part.partition} arrived for kafkaConsumer.pollTimeoutMs="
            f"{options.poll_timeout_ms} ms while offsets {position}-{part.end - 1} were still to be read{level}")


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
