"""The example Spark jobs against a 3-node cluster: partition report, windowed counts, repartition."""
from __future__ import annotations

import datetime
import json

from kafka.partitioner.default import murmur2

from spark_jobs.partition_report import report
from spark_jobs.repartition import repartition
from spark_jobs.windowed_counts import start as start_windowed_counts
from tests.integration.spark_support import leaders_of, module_fixtures, produce

BASE_MS = 1_699_999_980_000  # a whole minute


spark, kraftwerk = module_fixtures("kraftwerk-job-tests")


def utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).replace(tzinfo=None)


def test_partition_report_counts_each_partition_and_names_its_leader(spark, kraftwerk):
    kraftwerk.create_topic("reported", partitions=3, replication_factor=3)
    produce(kraftwerk.bootstrap_servers, "reported",
            [(p, b"k", b"v" * (p + 1), None, BASE_MS + i) for p in range(2) for i in range(10 * (p + 1))])

    rows = report(spark, kraftwerk.bootstrap_servers, "reported")

    led_by = leaders_of(kraftwerk, "reported")
    assert rows == [
        {"partition": 0, "records": 10, "bytes": 20, "first_offset": 0, "last_offset": 9,
         "first_time": utc(BASE_MS), "last_time": utc(BASE_MS + 9), "leader": led_by[0]},
        {"partition": 1, "records": 20, "bytes": 60, "first_offset": 0, "last_offset": 19,
         "first_time": utc(BASE_MS), "last_time": utc(BASE_MS + 19), "leader": led_by[1]},
    ]


def written_counts(spark, cluster, topic: str) -> list[tuple]:
    """Every (key, window start, count) record in the counts topic."""
    rows = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("subscribe", topic).load().selectExpr("cast(value as string) as value").collect()
    return sorted((v["key"], v["window_start"][11:16], v["count"]) for v in (json.loads(r.value) for r in rows))


def clicks(*key_and_seconds) -> list[tuple]:
    return [(None, key.encode(), b"click", None, BASE_MS + seconds * 1000) for key, seconds in key_and_seconds]


def test_windowed_counts_survive_a_restart_without_counting_twice(spark, kraftwerk, tmp_path):
    kraftwerk.create_topic("clicks", partitions=3, replication_factor=3)
    kraftwerk.create_topic("click-counts", partitions=3, replication_factor=3)
    checkpoint = str(tmp_path / "checkpoint")

    def run_once():
        start_windowed_counts(spark, kraftwerk.bootstrap_servers, "clicks", "click-counts", checkpoint,
                              delay="0 seconds", available_now=True).awaitTermination()

    produce(kraftwerk.bootstrap_servers, "clicks", clicks(("a", 1), ("a", 2), ("b", 3), ("a", 61), ("b", 70)))
    run_once()  # the window at 22:13 closes (the watermark reached 22:14:10); 22:14 stays open in the checkpoint
    assert written_counts(spark, kraftwerk, "click-counts") == [("a", "22:13", 2), ("b", "22:13", 1)]

    produce(kraftwerk.bootstrap_servers, "clicks", clicks(("a", 90), ("b", 95), ("c", 100), ("a", 130)))
    run_once()
    assert written_counts(spark, kraftwerk, "click-counts") == [
        ("a", "22:13", 2), ("a", "22:14", 2), ("b", "22:13", 1), ("b", "22:14", 2), ("c", "22:14", 1)]


def test_repartition_copies_every_record_to_the_partition_of_its_key(spark, kraftwerk):
    kraftwerk.create_topic("narrow", partitions=2, replication_factor=3)
    records = [(i % 2, f"user-{i % 37}".encode(), f"event-{i}".encode(), [("seq", str(i).encode())], None)
               for i in range(2000)]
    produce(kraftwerk.bootstrap_servers, "narrow", records)

    assert repartition(spark, kraftwerk.bootstrap_servers, "narrow", "wide", 5) == 2000

    copied = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
        .option("subscribe", "wide").option("includeHeaders", "true").load().collect()
    assert sorted((bytes(r.key), bytes(r.value), tuple(tuple(h) for h in r.headers)) for r in copied) == sorted(
        (key, value, tuple(headers)) for _p, key, value, headers, _t in records)
    assert {(bytes(r.key), r.partition) for r in copied} == {
        (key, (murmur2(key) & 0x7FFFFFFF) % 5) for _p, key, _v, _h, _t in records}
