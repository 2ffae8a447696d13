"""The kraftwerk Spark data source against a 3-node cluster: batch read and write, streaming, bad options.

One local[2] SparkSession and one cluster serve the whole module; every test uses its own topics.
"""
from __future__ import annotations

import datetime
import json

import pytest

from tests.integration.spark_support import assert_read_from_leaders, leaders_of, module_fixtures, produce

# Java's Utils.murmur2 of these keys, as Kafka's UtilsTest pins them: where a Java producer puts each key.
JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
BASE_TIME_MS = 1_700_000_000_000

spark, kraftwerk = module_fixtures("kraftwerk-source-tests")


def reader(spark, cluster, **options):
    read = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for name, value in options.items():
        read = read.option(name, value)
    return read


def rows_of(df) -> set[tuple]:
    return {tuple(row) for row in df.collect()}


def sample_records(count: int):
    """Records for 6 partitions: keys, values, headers on every third, create times one second apart."""
    records = []
    for i in range(count):
        headers = [("n", str(i).encode()), ("kind", b"third")] if i % 3 == 0 else None
        records.append((i % 6, f"key-{i}".encode(), f"value-{i}".encode(), headers, BASE_TIME_MS + i * 1000))
    return records


def expected_rows(topic: str, records) -> set[tuple]:
    """Spark's Kafka columns for records written one by one to each partition in order."""
    next_offset = {}
    rows = set()
    for partition, key, value, headers, timestamp in records:
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        moment = datetime.datetime.fromtimestamp(timestamp / 1000, datetime.timezone.utc).replace(tzinfo=None)
        header_rows = tuple((k, v) for k, v in headers) if headers else None
        rows.add((key, value, topic, partition, offset, moment, 0, header_rows))
    return rows


def normalized(rows) -> set[tuple]:
    return {(*row[:7], tuple(tuple(h) for h in row[7]) if row[7] else None) for row in rows}


def test_batch_read_returns_every_record_once_each_partition_from_its_leader(spark, kraftwerk):
    kraftwerk.create_topic("spread", partitions=6, replication_factor=3)
    assert kraftwerk.wait_in_sync("spread")
    records = sample_records(600)
    produce(kraftwerk.bootstrap_servers, "spread", records)
    leaders = leaders_of(kraftwerk, "spread")
    assert sorted(set(leaders.values())) == [1, 2, 3]

    rows = reader(spark, kraftwerk, subscribe="spread", includeHeaders="true").load().collect()

    assert len(rows) == 600
    assert normalized(tuple(row) for row in rows) == expected_rows("spread", records)
    assert_read_from_leaders(kraftwerk, "spread", leaders)


def test_columns_and_types_are_those_of_sparks_kafka_source(spark, kraftwerk):
    df = reader(spark, kraftwerk, subscribe="spread").load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int")]
    with_headers = reader(spark, kraftwerk, subscribe="spread", includeHeaders="true").load()
    assert with_headers.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"


def test_log_append_time_topics_report_timestamp_type_1_with_the_brokers_time(spark, kraftwerk):
    kraftwerk.create_topic("appended", partitions=1, replication_factor=3,
                           config={"message.timestamp.type": "LogAppendTime"})
    produce(kraftwerk.bootstrap_servers, "appended", [(0, None, b"v", None, BASE_TIME_MS)])
    rows = reader(spark, kraftwerk, subscribe="appended").load().select("timestamp", "timestampType").collect()
    assert [r.timestampType for r in rows] == [1]
    assert rows[0].timestamp > datetime.datetime(2025, 1, 1)  # the broker's clock, not the producer's 2023 time


def test_offset_ranges_timestamps_and_min_partitions(spark, kraftwerk):
    starting = json.dumps({"spread": {"0": 10, "1": -2, "2": 0, "3": 0, "4": 0, "5": 99}})
    ending = json.dumps({"spread": {"0": 20, "1": 5, "2": -1, "3": 0, "4": 0, "5": 100}})
    df = reader(spark, kraftwerk, subscribe="spread", startingOffsets=starting, endingOffsets=ending).load()
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == ([(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
                   + [(2, o) for o in range(100)] + [(5, 99)])

    # The record at offset o of partition 0 was created at BASE + 6*o seconds: from BASE+300 s on, offsets 50-99.
    by_time = reader(spark, kraftwerk, assign=json.dumps({"spread": [0]}),
                     startingTimestamp=str(BASE_TIME_MS + 300_000)).load()
    assert [r.offset for r in by_time.select("offset").orderBy("offset").collect()] == list(range(50, 100))
    with pytest.raises(Exception, match="No offset matched the timestamp of option 'startingTimestamp' in spread-0"):
        reader(spark, kraftwerk, assign=json.dumps({"spread": [0]}),
               startingTimestamp=str(BASE_TIME_MS + 10_000_000)).load().collect()

    split = reader(spark, kraftwerk, subscribe="spread", minPartitions="24").load()
    assert split.rdd.getNumPartitions() == 24
    assert split.count() == 600 and split.select("partition", "offset").distinct().count() == 600


def test_write_then_read_round_trips_100000_rows_with_keys_where_java_puts_them(spark, kraftwerk):
    kraftwerk.create_topic("round-trip", partitions=6, replication_factor=3)
    source = spark.range(100_000).selectExpr("cast(id as string) as key", "concat('value-', id) as value")

    source.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
        .option("topic", "round-trip").save()

    back = reader(spark, kraftwerk, subscribe="round-trip").load() \
        .selectExpr("cast(key as string) as key", "cast(value as string) as value", "partition", "offset")
    rows = back.collect()
    assert len(rows) == 100_000
    assert {(r.key, r.value) for r in rows} == {(str(i), f"value-{i}") for i in range(100_000)}
    per_partition = {}
    for r in rows:
        per_partition.setdefault(r.partition, []).append(r.offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_partition.values())

    keys = spark.createDataFrame([(key, b"java") for key in JAVA_MURMUR2], "key binary, value binary")
    keys.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
        .option("topic", "round-trip").save()
    placed = reader(spark, kraftwerk, subscribe="round-trip").load().where("value = cast('java' as binary)")
    assert {(bytes(r.key), r.partition) for r in placed.collect()} == {
        (key, (h & 0x7FFFFFFF) % 6) for key, h in JAVA_MURMUR2.items()}


def test_write_takes_topic_partition_and_headers_from_columns(spark, kraftwerk):
    kraftwerk.create_topic("routed-a", partitions=3, replication_factor=3)
    kraftwerk.create_topic("routed-b", partitions=3, replication_factor=3)
    rows = [("routed-a", 2, "k1", "v1", [("h", b"1")]), ("routed-b", 0, None, "v2", None),
            ("routed-b", 1, "k3", "v3", [("a", b"x"), ("b", None)])]
    df = spark.createDataFrame(rows, "topic string, partition int, key string, value string, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers).save()

    back = reader(spark, kraftwerk, subscribePattern="routed-.*", includeHeaders="true").load() \
        .selectExpr("topic", "partition", "offset", "cast(key as string)", "cast(value as string)", "headers")
    assert {(r[0], r[1], r[2], r[3], r[4], tuple(tuple(h) for h in r[5]) if r[5] else None)
            for r in back.collect()} == {
        ("routed-a", 2, 0, "k1", "v1", (("h", b"1"),)), ("routed-b", 0, 0, None, "v2", None),
        ("routed-b", 1, 0, "k3", "v3", (("a", b"x"), ("b", None)))}


def test_failed_send_fails_the_write_with_the_brokers_error(spark, kraftwerk):
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    with pytest.raises(Exception, match="routed-a-7.*(Unknown partition|UNKNOWN_PARTITION)"):
        df.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
            .option("topic", "routed-a").option("kafka.message.timeout.ms", "5000").save()


def test_a_refused_record_fails_the_write_with_the_brokers_error(spark, kraftwerk):
    leader = leaders_of(kraftwerk, "routed-a")[0]
    kraftwerk.inject_error(leader, "Produce", "TOPIC_AUTHORIZATION_FAILED", count=1)
    df = spark.createDataFrame([("refused", 0)], "value string, partition int")
    with pytest.raises(Exception, match="routed-a-0: Broker: Topic authorization failed"):
        df.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
            .option("topic", "routed-a").save()
    kraftwerk.heal_node(leader)


def test_a_write_to_an_unreachable_bootstrap_fails_at_planning(spark):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="No answer from kafka.bootstrap.servers=127.0.0.1:1 within "
                                        "kafka.request.timeout.ms=2000"):
        df.write.format("kraftwerk").mode("append").option("kafka.bootstrap.servers", "127.0.0.1:1") \
            .option("topic", "anywhere").option("kafka.request.timeout.ms", "2000").save()


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "spread", "assign": '{"spread":[0]}'}, "Exactly one of the options 'assign', 'subscribe'"),
    ({}, "Exactly one of the options"),
    ({"subscribe": "spread", "startingOffsets": '{"spread": {"0": "x"}}'}, "Option 'startingOffsets' expects JSON"),
    ({"subscribe": "spread", "startingOffsets": "{not json"}, "Option 'startingOffsets' expects JSON"),
    ({"subscribe": "spread", "endingOffsets": "earliest"}, "'endingOffsets' cannot be earliest"),
    ({"subscribe": "spread", "failOnDataLoss": "maybe"}, "Option 'failondataloss' must be true or false"),
    ({"subscribe": "spread", "kafka.auto.offset.reset": "latest"}, "Kafka option 'auto.offset.reset'"),
    ({"subscribe": "spread", "startingOfsets": "earliest"}, "Unknown option 'startingofsets'"),
    ({"assign": '{"spread":[0, 6]}'}, "Option 'assign' names partitions that do not exist: spread-6"),
    ({"subscribe": "spread", "startingOffsets": '{"spread": {"0": 0}}'}, "Option 'startingOffsets' must name every"),
])
def test_bad_options_fail_at_planning_naming_the_option(spark, kraftwerk, options, message):
    with pytest.raises(Exception, match=message):
        reader(spark, kraftwerk, **options).load().collect()


def test_unreachable_bootstrap_fails_within_the_request_timeout(spark, kraftwerk):
    read = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", "127.0.0.1:1") \
        .option("subscribe", "spread").option("kafka.request.timeout.ms", "2000")
    with pytest.raises(Exception, match="No answer from kafka.bootstrap.servers=127.0.0.1:1 within "
                                        "kafka.request.timeout.ms=2000"):
        read.load().collect()


def stream_to_parquet(spark, cluster, topic, output, checkpoint, **options):
    """One AvailableNow run of a query copying topic into parquet files; returns its progress reports."""
    stream = spark.readStream.format("kraftwerk").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("subscribe", topic)
    for name, value in options.items():
        stream = stream.option(name, value)
    query = stream.load().selectExpr("cast(value as string) as value", "partition", "offset") \
        .writeStream.format("parquet").option("path", str(output)).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception():
        raise query.exception()
    return query.recentProgress


def test_streaming_available_now_twice_reads_each_record_once_within_max_offsets(spark, kraftwerk, tmp_path):
    kraftwerk.create_topic("stream", partitions=6, replication_factor=3)
    produce(kraftwerk.bootstrap_servers, "stream",
            [(i % 6, None, f"first-{i}".encode(), None, None) for i in range(1200)])

    first = stream_to_parquet(spark, kraftwerk, "stream", tmp_path / "out", tmp_path / "checkpoint",
                              startingOffsets="earliest", maxOffsetsPerTrigger="500")
    # Spark's share per partition: floor(500 * lag / total lag) = 83 of each partition's 200, then 83, then the rest.
    assert [p["numInputRows"] for p in first if p["numInputRows"]] == [498, 498, 204]
    assert json.loads(first[-1]["sources"][0]["endOffset"]) == {"stream": {str(p): 200 for p in range(6)}}

    produce(kraftwerk.bootstrap_servers, "stream",
            [(i % 6, None, f"second-{i}".encode(), None, None) for i in range(300)])
    kraftwerk.create_topic("stream-unrelated", partitions=1)
    second = stream_to_parquet(spark, kraftwerk, "stream", tmp_path / "out", tmp_path / "checkpoint",
                               startingOffsets="earliest", maxOffsetsPerTrigger="500")
    assert [p["numInputRows"] for p in second if p["numInputRows"]] == [300]

    values = [r.value for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted([f"first-{i}" for i in range(1200)] + [f"second-{i}" for i in range(300)])


def test_streaming_picks_up_new_partitions_from_their_start(spark, kraftwerk, tmp_path):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions

    kraftwerk.create_topic("growing", partitions=2, replication_factor=3)
    produce(kraftwerk.bootstrap_servers, "growing", [(i % 2, None, f"a-{i}".encode(), None, None) for i in range(10)])
    stream_to_parquet(spark, kraftwerk, "growing", tmp_path / "out", tmp_path / "checkpoint",
                      startingOffsets="earliest")
    admin = KafkaAdminClient(bootstrap_servers=kraftwerk.bootstrap_servers)
    try:
        admin.create_partitions({"growing": NewPartitions(total_count=4)})
    finally:
        admin.close()
    produce(kraftwerk.bootstrap_servers, "growing", [(i % 4, None, f"b-{i}".encode(), None, None) for i in range(8)])
    stream_to_parquet(spark, kraftwerk, "growing", tmp_path / "out", tmp_path / "checkpoint")

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        [(i % 2, i // 2, f"a-{i}") for i in range(10)]
        + [(i % 4, (5 if i % 4 < 2 else 0) + i // 4, f"b-{i}") for i in range(8)])
