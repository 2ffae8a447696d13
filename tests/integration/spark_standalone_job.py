"""Driver run by spark-submit in the standalone-cluster test: reads a topic through the kraftwerk source
and prints, as one JSON line, which executor process (the JVM's pid) read each Kafka partition.
It opens its session as the example jobs do, so spark-submit's master is the one used."""
from __future__ import annotations

import json
import os
import sys


def executor_pid() -> int:
    """The pid of the executor JVM above this Python worker."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if b"CoarseGrainedExecutorBackend" in cmdline.read():
                return pid
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    return -1


def main(bootstrap_servers: str, topic: str) -> None:
    from spark_jobs.jobs import session

    spark = session("kraftwerk-standalone-test")
    df = spark.read.format("kraftwerk").option("kafka.bootstrap.servers", bootstrap_servers) \
        .option("subscribe", topic).load()
    read_by = df.select("partition", "offset").rdd.mapPartitions(
        lambda rows: [(row.partition, row.offset, executor_pid()) for row in rows]).collect()
    print(json.dumps({"driver_pid": os.getpid(), "rows": read_by}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
