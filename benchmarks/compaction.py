"""Log compaction: how fast a cleaning goes, and what one costs concurrent produce latency:
`python -m benchmarks.compaction`.

1. Cleaning throughput: a compacted log of --size-mb written straight to disk (--keys distinct keys,
   200-byte values, in 1 MB segments), cleaned in this process on one core: MB of dirty log per
   second, and the bytes before and after.
2. Produce latency while cleanings run: a 1-node cluster whose compacted topic has just been sent
   --size-mb of dirty data; acks=1 single-message writes to another topic, p50/p99, once with
   log.cleaner.enable=false and once with the cleaner on (the cleanings that finished meanwhile are
   counted from the node's log).
3. `__consumer_offsets` under commits: one group commits --commits times (an hour of auto-commits
   every 5 s by 10 members, say, is 7,200), over 10 partitions, with offsets.topic.segment.bytes
   of 64 KB: the size of the group's `__consumer_offsets` partition at the end, against what the
   commits wrote.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cluster.bench.stats import spread
from cluster.formats.cleaned_segments import cleaning_job
from cluster.formats.log_cleaner import clean
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import encode_records
from cluster.launch.cluster import Cluster

VALUE = b"v" * 200
RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 1 << 20


def dirty_log(directory: Path, megabytes: int, keys: int) -> PartitionLog:
    log = PartitionLog(directory, config=LogConfig(segment_bytes=SEGMENT_BYTES, cleanup_policy="compact"))
    now = int(time.time() * 1000)
    written, sequence = 0, 0
    while written < megabytes << 20:
        records = [(now, b"key-%08d" % ((sequence + i) % keys), VALUE, ()) for i in range(RECORDS_PER_BATCH)]
        batch = encode_records(records)
        log.append(batch, leader_epoch=0)
        written += len(batch)
        sequence += RECORDS_PER_BATCH
    log.roll()
    log.append(encode_records([(now, b"tail", VALUE, ())]), leader_epoch=0)
    return log


def cleaning_throughput(megabytes: int, keys: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        log = dirty_log(Path(directory) / "compacted-0", megabytes, keys)
        job = cleaning_job(log, 0, 0, segment_bytes=SEGMENT_BYTES, index_interval_bytes=4096,
                           delete_retention_ms=86_400_000, producers={}, max_map_keys=10_000_000,
                           io_bytes_per_s=float("inf"))
        started, cpu_started = time.monotonic(), time.process_time()
        result = clean(job)
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
        log.close()
    mb = result.bytes_read / (1 << 20)
    print(f"cleaning: {mb:.1f} MB of dirty log ({result.records_read:,} records, {keys:,} keys) in {elapsed:.2f} s "
          f"({cpu:.2f} s CPU): {mb / elapsed:.1f} MB/s; {result.bytes_written / (1 << 20):.2f} MB kept "
          f"({result.records_kept:,} records)")


def produce_latency(megabytes: int, keys: int, rounds: int) -> None:
    for enabled in ("false", "true"):
        with tempfile.TemporaryDirectory() as directory:
            with Cluster(nodes=1, data_dir=Path(directory) / "kraftwerk", node_config={
                    "log.cleaner.enable": enabled, "log.cleaner.backoff.ms": "100"}) as cluster:
                fill_compacted(cluster, megabytes, keys)
                started = time.time()
                figures = timed_writes(cluster, rounds)
                ended = time.time()
                cleanings = cleanings_between(cluster, started, ended)
        label = f"while {cleanings} cleanings ran" if enabled == "true" else "with the cleaner off"
        print(f"acks=1 produce {label}: p50 {figures['p50']:.3f} ms, p99 {figures['p99']:.3f} ms ({rounds} writes)")


def fill_compacted(cluster, megabytes: int, keys: int) -> None:
    from confluent_kafka import Producer

    cluster.create_topic("compacted", config={"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                                              "min.cleanable.dirty.ratio": "0.01"})
    cluster.create_topic("timed")
    writer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20, "batch.size": 1 << 20})
    for sequence in range((megabytes << 20) // len(VALUE)):
        while True:
            try:
                writer.produce("compacted", key=b"key-%08d" % (sequence % keys), value=VALUE)
                break
            except BufferError:
                writer.poll(0.05)
    writer.flush(120)


def timed_writes(cluster, rounds: int) -> dict[str, float]:
    from confluent_kafka import Producer

    timed = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1", "linger.ms": 0})
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        timed.produce("timed", b"x")
        timed.flush(10)
        samples.append((time.perf_counter() - started) * 1000)
    return spread(samples)


def cleanings_between(cluster, started: float, ended: float) -> int:
    """Cleanings the node logged as finished in the window (each is logged when it swaps in)."""
    count = 0
    for line in (cluster.data_dir / "logs" / "node-1.log").read_text().splitlines():
        if "node.log_cleaner: cleaned compacted-0" in line:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
            count += started - 1 <= stamp <= ended + 1
    return count


def consumer_offsets_size(commits: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    with tempfile.TemporaryDirectory() as directory:
        with Cluster(nodes=1, data_dir=Path(directory) / "kraftwerk", node_config={
                "log.cleaner.backoff.ms": "200", "offsets.topic.segment.bytes": str(64 << 10),
                "offsets.topic.num.partitions": "1"}) as cluster:
            cluster.create_topic("read", partitions=10)
            consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "committer",
                                 "enable.auto.commit": False})
            for commit in range(commits):
                consumer.commit(offsets=[TopicPartition("read", commit % 10, commit)], asynchronous=False)
            consumer.close()
            time.sleep(2)  # a last cleaning
            directory = cluster.nodes[1].data_dir / "__consumer_offsets-0"
            size = sum(p.stat().st_size for p in directory.glob("*.log"))
            written = sum(1 for line in (cluster.data_dir / "logs" / "node-1.log").read_text().splitlines()
                          if "cleaned __consumer_offsets-0" in line)
    print(f"__consumer_offsets after {commits:,} commits of 10 partitions: {size / 1024:.0f} KB on disk, "
          f"{written} cleanings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1000, help="timed writes per latency figure")
    parser.add_argument("--commits", type=int, default=7200, help="offset commits for the __consumer_offsets figure")
    args = parser.parse_args()
    cleaning_throughput(args.size_mb, args.keys)
    produce_latency(args.size_mb, args.keys, args.rounds)
    consumer_offsets_size(args.commits)


if __name__ == "__main__":
    main()
