"""What open transactions cost an idle cluster: `python -m benchmarks.open_transactions`.

A 3-node cluster; --transactions transactional ids each open a transaction (InitProducerId,
AddPartitionsToTxn, one transactional batch) on a topic of 12 partitions, RF 3, with a
transaction.timeout.ms long enough that none ends during the measurement. Then each node's CPU
(percent of one core) and RSS over --seconds of nothing else, against the same cluster before the
transactions were opened. Requests are sent with kafka.protocol over plain sockets, one connection
per node, so that thousands of producers cost this process little.
"""
from __future__ import annotations

import argparse
import socket
import statistics
import time
import uuid

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProduceRequest, ProduceResponse,
)

from cluster.bench.replication import idle_cpu_and_rss
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch
from cluster.launch.cluster import Cluster
from tests.integration.wire import exchange

PARTITIONS = 12
TIMEOUT_MS = 900_000


class Connections:
    """One socket per node, found through Metadata."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sockets: dict[int, socket.socket] = {}
        first = socket.create_connection((host, int(port)), timeout=30)
        metadata = exchange(first, MetadataRequest[1](topics=[]), MetadataResponse, 1)
        for broker in metadata.brokers:
            self.sockets[broker.node_id] = socket.create_connection((broker.host, broker.port), timeout=30)
        first.close()

    def ask(self, node_id: int, request, response_class, version: int):
        return exchange(self.sockets[node_id], request, response_class, version)

    def leaders(self, topic: str) -> dict[int, int]:
        any_node = next(iter(self.sockets))
        metadata = self.ask(any_node, MetadataRequest[1](topics=[MetadataRequest[1].MetadataRequestTopic(name=topic)]),
                            MetadataResponse, 1)
        return {p.partition_index: p.leader_id for p in metadata.topics[0].partitions}

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()


def open_transaction(connections: Connections, topic: str, leaders: dict[int, int], index: int) -> None:
    transactional_id = f"open-{index:05d}"
    any_node = next(iter(connections.sockets))
    found = connections.ask(any_node, FindCoordinatorRequest[1](key=transactional_id, key_type=1),
                            FindCoordinatorResponse, 1)
    assert found.error_code == 0, found
    coordinator = found.node_id
    init = connections.ask(coordinator, InitProducerIdRequest[1](
        transactional_id=transactional_id, transaction_timeout_ms=TIMEOUT_MS), InitProducerIdResponse, 1)
    assert init.error_code == 0, init
    partition = index % PARTITIONS
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    added = connections.ask(coordinator, AddPartitionsToTxnRequest[1](
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=init.producer_id,
        v3_and_below_producer_epoch=init.producer_epoch, v3_and_below_topics=[T(name=topic, partitions=[partition])]),
        AddPartitionsToTxnResponse, 1)
    assert all(p.partition_error_code == 0 for t in added.results_by_topic_v3_and_below for p in t.results_by_partition)
    batch = encode_batch([(None, b"open")], timestamp=int(time.time() * 1000), producer_id=init.producer_id,
                         producer_epoch=init.producer_epoch, base_sequence=0, attributes=ATTR_TRANSACTIONAL)
    P = ProduceRequest.TopicProduceData
    written = connections.ask(leaders[partition], ProduceRequest[3](
        transactional_id=transactional_id, acks=-1, timeout_ms=10_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])]),
        ProduceResponse, 3)
    assert written.responses[0].partition_responses[0].error_code == 0, written


def report(label: str, figures) -> None:
    print(f"{label}:")
    for figure in figures:
        print(f"  node {figure.node_id}: {figure.cpu_percent:5.2f}% of a core, RSS {figure.rss_mb:6.1f} MB")
    print(f"  mean {statistics.mean(f.cpu_percent for f in figures):5.2f}% of a core")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.open_transactions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    with Cluster(nodes=3) as cluster:
        topic = f"open-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        cluster.wait_in_sync(topic, timeout=60)
        report(f"idle before, over {args.seconds:.0f} s", idle_cpu_and_rss(cluster, args.seconds))
        connections = Connections(cluster.bootstrap_servers)
        leaders = connections.leaders(topic)
        started = time.monotonic()
        for index in range(args.transactions):
            open_transaction(connections, topic, leaders, index)
        print(f"{args.transactions} transactions opened in {time.monotonic() - started:.1f} s")
        time.sleep(2)  # (the opening's replication settles)
        report(f"idle with {args.transactions} open transactions, over {args.seconds:.0f} s",
               idle_cpu_and_rss(cluster, args.seconds))
        connections.close()


if __name__ == "__main__":
    main()
