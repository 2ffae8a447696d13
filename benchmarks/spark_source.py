"""Benchmark: rows/s written and read through Spark, beside a plain confluent-kafka consumer's read.

    python -m benchmarks.spark_source [--records 500000]

Starts its own 3-node cluster (free ports, temporary data), writes --records rows with
100-byte values through the kraftwerk sink into a one-partition topic, reads them back in a
single Spark task (every column materialised by the noop sink), reads the same partition
with one confluent-kafka consumer, and prints each rate and Spark's read as a share of the
plain consumer's.
"""
from __future__ import annotations

import argparse
import time

VALUE_BYTES = 100
TOPIC = "spark-bench"
WARM_UP_ROWS = 1000


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def spark_write(spark, bootstrap_servers: str, records: int) -> None:
    rows = spark.range(records).selectExpr(f"cast(lpad(cast(id as string), {VALUE_BYTES}, 'x') as binary) as value")
    rows.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", bootstrap_servers) \
        .option("topic", TOPIC).save()


def spark_read(spark, bootstrap_servers: str) -> None:
    spark.read.format("kraftwerk").option("kafka.bootstrap.servers", bootstrap_servers) \
        .option("subscribe", TOPIC).load().write.format("noop").mode("overwrite").save()


def plain_read(bootstrap_servers: str, records: int) -> None:
    """What one confluent-kafka consumer, tuned as the source's, does for the same partition, touching every value."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_jobs.options import READ_AHEAD

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "spark-bench-plain",
                         "enable.auto.commit": False, **READ_AHEAD})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen = 0
    try:
        while seen < records:
            messages = consumer.consume(20000, timeout=1)
            seen += len([m.value() for m in messages if m.error() is None])
    finally:
        consumer.close()


def main(argv=None) -> None:
    arguments = argparse.ArgumentParser(prog="python -m benchmarks.spark_source", description=__doc__.splitlines()[0])
    arguments.add_argument("--records", type=int, default=500_000)
    args = arguments.parse_args(argv)

    from cluster.launch.cluster import Cluster
    from spark_jobs.jobs import session

    spark = session("kraftwerk-bench")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with Cluster(nodes=3) as cluster:
            cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
            servers = cluster.bootstrap_servers
            spark_write(spark, servers, WARM_UP_ROWS)  # starts the Python workers, as a job's later stages find them
            write_s = timed(lambda: spark_write(spark, servers, args.records))
            spark_read(spark, servers)
            read_s = timed(lambda: spark_read(spark, servers))
            plain_s = timed(lambda: plain_read(servers, args.records + WARM_UP_ROWS))
    finally:
        spark.stop()
    total = args.records + WARM_UP_ROWS
    print(f"{args.records} rows of {VALUE_BYTES}-byte values written ({total} read), 3 nodes, replication factor 3")
    print(f"spark write (local[2], 2 tasks, acks=all): {args.records / write_s:12,.0f} rows/s")
    print(f"spark read (1 task, 1 partition):          {total / read_s:12,.0f} rows/s")
    print(f"confluent-kafka consumer read:             {total / plain_s:12,.0f} rows/s")
    print(f"spark read / plain consumer read:          {plain_s / read_s:12.2f}")


if __name__ == "__main__":
    main()
