"""Planning a read: which partitions a subscription means, where to start and end, how to split.

This runs where Spark plans (the driver's Python planner, or the long-lived process of a
streaming query), with a librdkafka admin client. The offset ranges it returns pickle into
the tasks, each of which reads its range from the partition's leader (reading.py).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec as ListOffsetsSpec
from pyspark.sql.datasource import InputPartition

from spark_jobs.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions, consumer_config

_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state"}
_RETRY_BACKOFF_S = 0.1

TopicPartitionKey = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets a query still had to read are gone from the topic (retention, truncation, deletion)."""


@dataclass
class OffsetRange(InputPartition):
    """One Spark input partition: offsets [start, end) of one topic partition."""
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class ClusterView:
    """Partitions, leaders and offsets as the cluster reports them, through one admin client."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self.timeout_s = options.request_timeout_s
        # Offsets are listed at the tasks' isolation level, as Spark's KafkaOffsetReaderAdmin lists them: "latest"
        # is the last stable offset for read_committed, the high watermark otherwise.
        self.isolation_level = (IsolationLevel.READ_COMMITTED if options.read_committed
                                else IsolationLevel.READ_UNCOMMITTED)
        # (isolation.level is a consumer's setting, which an admin client would warn about and ignore.)
        admin_config = {k: v for k, v in options.client_config.items() if k != "isolation.level"}
        try:
            Consumer(consumer_config(options)).close()  # the tasks' settings, checked before any task runs
            self.admin = AdminClient(admin_config)
        except KafkaException as error:
            raise OptionError(f"Invalid kafka.* option: {error.args[0].str()}") from None

    def metadata(self):
        return cluster_metadata(self.admin, self.options.bootstrap_servers, self.timeout_s)

    def leaders(self) -> dict[TopicPartitionKey, int]:
        """The node id leading each partition of the subscription (-1 while it has none)."""
        topics = self.metadata().topics
        return {(t, p): topics[t].partitions[p].leader for t, p in self.partitions(topics)}

    def partitions(self, topics=None) -> list[TopicPartitionKey]:
        """The partitions the subscription names now; an assigned one that does not exist is an error."""
        topics = topics if topics is not None else self.metadata().topics
        present = {(name, p) for name, meta in topics.items() if meta.error is None for p in meta.partitions}
        options = self.options
        if options.subscription == "assign":
            missing = sorted(set(options.assigned) - present)
            if missing:
                names = ", ".join(f"{t}-{p}" for t, p in missing)
                raise OptionError(f"Option 'assign' names partitions that do not exist: {names}")
            return sorted(set(options.assigned))
        if options.subscription == "subscribe":
            wanted = set(options.topics)
            return sorted(tp for tp in present if tp[0] in wanted)
        pattern = re.compile(options.pattern)
        return sorted(tp for tp in present if tp[0] not in _INTERNAL_TOPICS and pattern.fullmatch(tp[0]))

    def list_offsets(self, partitions: list[TopicPartitionKey], spec_for) -> dict[TopicPartitionKey, int]:
        """ListOffsets for each partition, spec_for(tp) giving earliest/latest/a time; -1 where a time matches none.
        At read_committed, latest is the last stable offset and a time matches nothing at or above it.

        Retriable errors (a leader moving, a new leader not yet sure of its high watermark)
        are retried until kafka.request.timeout.ms runs out.
        """
        deadline = time.monotonic() + self.timeout_s
        result: dict[TopicPartitionKey, int] = {}
        pending = list(partitions)
        while pending:
            futures = self.admin.list_offsets({TopicPartition(t, p): spec_for((t, p)) for t, p in pending},
                                              isolation_level=self.isolation_level, request_timeout=self.timeout_s)
            failed = []
            for tp, future in futures.items():
                try:
                    result[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as error:
                    if not _retriable(error) or time.monotonic() > deadline:
                        raise ConnectionError(f"Listing offsets of {tp.topic}-{tp.partition} failed: "
                                              f"{error.args[0].str()}") from None
                    failed.append((tp.topic, tp.partition))
            pending = failed
            if pending:
                time.sleep(_RETRY_BACKOFF_S)  # the client's retry backoff while leadership settles
        return result

    def earliest(self, partitions) -> dict[TopicPartitionKey, int]:
        return self.list_offsets(partitions, lambda tp: ListOffsetsSpec.earliest())

    def latest(self, partitions) -> dict[TopicPartitionKey, int]:
        return self.list_offsets(partitions, lambda tp: ListOffsetsSpec.latest())

    def resolve(self, spec: OffsetSpec | None, partitions, default: str, starting: bool):
        """Offsets for each partition from a startingX/endingX spec (None means `default`)."""
        spec = spec or OffsetSpec(default)
        option = spec.option
        if spec.kind in ("earliest", "latest"):
            return self.earliest(partitions) if spec.kind == "earliest" else self.latest(partitions)
        if spec.kind == "offsets":
            return self._specific_offsets(spec.offsets, partitions, option)
        times = ({tp: spec.timestamp for tp in partitions} if spec.kind == "timestamp"
                 else _per_partition(spec.offsets, partitions, option))
        found = self.list_offsets(partitions, lambda tp: ListOffsetsSpec.for_timestamp(times[tp]))
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing and starting and self.options.timestamp_not_found == "error":
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise ValueError(f"No offset matched the timestamp of option '{option}' in {names}; set "
                             "'startingOffsetsByTimestampStrategy' to 'latest' to start at the end instead")
        latest = self.latest(missing) if missing else {}
        return {tp: latest.get(tp, offset) for tp, offset in found.items()}

    def _specific_offsets(self, offsets: dict, partitions, option: str):
        wanted = _per_partition(offsets, partitions, option)
        earliest = self.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in wanted.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, offset)) for tp, offset in wanted.items()}

    def close(self) -> None:
        self.admin = None


def cluster_metadata(admin: AdminClient, bootstrap_servers: str, timeout_s: float):
    """The cluster's metadata, or a clear error when no node answers within kafka.request.timeout.ms."""
    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as error:
        raise ConnectionError(f"No answer from kafka.bootstrap.servers={bootstrap_servers} within "
                              f"kafka.request.timeout.ms={int(timeout_s * 1000)}: {error.args[0].str()}") from None


def _retriable(error: KafkaException) -> bool:
    kafka_error = error.args[0]
    return kafka_error.retriable() or kafka_error.code() in (
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError._TRANSPORT, KafkaError.UNKNOWN_TOPIC_OR_PART)


def _per_partition(by_topic: dict, partitions, option: str) -> dict[TopicPartitionKey, int]:
    """Spark requires per-partition JSON to name exactly the partitions the subscription reads."""
    given = {(topic, p): value for topic, parts in by_topic.items() for p, value in parts.items()}
    if set(given) != set(partitions):
        raise OptionError(f"Option '{option}' must name every partition read and no other: it names "
                          f"{_names(given)}, the subscription reads {_names(partitions)}")
    return given


def _names(partitions) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(partitions)) + "]"


def offset_ranges(starts: dict, ends: dict, min_partitions: int | None) -> list[OffsetRange]:
    """One range per partition with something to read, split further to reach minPartitions.

    As Spark's KafkaOffsetRangeCalculator: a partition gets a share of minPartitions in
    proportion to its size (at least one), cut into ranges of (nearly) equal size.
    """
    ranges = [OffsetRange(t, p, starts[(t, p)], end) for (t, p), end in sorted(ends.items())
              if end > starts[(t, p)]]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    return [piece for r in ranges for piece in _split(r, max(round(r.size / total * min_partitions), 1))]


def _split(whole: OffsetRange, parts: int) -> list[OffsetRange]:
    pieces, start, remaining = [], whole.start, whole.size
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        if size:
            pieces.append(OffsetRange(whole.topic, whole.partition, start, start + size))
        start += size
    return pieces


def check_data_loss(starts: dict, earliest: dict, ends: dict, fail: bool) -> dict:
    """Start offsets moved past what retention deleted; with failOnDataLoss a clear error instead."""
    moved = {}
    for tp, start in starts.items():
        low = earliest.get(tp, start)
        end = ends.get(tp, start)
        if start >= low and start <= end:
            moved[tp] = start
            continue
        lost = (f"{start}-{low - 1}" if start < low else f"{start} and later (the partition now ends at {end})")
        if fail:
            raise DataLossError(
                f"Offsets {lost} of {tp[0]}-{tp[1]} are no longer in the topic: they were deleted by retention, or "
                "the partition was truncated or recreated, before the query read them. Set the source option "
                "'failOnDataLoss' to 'false' to skip them.")
        moved[tp] = min(max(start, low), end)
    return moved
