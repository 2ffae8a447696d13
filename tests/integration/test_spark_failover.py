"""Spark jobs through faults: a leader killed during a batch read and during a streaming query
(RF=3), and offsets deleted by retention while a streaming query was down."""
from __future__ import annotations

import threading

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from tests.integration.spark_support import leaders_of, module_fixtures, produce

# Small producer batches, so that a read takes many fetches and a kill lands in the middle of it.
SMALL_BATCHES = {"batch.size": 4096, "linger.ms": 0}


spark, kraftwerk = module_fixtures("kraftwerk-failover-tests", {"log.retention.check.interval.ms": "100"})


def wait_for_first_fetch(cluster, node_id: int, topic: str, partition: int, job: threading.Thread) -> None:
    """Until node_id has served a consumer fetch of the partition (the read has begun there), or the job ended."""
    done = threading.Event()
    while not done.wait(0.02) and job.is_alive():
        served = cluster.client_fetch_stats().get(node_id, {})
        if served.get((topic, partition), {}).get("fetches", 0) > 0:
            done.set()


def values_written(topic: str, count: int) -> list[tuple]:
    return [(i % 6, None, f"{topic}-{i:06d}".encode() + b"." * 80, None, None) for i in range(count)]


def test_batch_read_follows_a_leader_killed_during_the_read(spark, kraftwerk):
    kraftwerk.create_topic("killed-batch", partitions=6, replication_factor=3)
    assert kraftwerk.wait_in_sync("killed-batch")
    records = values_written("killed-batch", 60_000)
    produce(kraftwerk.bootstrap_servers, "killed-batch", records, SMALL_BATCHES)
    victim = leaders_of(kraftwerk, "killed-batch")[0]
    kraftwerk.delay_node(victim, 30)  # its partitions take a while to read, so the kill lands mid-read
    result = {}
    read = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
        .option("subscribe", "killed-batch").option("kafka.max.partition.fetch.bytes", "16384").load() \
        .selectExpr("cast(value as string) as value")
    job = threading.Thread(target=lambda: result.setdefault("rows", read.collect()))
    job.start()
    wait_for_first_fetch(kraftwerk, victim, "killed-batch", 0, job)
    assert job.is_alive(), "the read ended before the leader could be killed"
    kraftwerk.kill_node(victim)
    job.join()
    kraftwerk.restart_node(victim)

    values = [row.value for row in result["rows"]]
    assert len(values) == len(records)
    assert set(values) == {value.decode() for _p, _k, value, _h, _t in records}


class FirstProgress:
    """A streaming query listener that sets an event once a micro-batch has read rows."""

    def __init__(self):
        from pyspark.sql.streaming import StreamingQueryListener

        self.event = threading.Event()
        event = self.event

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, started):
                pass

            def onQueryProgress(self, progress):
                if progress.progress.numInputRows > 0:
                    event.set()

            def onQueryIdle(self, idle):
                pass

            def onQueryTerminated(self, terminated):
                event.set()

        self.listener = Listener()


def test_streaming_query_follows_a_leader_killed_while_it_runs(spark, kraftwerk, tmp_path):
    kraftwerk.create_topic("killed-stream", partitions=6, replication_factor=3)
    assert kraftwerk.wait_in_sync("killed-stream")
    before = values_written("killed-stream", 6000)
    produce(kraftwerk.bootstrap_servers, "killed-stream", before, SMALL_BATCHES)
    progress = FirstProgress()
    spark.streams.addListener(progress.listener)
    query = spark.readStream.format("kraftwerk").option("kafka.bootstrap.servers", kraftwerk.bootstrap_servers) \
        .option("subscribe", "killed-stream").option("startingOffsets", "earliest") \
        .option("maxOffsetsPerTrigger", "1000").load().selectExpr("cast(value as string) as value") \
        .writeStream.format("parquet").option("path", str(tmp_path / "out")) \
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="200 milliseconds").start()
    try:
        progress.event.wait()
        kraftwerk.kill_node(leaders_of(kraftwerk, "killed-stream")[0])
        after = [(p, k, v.replace(b"killed-stream-", b"after-kill-"), h, t)
                 for p, k, v, h, t in values_written("killed-stream", 600)]
        produce(kraftwerk.bootstrap_servers, "killed-stream", after)
        query.processAllAvailable()
    finally:
        query.stop()
        spark.streams.removeListener(progress.listener)
    assert query.exception() is None
    for node_id, node in kraftwerk.nodes.items():
        if not node.alive():
            kraftwerk.restart_node(node_id)

    values = [row.value for row in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted(value.decode() for _p, _k, value, _h, _t in before + after)


def run_available_now(spark, cluster, topic, tmp_path, **options):
    stream = spark.readStream.format("kraftwerk").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("subscribe", topic).option("startingOffsets", "earliest")
    for name, value in options.items():
        stream = stream.option(name, value)
    query = stream.load().select("offset").writeStream.format("parquet").option("path", str(tmp_path / "out")) \
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception:  # the query's own error, read below
        pass
    return query.exception()


def delete_by_retention(cluster, topic: str) -> int:
    """Let retention delete every closed segment of partition 0; returns its new log start offset."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1",
                                                                                       "segment.bytes": "2048"})])
    finally:
        admin.close()
    start = threading.Event()
    found = {}
    while not start.wait(0.05):
        states = [p for node in cluster.replica_states().values() for p in node["partitions"]
                  if p["topic"] == topic and p["leader"] == node["node_id"]]
        if states and states[0]["log_start_offset"] > 50:
            found["log_start"] = states[0]["log_start_offset"]
            start.set()
    return found["log_start"]


def test_offsets_deleted_while_the_query_was_down_fail_it_or_are_skipped(spark, kraftwerk, tmp_path):
    kraftwerk.create_topic("retained", partitions=1, replication_factor=3, config={"segment.bytes": "2048"})
    produce(kraftwerk.bootstrap_servers, "retained", [(0, None, b"x" * 100, None, None) for _ in range(50)],
            SMALL_BATCHES)
    assert run_available_now(spark, kraftwerk, "retained", tmp_path) is None
    produce(kraftwerk.bootstrap_servers, "retained", [(0, None, b"y" * 100, None, None) for _ in range(100)],
            {"batch.size": 300, "linger.ms": 0})
    log_start = delete_by_retention(kraftwerk, "retained")

    error = run_available_now(spark, kraftwerk, "retained", tmp_path)
    assert error is not None
    assert f"Offsets 50-{log_start - 1} of retained-0 are no longer in the topic" in str(error)
    assert "failOnDataLoss" in str(error)

    assert run_available_now(spark, kraftwerk, "retained", tmp_path, failOnDataLoss="false") is None
    offsets = sorted(row.offset for row in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == list(range(50)) + list(range(log_start, 150))
