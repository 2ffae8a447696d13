"""Transactional requests a broken or hostile client sends, raw: each is answered with the error
code Kafka answers it with (or, where Kafka's request parser refuses it, a closed connection),
the node goes on serving, nothing else is disturbed (a transaction committed before is read
back exactly and a new one commits), and no node logs an ERROR.

Kafka's answers, from its TransactionCoordinator, KafkaApis and LogValidator: a transactional id
the coordinator does not know, or a producer id that is not the id's, is
INVALID_PRODUCER_ID_MAPPING; an older epoch is PRODUCER_FENCED, which AddPartitionsToTxn and
EndTxn before v2 and InitProducerId before v4 answer as INVALID_PRODUCER_EPOCH; EndTxn with no
transaction open is INVALID_TXN_STATE; a transaction timeout outside (0,
transaction.max.timeout.ms] is INVALID_TRANSACTION_TIMEOUT; a string longer than 32767 bytes
fails to parse, which closes the connection. A transactional batch for a partition its
transaction does not hold is TRANSACTION_ABORTABLE from Produce v11 and INVALID_TXN_STATE before
(KIP-890's verification); one in a request without a transactional id is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a batch without the transactional flag from a producer
whose transaction is open there is INVALID_TXN_STATE; a control batch (a marker) from a client is
INVALID_RECORD. WriteTxnMarkers writes a marker for a producer a partition has never seen.
FindCoordinator with a key type other than group and transaction (and share, not served) is
INVALID_REQUEST.
"""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse,
)

from cluster.formats import control_records
from cluster.launch import Cluster
from tests.integration import txn_wire
from tests.integration.txn_wire import (
    add_partitions, coordinator, end_txn, end_txn_when_ready, fetch, init_producer_id, last_stable_offset,
    leader_address, produce, write_txn_markers,
)
from tests.integration.wire import exchange, exchange_once, send_request

NONE = 0
INVALID_REQUEST = 42
INVALID_RECORD = 87
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120

MAX_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn-bad-input") / "kraftwerk",
                 node_config={"transaction.state.log.num.partitions": "5",
                              "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}) as running:
        yield running


def new_topic(cluster, partitions: int = 2) -> str:
    topic = f"txn-bad-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    return topic


def new_id(prefix: str = "bad") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bystander(cluster):
    """A topic written before any bad input: a committed, an aborted and a committed transaction of
    kafka-python's. (topic, what read_committed reads there)."""
    topic = new_topic(cluster, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=new_id("bystander"),
                             transaction_timeout_ms=20_000)
    try:
        producer.init_transactions()
        for values, commit in (([b"kept-0", b"kept-1"], True), ([b"dropped"], False), ([b"kept-2"], True)):
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value, partition=0)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
    finally:
        producer.close(10)
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 7)  # (the last marker in)
    return topic, [(0, b"kept-0"), (1, b"kept-1"), (5, b"kept-2")]


@pytest.fixture(autouse=True)
def undisturbed(cluster, bystander):
    """After each test: every node serves, the bystander reads as before, a new transaction commits,
    and no node logged an ERROR (at most one WARNING) while the test ran."""
    logs = sorted((cluster.data_dir / "logs").glob("node-*.log"))
    sizes = {log: log.stat().st_size for log in logs}
    yield
    for address in txn_wire.node_addresses(cluster).values():
        assert txn_wire.answers_api_versions(address)
    topic, committed = bystander
    assert read_committed(cluster, topic) == committed
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=new_id("after"),
                             transaction_timeout_ms=20_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        sent = producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
        committed.append((sent.get(10).offset, b"after"))
    finally:
        producer.close(10)
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, committed[-1][0] + 2)
    assert read_committed(cluster, topic) == committed
    written = {log.name: log.read_bytes()[sizes.get(log, 0):].decode(errors="replace").splitlines() for log in logs}
    errors = {name: [line for line in lines if " ERROR " in line or line.startswith("Traceback")]
              for name, lines in written.items()}
    assert errors == {name: [] for name in written}, "a node logged an ERROR"
    warnings = [line for lines in written.values() for line in lines if " WARNING " in line]
    assert len(warnings) <= 1, warnings


def read_committed(cluster, topic: str) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([partition])[partition]
        found = []
        deadline = time.monotonic() + 15
        while consumer.position(partition) < end:
            assert time.monotonic() < deadline, found
            for records in consumer.poll(timeout_ms=200).values():
                found += [(r.offset, r.value) for r in records]
        return found
    finally:
        consumer.close()


def started(cluster, transactional_id: str, timeout_ms: int = 20_000) -> tuple[tuple[str, int], int, int]:
    """(coordinator address, producer id, epoch) of a transactional id initialised once."""
    address = coordinator(cluster, transactional_id)
    error, producer_id, epoch = init_producer_id(address, transactional_id, timeout_ms)
    assert error == NONE
    return address, producer_id, epoch


# --- unknown producers and stale epochs ---

def test_an_unknown_transactional_id_or_producer_id_is_an_invalid_mapping(cluster):
    topic = new_topic(cluster)
    unknown = new_id("never-initialised")
    address = coordinator(cluster, unknown)
    for version in range(5):
        assert add_partitions(address, unknown, 4242, 0, {topic: [0, 1]}, version) == {
            (topic, 0): INVALID_PRODUCER_ID_MAPPING, (topic, 1): INVALID_PRODUCER_ID_MAPPING}, version
    for version in range(6):
        assert end_txn(address, unknown, 4242, 0, True, version) == INVALID_PRODUCER_ID_MAPPING, version

    transactional_id = new_id()
    address, producer_id, epoch = started(cluster, transactional_id)
    for version in range(5):
        assert add_partitions(address, transactional_id, producer_id + 1, epoch, {topic: [0]}, version) == {
            (topic, 0): INVALID_PRODUCER_ID_MAPPING}, version
    for version in range(6):
        assert end_txn(address, transactional_id, producer_id + 1, epoch, False, version) == \
            INVALID_PRODUCER_ID_MAPPING, version
    # None of it touched the id's own producer.
    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    assert end_txn(address, transactional_id, producer_id, epoch, False) == NONE


def test_a_stale_epoch_is_fenced_with_the_code_of_each_version(cluster):
    topic = new_topic(cluster)
    transactional_id = new_id()
    address, producer_id, old_epoch = started(cluster, transactional_id)
    error, same_id, epoch = init_producer_id(address, transactional_id)  # a new instance fences the first
    assert (error, same_id, epoch) == (NONE, producer_id, old_epoch + 1)

    for version in range(5):
        expected = INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED
        assert add_partitions(address, transactional_id, producer_id, old_epoch, {topic: [0]}, version) == {
            (topic, 0): expected}, version
    for version in range(6):
        expected = INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED
        assert end_txn(address, transactional_id, producer_id, old_epoch, True, version) == expected, version
    # The fenced instance asking for an epoch bump with its old epoch (KIP-360, as a producer does
    # after an abortable error) is fenced too: handing it the new instance's epoch would undo the fencing.
    for version in (3, 4, 5):
        expected = INVALID_PRODUCER_EPOCH if version < 4 else PRODUCER_FENCED
        assert init_producer_id(address, transactional_id, producer_id=producer_id, epoch=old_epoch,
                                version=version) == (expected, -1, -1), version
    # A producer id without an epoch, or an epoch without a producer id, is no request Kafka reads.
    assert init_producer_id(address, transactional_id, producer_id=producer_id, epoch=-1)[0] == INVALID_REQUEST
    assert init_producer_id(address, transactional_id, producer_id=-1, epoch=epoch)[0] == INVALID_REQUEST

    # The new instance is untouched: it writes and commits a transaction.
    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    leader = leader_address(cluster, topic, 0)
    assert produce(leader, topic, 0, [b"new"], producer_id, epoch, 0, transactional_id) == (NONE, 0)
    # The old epoch's batch: refused by the coordinator's verification and by the partition alike.
    assert produce(leader, topic, 0, [b"zombie"], producer_id, old_epoch, 0, transactional_id) == (
        INVALID_PRODUCER_EPOCH, -1)
    assert end_txn(address, transactional_id, producer_id, epoch, True) == NONE
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 2)
    records = fetch(leader, topic, 0)[1]
    assert [(offset, control) for offset, _, control in records] == [(0, False), (1, True)]
    assert records[0][1] == b"new"


def test_end_txn_without_a_transaction_is_an_invalid_state(cluster):
    topic = new_topic(cluster)
    transactional_id = new_id()
    address, producer_id, epoch = started(cluster, transactional_id)
    for version in range(5):
        for commit in (True, False):
            assert end_txn(address, transactional_id, producer_id, epoch, commit, version) == INVALID_TXN_STATE

    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    leader = leader_address(cluster, topic, 0)
    assert produce(leader, topic, 0, [b"one"], producer_id, epoch, 0, transactional_id) == (NONE, 0)
    assert end_txn(address, transactional_id, producer_id, epoch, True) == NONE
    # Once it is complete, a retried commit is answered as done; an abort is no longer possible.
    assert end_txn_when_ready(address, transactional_id, producer_id, epoch, True) == NONE
    assert end_txn(address, transactional_id, producer_id, epoch, False) == INVALID_TXN_STATE
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 2)


def test_a_transaction_timeout_above_the_maximum_is_refused(cluster):
    transactional_id = new_id()
    address = coordinator(cluster, transactional_id)
    for timeout_ms in (MAX_TIMEOUT_MS + 1, 2**31 - 1, 0, -1):
        for version in (0, 4):
            assert init_producer_id(address, transactional_id, timeout_ms, version=version) == (
                INVALID_TRANSACTION_TIMEOUT, -1, -1), (timeout_ms, version)
    error, _, epoch = init_producer_id(address, transactional_id, MAX_TIMEOUT_MS)
    assert (error, epoch) == (NONE, 0)  # the refusals made nothing: this is the id's first epoch


# --- a 100 KB transactional id ---

def closes_the_connection(address, request, response_class, version: int) -> bool:
    with socket.create_connection(address, timeout=10) as sock:
        send_request(sock, request, version)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_a_100_kb_transactional_id_fails_to_parse_and_closes_the_connection(cluster):
    """Kafka's request readers refuse a string longer than 32767 bytes, which only the flexible
    versions' compact strings can carry: the request fails to parse and the connection closes."""
    huge = "x" * 100_000
    address = txn_wire.bootstrap_address(cluster)
    requests = [
        (FindCoordinatorRequest[3](key=huge, key_type=1), FindCoordinatorResponse, 3),
        (FindCoordinatorRequest[4](key_type=1, coordinator_keys=["ok", huge]), FindCoordinatorResponse, 4),
        (InitProducerIdRequest[2](transactional_id=huge, transaction_timeout_ms=10_000), InitProducerIdResponse, 2),
        (InitProducerIdRequest[4](transactional_id=huge, transaction_timeout_ms=10_000, producer_id=-1,
                                  producer_epoch=-1), InitProducerIdResponse, 4),
        (AddPartitionsToTxnRequest[3](v3_and_below_transactional_id=huge, v3_and_below_producer_id=1,
                                      v3_and_below_producer_epoch=0, v3_and_below_topics=[]),
         AddPartitionsToTxnResponse, 3),
        (EndTxnRequest[3](transactional_id=huge, producer_id=1, producer_epoch=0, committed=True), EndTxnResponse, 3),
    ]
    for node_address in txn_wire.node_addresses(cluster).values():  # every node: one of them coordinates it
        for request, response_class, version in requests:
            assert closes_the_connection(node_address, request, response_class, version), (node_address, request)
    # The longest id Kafka reads, 32767 bytes, is an id like any other.
    longest = "y" * 32767
    error, producer_id, epoch = init_producer_id(coordinator(cluster, longest), longest)
    assert (error, epoch) == (NONE, 0) and producer_id >= 0
    with socket.create_connection(address, timeout=10) as sock:
        found = exchange(sock, FindCoordinatorRequest[4](key_type=1, coordinator_keys=[longest]),
                         FindCoordinatorResponse, 4)
    assert [c.error_code for c in found.coordinators] == [NONE]


# --- markers and batches where they do not belong ---

def test_write_txn_markers_for_a_partition_never_added_writes_the_marker(cluster):
    """A coordinator (or an admin aborting a hanging transaction) may send a marker for a producer the
    partition has never seen: Kafka writes it, and nothing else changes."""
    topic = new_topic(cluster)
    transactional_id = new_id()
    address, producer_id, epoch = started(cluster, transactional_id)
    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    first, second = leader_address(cluster, topic, 0), leader_address(cluster, topic, 1)
    assert produce(first, topic, 0, [b"open"], producer_id, epoch, 0, transactional_id) == (NONE, 0)
    assert produce(second, topic, 1, [b"plain"], transactional=False) == (NONE, 0)

    # An ABORT marker of the open transaction's producer where it never wrote, and a COMMIT of a
    # producer id nobody has: each takes an offset, and nothing is aborted or opened by them.
    assert write_txn_markers(second, producer_id, epoch, False, 0, {topic: [1]}) == {(topic, 1): NONE}
    assert write_txn_markers(second, 987_654_321, 3, True, 0, {topic: [1]}) == {(topic, 1): NONE}
    answer, records = fetch(second, topic, 1)
    assert (answer.high_watermark, answer.last_stable_offset, answer.aborted_transactions) == (3, 3, [])
    assert [(offset, control) for offset, _, control in records] == [(0, False), (1, True), (2, True)]
    assert produce(second, topic, 1, [b"plain after"], transactional=False) == (NONE, 3)

    # The transaction it named is still open in its own partition, and commits as if nothing happened.
    assert last_stable_offset(first, topic, 0) == 0
    assert end_txn(address, transactional_id, producer_id, epoch, True) == NONE
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 2)
    assert [(offset, value) for offset, value, control in fetch(first, topic, 0)[1] if not control] == [(0, b"open")]


def test_a_transactional_batch_outside_its_transaction_is_refused(cluster):
    topic = new_topic(cluster)
    transactional_id = new_id()
    address, producer_id, epoch = started(cluster, transactional_id)
    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    first, second = leader_address(cluster, topic, 0), leader_address(cluster, topic, 1)

    # Partition 1 is not part of the transaction: the coordinator says so, and nothing is written.
    # Produce v11+ may carry KIP-890's TRANSACTION_ABORTABLE; older versions get INVALID_TXN_STATE.
    assert produce(second, topic, 1, [b"stray"], producer_id, epoch, 0, transactional_id) == (INVALID_TXN_STATE, -1)
    assert produce(second, topic, 1, [b"stray"], producer_id, epoch, 0, transactional_id, version=11) == (
        TRANSACTION_ABORTABLE, -1)
    answer, records = fetch(second, topic, 1, read_committed=False)
    assert (answer.high_watermark, records) == (0, [])
    # Transactional records in a Produce that names no transactional id are refused: nothing could
    # verify them, and the transaction a stranger's batch opened would never end.
    assert produce(first, topic, 0, [b"anonymous"], producer_id, epoch, 0, None) == (
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    assert produce(first, topic, 0, [b"stranger"], 777_777_777, 0, 0, None) == (
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)

    assert produce(first, topic, 0, [b"in"], producer_id, epoch, 0, transactional_id) == (NONE, 0)
    # While its transaction is open here, the producer may not write outside it.
    assert produce(first, topic, 0, [b"outside"], producer_id, epoch, 1, transactional_id,
                   transactional=False) == (INVALID_TXN_STATE, -1)
    assert produce(first, topic, 0, [b"in again"], producer_id, epoch, 1, transactional_id) == (NONE, 1)
    assert end_txn(address, transactional_id, producer_id, epoch, True) == NONE
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 3)
    assert [(offset, value) for offset, value, control in fetch(first, topic, 0)[1] if not control] == [
        (0, b"in"), (1, b"in again")]
    answer, records = fetch(second, topic, 1, read_committed=False)
    assert (answer.high_watermark, records) == (0, [])


def test_a_marker_written_by_a_client_is_an_invalid_record(cluster):
    """Only the transaction coordinator writes COMMIT and ABORT markers. A client's marker, even one of
    its own open transaction in a partition that transaction holds, is refused whole (Kafka's
    LogValidator), and the transaction stays open until EndTxn ends it."""
    topic = new_topic(cluster, partitions=1)
    transactional_id = new_id()
    address, producer_id, epoch = started(cluster, transactional_id)
    assert add_partitions(address, transactional_id, producer_id, epoch, {topic: [0]}) == {(topic, 0): NONE}
    leader = leader_address(cluster, topic, 0)
    assert produce(leader, topic, 0, [b"in"], producer_id, epoch, 0, transactional_id) == (NONE, 0)

    for commit in (True, False):
        marker = control_records.end_txn_marker(producer_id, epoch, commit, 0, int(time.time() * 1000))
        assert produce_records(leader, topic, 0, marker, transactional_id) == INVALID_RECORD
        assert produce_records(leader, topic, 0, marker, transactional_id, version=3) == INVALID_RECORD
    # A marker of a producer the partition has never seen, which nothing would ever end: without a
    # transactional id the request is refused before anything else, as any transactional one is.
    stray = control_records.end_txn_marker(4_242_424, 0, True, 0, int(time.time() * 1000))
    assert produce_records(leader, topic, 0, stray, None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer, records = fetch(leader, topic, 0, read_committed=False)
    assert (answer.high_watermark, answer.last_stable_offset, len(records)) == (1, 0, 1)

    assert end_txn(address, transactional_id, producer_id, epoch, True) == NONE
    txn_wire.wait_for_last_stable_offset(cluster, topic, 0, 2)
    assert [(offset, value) for offset, value, control in fetch(leader, topic, 0)[1] if not control] == [(0, b"in")]


def produce_records(address, topic: str, partition: int, records: bytes, transactional_id: str | None,
                    version: int = 9) -> int:
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest[version](transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=partition, records=records)])])
    return exchange_once(address, request, ProduceResponse, version).responses[0].partition_responses[0].error_code


def test_find_coordinator_with_an_unknown_key_type_is_an_invalid_request(cluster):
    address = txn_wire.bootstrap_address(cluster)
    with socket.create_connection(address, timeout=10) as sock:
        for key_type in (2, 7, -1):
            for version in (1, 2, 3):
                found = exchange(sock, FindCoordinatorRequest[version](key="some-key", key_type=key_type),
                                 FindCoordinatorResponse, version)
                assert (found.error_code, found.node_id) == (INVALID_REQUEST, -1), (key_type, version)
            for version in (4, 5, 6):
                found = exchange(sock, FindCoordinatorRequest[version](key_type=key_type, coordinator_keys=["a", "b"]),
                                 FindCoordinatorResponse, version)
                assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [
                    ("a", INVALID_REQUEST, -1), ("b", INVALID_REQUEST, -1)], (key_type, version)
        # The same connection then finds a transaction coordinator as usual.
        found = exchange(sock, FindCoordinatorRequest[3](key="some-key", key_type=1), FindCoordinatorResponse, 3)
        assert found.error_code == NONE and found.node_id in (1, 2, 3)
