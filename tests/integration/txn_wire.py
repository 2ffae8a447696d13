"""Raw transactional requests for tests: a transaction driven one request at a time (FindCoordinator,
InitProducerId, AddPartitionsToTxn, Produce, EndTxn, WriteTxnMarkers), ListOffsets and Fetch at
read_committed, each sent to the node that must answer it. No client library is in between, so
a test chooses every producer id, epoch, sequence and version, and a transaction stays open for
as long as the test wants (a client's close would abort it)."""
from __future__ import annotations

import socket
import time

from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
)
from kafka.record import MemoryRecords

from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch
from tests.integration.wire import exchange, exchange_once

Address = tuple[str, int]

NOT_LEADER_OR_FOLLOWER = 6
# A leader just elected answers this until it knows its high watermark (KIP-207); clients retry.
OFFSET_NOT_AVAILABLE = 78
COORDINATOR_NOT_AVAILABLE = 15
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_KEY_TYPE = 1
READ_COMMITTED = 1


def bootstrap_address(cluster) -> Address:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


def node_addresses(cluster) -> dict[int, Address]:
    brokers = exchange_once(bootstrap_address(cluster), MetadataRequest[1](topics=[]), MetadataResponse, 1).brokers
    return {node_id: (host, port) for node_id, host, port, _ in brokers}


def leader_of(cluster, topic: str, partition: int) -> int:
    [described] = [t for t in cluster.status()["topics"] if t["name"] == topic]
    return {p["partition"]: p["leader"] for p in described["partitions"]}[partition]


def leader_address(cluster, topic: str, partition: int) -> Address:
    return node_addresses(cluster)[leader_of(cluster, topic, partition)]


def coordinator(cluster, transactional_id: str, timeout_s: float = 15) -> Address:
    """The transaction coordinator of transactional_id (FindCoordinator v3), once it has one."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = exchange_once(bootstrap_address(cluster),
                              FindCoordinatorRequest[3](key=transactional_id, key_type=TRANSACTION_KEY_TYPE),
                              FindCoordinatorResponse, 3)
        if found.error_code == 0:
            return found.host, found.port
        assert found.error_code == COORDINATOR_NOT_AVAILABLE and time.monotonic() < deadline, found
        time.sleep(0.05)


def init_producer_id(address: Address, transactional_id: str | None, timeout_ms: int = 20_000,
                     producer_id: int = -1, epoch: int = -1, version: int = 4) -> tuple[int, int, int]:
    """(error code, producer id, epoch) of InitProducerId; `producer_id` and `epoch` (v3+) are the
    producer's current ones, as a producer names them to bump its epoch (KIP-360)."""
    fields = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms}
    if version >= 3:
        fields.update(producer_id=producer_id, producer_epoch=epoch)
    answer = exchange_once(address, InitProducerIdRequest[version](**fields), InitProducerIdResponse, version)
    return answer.error_code, answer.producer_id, answer.producer_epoch


def add_partitions(address: Address, transactional_id: str, producer_id: int, epoch: int,
                   partitions: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], int]:
    """Each partition's error code in AddPartitionsToTxn's answer: a client's request (v0-3), or a
    broker's batch of one transaction (v4+, adding rather than verifying), whose top-level error
    must be none."""
    Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    topics = [Topic(name=name, partitions=indexes) for name, indexes in partitions.items()]
    if version < 4:
        request = AddPartitionsToTxnRequest[version](
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)
        answer = exchange_once(address, request, AddPartitionsToTxnResponse, version)
        results = answer.results_by_topic_v3_and_below
    else:
        transaction = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, verify_only=False,
            topics=topics)
        request = AddPartitionsToTxnRequest[version](transactions=[transaction])
        answer = exchange_once(address, request, AddPartitionsToTxnResponse, version)
        assert answer.error_code == 0, answer
        [result] = answer.results_by_transaction
        results = result.topic_results
    return {(t.name, p.partition_index): p.partition_error_code for t in results for p in t.results_by_partition}


def end_txn(address: Address, transactional_id: str, producer_id: int, epoch: int, commit: bool,
            version: int = 3) -> int:
    request = EndTxnRequest[version](transactional_id=transactional_id, producer_id=producer_id,
                                     producer_epoch=epoch, committed=commit)
    return exchange_once(address, request, EndTxnResponse, version).error_code


def when_ready(call, timeout_s: float = 15):
    """What call() answers once it is no longer CONCURRENT_TRANSACTIONS (the coordinator still writing
    the previous transaction's markers), retried as clients retry; its error code comes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call()
        if (answer[0] if isinstance(answer, tuple) else answer) != CONCURRENT_TRANSACTIONS:
            return answer
        assert time.monotonic() < deadline, "the coordinator stayed busy"
        time.sleep(0.05)


def end_txn_when_ready(address: Address, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
    return when_ready(lambda: end_txn(address, transactional_id, producer_id, epoch, commit))


def produce(address: Address, topic: str, partition: int, values: list[bytes], producer_id: int = -1,
            epoch: int = -1, sequence: int = -1, transactional_id: str | None = None, transactional: bool = True,
            version: int = 9) -> tuple[int, int]:
    """(error code, base offset) of an acks=all Produce of one batch."""
    batch = encode_batch([(None, value) for value in values], timestamp=int(time.time() * 1000),
                         attributes=ATTR_TRANSACTIONAL if transactional else 0, producer_id=producer_id,
                         producer_epoch=epoch, base_sequence=sequence)
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=partition, records=batch)])])
    answer = exchange_once(address, request, ProduceResponse, version).responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def write_txn_markers(address: Address, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: dict[str, list[int]], version: int = 1) -> dict[tuple[str, int], int]:
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest[version](markers=[Marker(
        producer_id=producer_id, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[Marker.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                for name, indexes in partitions.items()])])
    [result] = exchange_once(address, request, WriteTxnMarkersResponse, version).markers
    assert result.producer_id == producer_id
    return {(t.name, p.partition_index): p.error_code for t in result.topics for p in t.partitions}


def last_stable_offset(address: Address, topic: str, partition: int) -> int:
    """ListOffsets v5 at read_committed for the latest offset: the partition's LSO."""
    Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest[5](replica_id=-1, isolation_level=READ_COMMITTED, topics=[Topic(
        name=topic, partitions=[Topic.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                           timestamp=-1)])])
    [answer] = exchange_once(address, request, ListOffsetsResponse, 5).topics[0].partitions
    if answer.error_code in (NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE):
        raise NotLeader(f"{address} does not lead {topic}-{partition}, or has only begun to")
    assert answer.error_code == 0, answer
    return answer.offset


class NotLeader(Exception):
    pass


def wait_for_last_stable_offset(cluster, topic: str, partition: int, offset: int, timeout_s: float = 15) -> None:
    """Until the partition's LSO, asked of whichever node leads it then, is `offset`."""
    deadline = time.monotonic() + timeout_s
    found = None
    while True:
        try:
            found = last_stable_offset(leader_address(cluster, topic, partition), topic, partition)
        except NotLeader:
            pass  # (leadership moving: ask the next leader)
        if found == offset:
            return
        assert time.monotonic() < deadline, f"the LSO of {topic}-{partition} stays at {found}, not {offset}"
        time.sleep(0.02)


def wait_for_preferred_leaders(cluster, topics: list[str], timeout_s: float = 30) -> None:
    """Until each partition of the topics is led by its first replica, as the controller's leader
    balancing makes it after a restart (leaderships stay put from then on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        described = [t for t in cluster.status()["topics"] if t["name"] in topics]
        if all(p["leader"] == p["replicas"][0] for t in described for p in t["partitions"]):
            return
        assert time.monotonic() < deadline, f"the preferred leaders of {topics} were not elected: {described}"
        time.sleep(0.1)


def fetch(address: Address, topic: str, partition: int, offset: int = 0, read_committed: bool = True):
    """(partition answer, [(offset, value, is control)] of every record) of one Fetch v11."""
    request = FetchRequest[11](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20,
        isolation_level=READ_COMMITTED if read_committed else 0, session_id=0, session_epoch=-1,
        forgotten_topics_data=[], rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=8 << 20)])])
    [answer] = exchange_once(address, request, FetchResponse, 11).responses[0].partitions
    records = MemoryRecords(bytes(answer.records or b""))
    found = []
    while records.has_next():
        batch = records.next_batch()
        found += [(record.offset, record.value, batch.is_control_batch) for record in batch]
    return answer, found


def answers_api_versions(address: Address) -> bool:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    with socket.create_connection(address, timeout=10) as sock:
        answer = exchange(sock, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                          ApiVersionsResponse, 3)
    return answer.error_code == 0
