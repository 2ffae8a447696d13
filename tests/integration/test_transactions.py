"""Transactions with confluent-kafka: commit and abort, read_committed readers, the LSO, fencing, timeouts."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from cluster.launch import Cluster
from tests.integration.confluent_reads import read_all
from tests.integration.txn_wire import init_producer_id


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn") / "kraftwerk",
                 node_config={"transaction.state.log.num.partitions": "5"}) as running:
        yield running


def new_topic(cluster, partitions: int = 2) -> str:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    return topic


def transactional_producer(cluster, transactional_id: str | None = None, **config) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "transactional.id": transactional_id or f"tx-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, **config})
    producer.init_transactions(15)
    return producer


def values(records) -> list[bytes]:
    return sorted(value for _, _, value in records)


def test_committed_records_are_read_and_aborted_ones_hidden_from_read_committed(cluster):
    topic = new_topic(cluster)
    producer = transactional_producer(cluster)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(15)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(10)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"after", partition=0)
    producer.commit_transaction(15)

    committed = read_all(cluster, topic, "read_committed", expected=11)
    assert values(committed) == sorted([b"committed-%d" % i for i in range(10)] + [b"after"])
    everything = read_all(cluster, topic, "read_uncommitted", expected=17)
    assert values(everything) == sorted([b"committed-%d" % i for i in range(10)] + [b"after"]
                                        + [b"aborted-%d" % i for i in range(6)])
    # A marker takes an offset in each partition its transaction wrote: in partition 0, five
    # committed records, their marker, three aborted records, theirs, then the last one.
    assert [offset for partition, offset, _ in committed if partition == 0] == [0, 1, 2, 3, 4, 10]


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset(cluster):
    topic = new_topic(cluster, partitions=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    producer = transactional_producer(cluster)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(10)
    plain.produce(topic, value=b"written meanwhile", partition=0)
    plain.flush(10)

    assert values(read_all(cluster, topic, "read_committed", partitions=1, timeout_s=5)) == [b"before"]
    assert values(read_all(cluster, topic, "read_uncommitted", partitions=1, expected=3)) == sorted(
        [b"before", b"open", b"written meanwhile"])
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "lso-check",
                         "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        assert (low, high) == (0, 1)  # the LSO: the open transaction's first offset
        producer.commit_transaction(15)
        assert values(read_all(cluster, topic, "read_committed", partitions=1, expected=3)) == sorted(
            [b"before", b"open", b"written meanwhile"])
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 4)
    finally:
        consumer.close()


def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction(cluster):
    topic = new_topic(cluster)
    transactional_id = f"zombie-{uuid.uuid4().hex[:6]}"
    zombie = transactional_producer(cluster, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"from the zombie", partition=0)
    zombie.flush(10)

    successor = transactional_producer(cluster, transactional_id)
    successor.begin_transaction()
    successor.produce(topic, value=b"from the successor", partition=1)
    successor.commit_transaction(15)

    zombie.produce(topic, value=b"late", partition=0)
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(15)
    assert refused.value.args[0].fatal() or refused.value.args[0].txn_requires_abort()
    assert values(read_all(cluster, topic, "read_committed", expected=1)) == [b"from the successor"]


def test_the_coordinator_aborts_a_transaction_that_outlives_its_timeout(cluster):
    topic = new_topic(cluster)
    producer = transactional_producer(cluster, **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, value=b"too slow", partition=0)
    producer.flush(10)
    # Held back while open, and hidden once the coordinator has aborted it.
    deadline = time.monotonic() + 15
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    plain.produce(topic, value=b"later", partition=0)
    plain.flush(10)
    while time.monotonic() < deadline:
        if values(read_all(cluster, topic, "read_committed", timeout_s=2)) == [b"later"]:
            break
    else:
        pytest.fail("the timed-out transaction still holds read_committed readers back")
    with pytest.raises(KafkaException):
        producer.commit_transaction(15)


def test_consume_transform_produce_commits_the_offsets_with_the_output(cluster):
    source, sink = new_topic(cluster, partitions=1), new_topic(cluster, partitions=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(6):
        plain.produce(source, value=b"in-%d" % i, partition=0)
    plain.flush(10)
    group = f"pipeline-{uuid.uuid4().hex[:6]}"

    def run_once(commit: bool, count: int) -> None:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(source, 0)])
        producer = transactional_producer(cluster, f"pipeline-{group}")
        try:
            taken = []
            while len(taken) < count:
                message = consumer.poll(5)
                assert message is not None and not message.error()
                taken.append(message)
            producer.begin_transaction()
            for message in taken:
                producer.produce(sink, value=message.value().replace(b"in", b"out"), partition=0)
            producer.send_offsets_to_transaction([TopicPartition(source, 0, taken[-1].offset() + 1)],
                                                 consumer.consumer_group_metadata(), 15)
            if commit:
                producer.commit_transaction(15)
            else:
                producer.abort_transaction(15)
        finally:
            consumer.close()

    run_once(commit=True, count=3)
    run_once(commit=False, count=3)  # aborted: its output hidden, its offsets never committed
    checker = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        assert checker.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 3
    finally:
        checker.close()
    run_once(commit=True, count=3)  # resumes at offset 3
    assert values(read_all(cluster, sink, "read_committed", partitions=1, expected=6)) == [
        b"out-%d" % i for i in range(6)]


def test_an_idle_transactional_id_expires_and_starts_over_with_a_new_producer_id(tmp_path):
    settings = {"transactional.id.expiration.ms": "1000",
                "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
                "transaction.state.log.num.partitions": "1"}
    with Cluster(nodes=1, data_dir=tmp_path / "kraftwerk", node_config=settings) as single:
        transactional_producer(single, "short-lived").flush(1)  # finds the coordinator, makes the id
        host, port = single.bootstrap_servers.rsplit(":", 1)
        address = (host, int(port))
        _, producer_id, epoch = init_producer_id(address, "short-lived", timeout_ms=10_000)
        assert epoch == 1  # the same id, the next epoch
        node_log = single.data_dir / "logs" / "node-1.log"
        deadline = time.monotonic() + 15
        while "expired 1 transactional ids" not in node_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        # The old instance, naming its id and epoch (KIP-360), recovers with a new producer id.
        error, new_id, new_epoch = init_producer_id(address, "short-lived", 10_000, producer_id, epoch)
        assert (error, new_epoch) == (0, 0) and new_id != producer_id
