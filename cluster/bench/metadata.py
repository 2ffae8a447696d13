"""Metadata and CreateTopics at scale: `python -m cluster.bench.metadata`.

Builds a cluster of --nodes nodes (9 by default) with --topics topics of 3 partitions and 3
replicas (9,000 replicas by default) and prints:

- how long creating the topics took, once in one CreateTopics request and once (on a second,
  fresh cluster) as one request per topic from a kafka-python admin client in a loop, each
  time until the answer of the last request (which comes once every live node has opened the
  new logs);
- the round trip of a Metadata request for every topic, as raw bytes on one connection
  (kafka-python's codec encodes the request and checks the response outside the timed part):
  percentiles over --requests requests, per Metadata version asked.

Figures, not pass/fail; the machine's other load moves them, so repeat and compare ranges.

Creating topics costs the nodes more than the controller: each node opens a log per new replica
(a directory, partition.metadata, an empty .log and, on the leader, leader-epoch-checkpoint), so
the filesystem's speed at creating files shows in the figure. Metadata answers are kept encoded
per image state (node/apis/metadata.py), so a round trip after a change includes one rebuild.
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import struct
import tempfile
import time

from cluster.bench.stats import spread
from cluster.launch.cluster import Cluster

TOPIC_PARTITIONS = 3
REPLICATION_FACTOR = 3
ADMIN_TIMEOUT_MS = 300_000
READY_TIMEOUT_S = 300  # a loaded machine may take long to open thousands of logs
_SIZE = struct.Struct(">i")


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the node closed the connection")
        got += n
    return bytes(buffer)


def _metadata_request(version: int, correlation_id: int) -> bytes:
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest[version](topics=None, allow_auto_topic_creation=False)
    request.with_header(correlation_id=correlation_id, client_id="bench-metadata")
    return request.encode(header=True, framed=True)


def metadata_latency(cluster: Cluster, requests: int = 200, version: int = 12,
                     node_id: int | None = None) -> dict[str, float]:
    """Milliseconds per Metadata round trip (all topics) to one node: percentiles over requests,
    plus the topic and partition counts of the last answer and the metadata records written
    meanwhile (ISR changes, for one: each makes the next answer a rebuilt one)."""
    from kafka.protocol.metadata import MetadataResponse

    node = cluster.nodes[node_id if node_id is not None else min(cluster.nodes)]
    frames = [_metadata_request(version, correlation_id) for correlation_id in range(requests)]
    samples, answers = [], []
    first_offset = cluster.status()["metadata_offset"]
    with socket.create_connection((cluster.host, node.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for frame in frames:
            started = time.perf_counter()
            sock.sendall(frame)
            (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
            answers.append(_recv_exactly(sock, size))
            samples.append((time.perf_counter() - started) * 1000)
    last = MetadataResponse.decode(answers[-1], version=version, header=True)
    figures = spread(samples)
    figures["topics"] = len(last.topics)
    figures["partitions"] = sum(len(topic.partitions) for topic in last.topics)
    figures["records_meanwhile"] = cluster.status()["metadata_offset"] - first_offset
    return figures


def create_topics_time(cluster: Cluster, count: int, partitions: int = TOPIC_PARTITIONS,
                       replication_factor: int = REPLICATION_FACTOR, one_request: bool = True,
                       prefix: str = "bench") -> float:
    """Seconds to create count topics through kafka-python's admin client, in one CreateTopics
    request or in count requests of one topic each; raises if any creation failed."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topics = [NewTopic(f"{prefix}-{i:05d}", partitions, replication_factor) for i in range(count)]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=ADMIN_TIMEOUT_MS)
    try:
        admin.list_topics()  # connected and bootstrapped before the clock starts
        started = time.perf_counter()
        if one_request:
            admin.create_topics(topics, timeout_ms=ADMIN_TIMEOUT_MS, raise_errors=True)
        else:
            for topic in topics:
                admin.create_topics([topic], timeout_ms=ADMIN_TIMEOUT_MS, raise_errors=True)
        return time.perf_counter() - started
    finally:
        admin.close()


def _print_latency(label: str, figures: dict[str, float]) -> None:
    print(f"  {label}: p50 {figures['p50']:6.2f} ms  p90 {figures['p90']:6.2f} ms  "
          f"p99 {figures['p99']:6.2f} ms  max {figures['max']:6.2f} ms  "
          f"({figures['topics']} topics, {figures['partitions']} partitions, "
          f"{figures['records_meanwhile']} metadata records written meanwhile)")


@contextlib.contextmanager
def bench_cluster(nodes: int, parent_dir: str | None):
    """A cluster in a fresh data directory under parent_dir (the system's temporary directory by
    default), removed afterwards."""
    data_dir = tempfile.mkdtemp(prefix="kraftwerk-bench-", dir=parent_dir)
    try:
        with Cluster(nodes=nodes, data_dir=data_dir, startup_timeout=READY_TIMEOUT_S) as cluster:
            yield cluster
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(nodes: int, topics: int, requests: int, versions: list[int], loop_topics: int,
        parent_dir: str | None = None) -> None:
    replicas = topics * TOPIC_PARTITIONS * REPLICATION_FACTOR
    print(f"{nodes} nodes, {topics} topics x {TOPIC_PARTITIONS} partitions x RF {REPLICATION_FACTOR} "
          f"({replicas} replicas), data in {parent_dir or tempfile.gettempdir()}:")
    with bench_cluster(nodes, parent_dir) as cluster:
        seconds = create_topics_time(cluster, topics, one_request=True, prefix="bulk")
        print(f"  CreateTopics, one request of {topics} topics: {seconds:6.2f} s")
        cluster.wait_ready()
        for version in versions:
            metadata_latency(cluster, requests=5, version=version)  # first answers after a change build caches
            _print_latency(f"Metadata v{version}, all topics", metadata_latency(cluster, requests, version))
    if loop_topics:
        with bench_cluster(nodes, parent_dir) as cluster:
            seconds = create_topics_time(cluster, loop_topics, one_request=False, prefix="loop")
            print(f"  CreateTopics, {loop_topics} requests of one topic: {seconds:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m cluster.bench.metadata", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=9)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--versions", type=int, nargs="+", default=[1, 9, 12])
    parser.add_argument("--loop-topics", type=int, default=None,
                        help="topics created one request each (default: --topics; 0 skips it)")
    parser.add_argument("--data-parent", default=None,
                        help="where the clusters' data directories go (e.g. /dev/shm to leave the disk out)")
    args = parser.parse_args()
    loop_topics = args.topics if args.loop_topics is None else args.loop_topics
    run(args.nodes, args.topics, args.requests, args.versions, loop_topics, args.data_parent)


if __name__ == "__main__":
    main()
