"""Per-partition report of a topic: records, bytes, first and last offset and time, and the leader.

    python -m spark_jobs.partition_report orders [--bootstrap-servers HOST:PORT]
    spark-submit spark_jobs/partition_report.py orders

Each partition is read by its own Spark task from the node that leads it.
"""
from __future__ import annotations

from spark_jobs.jobs import parser, read_topic, session

COLUMNS = ("partition", "records", "bytes", "first_offset", "last_offset", "first_time", "last_time", "leader")


def report(spark, bootstrap_servers: str, topic: str) -> list[dict]:
    """One dict per partition that holds records, in partition order; bytes count keys and values."""
    from pyspark.sql import functions as F

    from spark_jobs.options import source_options
    from spark_jobs.planning import ClusterView

    rows = read_topic(spark, bootstrap_servers, topic).groupBy("partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).alias("bytes"),
        F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
        F.min("timestamp").alias("first_time"), F.max("timestamp").alias("last_time"),
    ).orderBy("partition").collect()
    view = ClusterView(source_options({"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic}, batch=True))
    leaders = view.leaders()
    return [{**row.asDict(), "leader": leaders.get((topic, row.partition), -1)} for row in rows]


def print_report(topic: str, rows: list[dict]) -> None:
    print(f"topic {topic}: {sum(r['records'] for r in rows)} records in {len(rows)} partitions with data")
    print("\t".join(COLUMNS))
    for row in rows:
        print("\t".join(str(row[column]) for column in COLUMNS))


def main(argv=None) -> None:
    arguments = parser(__doc__.splitlines()[0])
    arguments.add_argument("topic")
    args = arguments.parse_args(argv)
    spark = session("kraftwerk-partition-report", args.master)
    try:
        print_report(args.topic, report(spark, args.bootstrap_servers, args.topic))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
