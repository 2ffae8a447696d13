"""The `kraftwerk` data source: Spark's Kafka connector on Spark 4's Python data source API.

    from spark_jobs import register
    register(spark)
    df = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", servers).option("subscribe", "t").load()

Options and columns are those of Spark's own Kafka source and sink, so a job moves between
the two by changing the format name. Planning (partitions, offsets) happens where Spark
plans; every task reads one offset range from the partition's leader (reading.py) or
writes its rows with an idempotent producer (writing.py), in a transaction of its own with
the sink option `transactionalIdPrefix`. Reads honour `kafka.isolation.level`: at
read_committed, offsets are planned up to the last stable offset and aborted records skipped.
"""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter, DataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_jobs.options import sink_options, source_options
from spark_jobs.planning import ClusterView, check_data_loss, offset_ranges
from spark_jobs.reading import read_range
from spark_jobs.writing import check_reachable, check_sink_schema, write_batches

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS_COLUMN = ", headers array<struct<key: string, value: binary>>"


class KraftwerkDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kraftwerk"

    def schema(self) -> str:
        include_headers = self.options.get("includeHeaders", self.options.get("includeheaders", "false"))
        return SCHEMA + (HEADERS_COLUMN if include_headers.strip().lower() == "true" else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftwerkBatchReader(source_options(self.options, batch=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KraftwerkStreamReader(source_options(self.options, batch=False))

    def _sink_options(self, schema: StructType):
        options = sink_options(self.options)
        check_sink_schema(schema, options)
        check_reachable(options)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return KraftwerkWriter(self._sink_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return KraftwerkStreamWriter(self._sink_options(schema))


class KraftwerkBatchReader(DataSourceReader):
    """startingOffsets (default earliest) to endingOffsets (default latest, the high watermark now)."""

    def __init__(self, options):
        self.options = options

    def partitions(self):
        view = ClusterView(self.options)
        try:
            partitions = view.partitions()
            starts = view.resolve(self.options.starting, partitions, "earliest", True)
            ends = view.resolve(self.options.ending, partitions, "latest", False)
            starts = check_data_loss(starts, view.earliest(partitions), ends, self.options.fail_on_data_loss)
        finally:
            view.close()
        return offset_ranges(starts, ends, self.options.min_partitions)

    def read(self, partition):
        return read_range(self.options, partition)


class KraftwerkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between offsets shaped as Spark's Kafka source writes them: {"topic": {"0": 42}}.

    New partitions are read from their earliest offset; maxOffsetsPerTrigger is shared
    among partitions in proportion to their lag, as Spark does.
    """

    def __init__(self, options):
        self.options = options
        self.view = None
        self.available_now_target = None

    def _cluster(self) -> ClusterView:
        if self.view is None:
            self.view = ClusterView(self.options)
        return self.view

    def initialOffset(self) -> dict:
        view = self._cluster()
        partitions = view.partitions()
        return to_json(view.resolve(self.options.starting, partitions, "latest", True))

    def _latest(self) -> dict:
        view = self._cluster()
        return view.latest(view.partitions())

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = self._latest()

    def getDefaultReadLimit(self):
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        latest = self.available_now_target or self._latest()
        starts = from_json(start)
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in starts]
            known = {**self._cluster().earliest(new), **starts} if new else starts
            latest = rate_limit(known, latest, limit.max_rows)
        # Never behind the start: a new leader may briefly report less while its high watermark settles, and a
        # partition the metadata no longer shows keeps its offset, so nothing is read twice.
        return to_json({**starts, **{tp: max(end, starts.get(tp, end)) for tp, end in latest.items()}})

    def reportLatestOffset(self):
        return to_json(self._latest())

    def partitions(self, start: dict, end: dict):
        ends = from_json(end)
        starts = from_json(start)
        view = self._cluster()
        new = [tp for tp in ends if tp not in starts]
        starts.update(view.earliest(new) if new else {})
        starts = check_data_loss(starts, view.earliest(list(ends)), ends, self.options.fail_on_data_loss)
        return offset_ranges(starts, ends, self.options.min_partitions)

    def read(self, partition):
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to the cluster."""

    def stop(self) -> None:
        if self.view is not None:
            self.view.close()


class KraftwerkWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return write_batches(self.options, iterator)


class KraftwerkStreamWriter(DataSourceStreamArrowWriter):
    """At least once, as Spark's Kafka sink: a micro-batch retried after a failure may write again. With
    transactionalIdPrefix, each task's rows of a micro-batch are committed together or not at all."""

    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId) -> None:
        """Every record was acknowledged before its task finished; nothing is left to commit."""

    def abort(self, messages, batchId) -> None:
        """Records already acknowledged (or tasks' transactions committed) stay in the topic, as with Spark's
        Kafka sink."""


def rate_limit(starts: dict, latest: dict, limit: int) -> dict:
    """Spark's KafkaMicroBatchStream.rateLimit: each partition's share of limit follows its lag."""
    sizes = {tp: end - starts[tp] for tp, end in latest.items() if tp in starts and end - starts[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return latest
    limited = {}
    for tp, end in latest.items():
        if tp not in sizes:
            limited[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        share = int(share) if share >= 1 else 1  # a small partition is never starved
        limited[tp] = min(end, starts[tp] + share)
    return limited


def to_json(offsets: dict) -> dict:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json(offsets: dict) -> dict:
    return {(topic, int(partition)): offset for topic, parts in offsets.items() for partition, offset in parts.items()}
