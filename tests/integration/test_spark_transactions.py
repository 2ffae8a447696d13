"""The kraftwerk Spark data source and transactions: reads at either isolation level.

One local[2] SparkSession and one cluster serve the module; every test uses its own topics.
"""
from __future__ import annotations

import time

import pytest

from tests.integration.spark_support import module_fixtures, produce

spark, kraftwerk = module_fixtures("kraftwerk-transaction-tests",
                                   node_config={"transaction.state.log.num.partitions": "5"})

# A range whose records never all arrive fails after this long, not Spark's 120 s.
POLL_TIMEOUT_MS = "20000"


def reader(spark, cluster, isolation: str, **options):
    read = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("kafka.isolation.level", isolation).option("kafkaConsumer.pollTimeoutMs", POLL_TIMEOUT_MS)
    for name, value in options.items():
        read = read.option(name, value)
    return read


def transactional_producer(cluster, transactional_id: str):
    from confluent_kafka import Producer

    # A transaction the test leaves open must outlast a slow Spark job on a busy machine.
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id,
                         "linger.ms": 5, "transaction.timeout.ms": 300000})
    producer.init_transactions(30)
    return producer


def in_transaction(producer, topic: str, values: list[bytes], commit: bool | None) -> None:
    """Write values round-robin over partitions 0 and 1 in one transaction, then commit, abort or (None) leave it."""
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 2)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def end_offsets(cluster, topic: str, partitions: int = 2) -> dict[str, dict[int, int]]:
    """The high watermark and the last stable offset of each partition."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    found = {}
    for name, level in (("high_watermark", IsolationLevel.READ_UNCOMMITTED),
                        ("last_stable", IsolationLevel.READ_COMMITTED)):
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                     isolation_level=level, request_timeout=10)
        found[name] = {tp.partition: future.result().offset for tp, future in futures.items()}
    return found


def wait_stable(cluster, topic: str, partitions: int = 2, timeout_s: float = 15) -> dict[int, int]:
    """Wait until no transaction is open in the topic (its markers are written after EndTxn is answered)."""
    deadline = time.monotonic() + timeout_s
    while True:
        offsets = end_offsets(cluster, topic, partitions)
        if offsets["last_stable"] == offsets["high_watermark"]:
            return offsets["high_watermark"]
        assert time.monotonic() < deadline, f"a transaction is still open in {topic}: {offsets}"
        time.sleep(0.1)


def test_read_committed_reads_the_committed_rows_and_read_uncommitted_every_data_row(spark, kraftwerk):
    from spark_jobs.options import source_options
    from spark_jobs.source import KraftwerkStreamReader

    topic = "txn-read"
    kraftwerk.create_topic(topic, partitions=2, replication_factor=3)
    assert kraftwerk.wait_in_sync(topic)
    writer = transactional_producer(kraftwerk, "spark-test-writer")
    committed = [b"committed-%d" % i for i in range(10)]
    aborted = [b"aborted-%d" % i for i in range(6)]
    plain = [b"plain-%d" % i for i in range(4)]
    late = [b"committed-late-%d" % i for i in range(4)]
    in_transaction(writer, topic, committed, commit=True)
    in_transaction(writer, topic, aborted, commit=False)
    produce(kraftwerk.bootstrap_servers, topic, [(i % 2, None, value, None, None) for i, value in enumerate(plain)])
    in_transaction(writer, topic, late, commit=True)  # each partition now ends with a COMMIT marker
    writer.close()
    stable = wait_stable(kraftwerk, topic)
    # A transaction left open: read_committed ends before it, read_uncommitted reads it.
    holder = transactional_producer(kraftwerk, "spark-test-holder")
    still_open = [b"open-%d" % i for i in range(4)]
    in_transaction(holder, topic, still_open, commit=None)
    try:
        offsets = end_offsets(kraftwerk, topic)
        assert offsets["last_stable"] == stable and offsets["high_watermark"] == {0: stable[0] + 2, 1: stable[1] + 2}

        rows = reader(spark, kraftwerk, "read_committed", subscribe=topic).load().collect()
        assert sorted(bytes(r.value) for r in rows) == sorted(committed + plain + late)

        everything = reader(spark, kraftwerk, "read_uncommitted", subscribe=topic).load().collect()
        assert sorted(bytes(r.value) for r in everything) == sorted(committed + aborted + plain + late + still_open)
        # Three markers in each partition: no row stands for one.
        assert len({(r.partition, r.offset) for r in everything}) == len(everything)
        assert sum(offsets["high_watermark"].values()) - len(everything) == 6

        # Without the option, as Spark's own source (Java's default), read_uncommitted.
        default = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
            .option("subscribe", topic).load()
        assert default.count() == len(everything)

        def latest(isolation: str) -> dict:
            stream = KraftwerkStreamReader(source_options({"kafka.bootstrap.servers": kraftwerk.bootstrap_servers,
                                                           "subscribe": topic, "kafka.isolation.level": isolation},
                                                          batch=False))
            try:
                return stream.reportLatestOffset()
            finally:
                stream.stop()
        assert latest("read_committed") == {topic: {str(p): o for p, o in offsets["last_stable"].items()}}
        assert latest("READ_UNCOMMITTED") == {topic: {str(p): o for p, o in offsets["high_watermark"].items()}}
    finally:
        holder.abort_transaction(30)
        holder.close()
