"""Streaming: count the records of one topic per key per time window, into another topic.

    python -m spark_jobs.windowed_counts clicks click-counts --checkpoint /tmp/counts [--window '1 minute']
    spark-submit spark_jobs/windowed_counts.py clicks click-counts --checkpoint /tmp/counts --available-now

Windows follow each record's Kafka timestamp. A window's counts are written once, when the
watermark (the latest timestamp seen, less --delay) passes its end: one record per key,
keyed "<key>@<window start>", with a JSON value. The checkpoint holds the offsets read and
the counts of open windows, so a restarted job goes on from there and counts nothing twice.
"""
from __future__ import annotations

from spark_jobs.jobs import parser, session


def start(spark, bootstrap_servers: str, source: str, target: str, checkpoint: str, window: str = "1 minute",
          delay: str = "1 minute", available_now: bool = False, starting_offsets: str = "earliest"):
    """Start the query; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    records = spark.readStream.format("kraftwerk").option("kafka.bootstrap.servers", bootstrap_servers) \
        .option("subscribe", source).option("startingOffsets", starting_offsets).load()
    counts = records.withWatermark("timestamp", delay) \
        .groupBy(F.window("timestamp", window), F.col("key").cast("string").alias("key")).count()
    out = counts.select(
        F.concat_ws("@", F.coalesce("key", F.lit("")), F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'"))
        .alias("key"),
        F.to_json(F.struct(F.col("key"), F.col("window.start").alias("window_start"),
                           F.col("window.end").alias("window_end"), F.col("count"))).alias("value"))
    writer = out.writeStream.format("kraftwerk").outputMode("append") \
        .option("kafka.bootstrap.servers", bootstrap_servers).option("topic", target) \
        .option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start()


def main(argv=None) -> None:
    arguments = parser(__doc__.splitlines()[0])
    arguments.add_argument("source")
    arguments.add_argument("target")
    arguments.add_argument("--checkpoint", required=True, help="checkpoint directory (offsets and counts)")
    arguments.add_argument("--window", default="1 minute", help="window length, as Spark reads it")
    arguments.add_argument("--delay", default="1 minute", help="how late a record may arrive and still count")
    arguments.add_argument("--available-now", action="store_true",
                           help="count what the topic holds now, then stop (default: run until interrupted)")
    args = arguments.parse_args(argv)
    spark = session("kraftwerk-windowed-counts", args.master)
    try:
        query = start(spark, args.bootstrap_servers, args.source, args.target, args.checkpoint, args.window,
                      args.delay, args.available_now)
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
