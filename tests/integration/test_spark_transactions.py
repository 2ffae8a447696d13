"""The kraftwerk Spark data source and transactions: reads at either isolation level, transactional writes.

One local[2] SparkSession and one cluster serve the module; every test uses its own topics.
"""
from __future__ import annotations

import time
import uuid

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


def read_values(cluster, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value a plain consumer at `isolation` reads, up to the end of each partition."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=0.5):
                if message.error() is None:
                    values.append(message.value())
                    at_end.discard(message.partition())
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise KafkaException(message.error())
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"{topic} was not read to its end"
    return values


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


def write(df, cluster, topic: str | None, prefix: str):
    writer = df.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("transactionalIdPrefix", prefix)
    if topic:
        writer = writer.option("topic", topic)
    writer.save()


def test_a_transactional_write_commits_each_task_whole_and_a_failed_task_leaves_nothing_committed(spark, kraftwerk):
    for topic in ("txn-written", "txn-cut-upstream", "txn-cut-in-writer"):
        kraftwerk.create_topic(topic, partitions=2, replication_factor=3)

    rows = spark.range(0, 2000, 1, 2).selectExpr("cast(id as string) as key", "concat('row-', id) as value")
    write(rows, kraftwerk, "txn-written", "spark-test-ok")
    wait_stable(kraftwerk, "txn-written")
    back = reader(spark, kraftwerk, "read_committed", subscribe="txn-written").load() \
        .selectExpr("cast(value as string) as value").collect()
    assert sorted(r.value for r in back) == sorted(f"row-{i}" for i in range(2000))

    # One task, its rows in Arrow batches of 1,000: most of them are written before row 25,000 fails.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        failing = spark.range(0, 30000, 1, 1).selectExpr(
            "CASE WHEN id = 25000 THEN raise_error('row 25000 is bad') ELSE concat('row-', id) END as value")
        with pytest.raises(Exception, match="row 25000 is bad"):
            write(failing, kraftwerk, "txn-cut-upstream", "spark-test-upstream")
        # The writer itself fails midway: a row without a topic.
        no_topic = spark.range(0, 30000, 1, 1).selectExpr(
            "CASE WHEN id = 25000 THEN NULL ELSE 'txn-cut-in-writer' END as topic", "concat('row-', id) as value")
        with pytest.raises(Exception, match="Null topic present in the data"):
            write(no_topic, kraftwerk, None, "spark-test-writer-fails")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    for topic in ("txn-cut-upstream", "txn-cut-in-writer"):
        wait_stable(kraftwerk, topic)  # aborted, not left open until its timeout
        # Most of the 25,000 rows before the failure reach the log before the abort; how many of the last
        # batches are still in the producer's queue then (and purged) depends on the machine's load.
        assert len(read_values(kraftwerk, topic, "read_uncommitted")) >= 10000, "the task failed before writing"
        assert read_values(kraftwerk, topic, "read_committed") == []
        assert reader(spark, kraftwerk, "read_committed", subscribe=topic).load().count() == 0
