"""What the example jobs share: their command line, a session with the kraftwerk source, a topic's reader.

Every job runs as `python -m spark_jobs.NAME ...` (local[2] unless --master says otherwise)
and as `spark-submit [--master ...] spark_jobs/NAME.py ...` (Spark's own choice of master).
"""
from __future__ import annotations

import argparse
import os

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"  # where `kraftwerk up` listens


def parser(description: str) -> argparse.ArgumentParser:
    arguments = argparse.ArgumentParser(description=description)
    arguments.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP,
                           help=f"kafka.bootstrap.servers (default {DEFAULT_BOOTSTRAP}, `kraftwerk up`)")
    arguments.add_argument("--master", default=None,
                           help="Spark master URL (default: spark-submit's, else local[2])")
    return arguments


def session(app_name: str, master: str | None = None):
    """The active session (spark-submit's) or a new one, with the kraftwerk source registered."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from spark_jobs import register

    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master:
        builder = builder.master(master)
    elif SparkContext._active_spark_context is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master("local[2]")  # not under spark-submit, which sets the gateway and the master
    spark = builder.getOrCreate()
    register(spark)
    return spark


def read_topic(spark, bootstrap_servers: str, topic: str, **options):
    reader = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", bootstrap_servers) \
        .option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()
