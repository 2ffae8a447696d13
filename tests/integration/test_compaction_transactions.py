"""Compaction of a topic written in transactions, with confluent-kafka: commits and aborts of the same
keys, cleaned on every replica, read back exactly as Kafka's cleaner leaves it. An aborted value
never shadows a committed one; aborted records are removed, so read_uncommitted readers see what
read_committed ones do; markers stay while their transactions have batches left and go once past
delete.retention.ms."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from cluster.formats import control_records
from cluster.formats.log_cleaner import Throttle, batches, records_body
from cluster.formats.records import decode_records
from cluster.launch import Cluster
from tests.integration.observe import logged_errors

KEYS = 8
ROUNDS = 6
SEGMENT_MS = 200  # segments roll quickly, so that little stays in the active one
DELETE_RETENTION_MS = 3000  # how long a marker with nothing left to end stays
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": str(SEGMENT_MS),
                "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "2",
                "delete.retention.ms": str(DELETE_RETENTION_MS)}
TIMEOUT_S = 60
NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("compaction-txn") / "kraftwerk"
    with Cluster(nodes=3, data_dir=data_dir, node_config={
            "log.cleaner.backoff.ms": "100", "transaction.state.log.num.partitions": "5"}) as running:
        yield running
    errors = logged_errors(running)
    assert not any(errors.values()), errors


class Writer:
    """A transactional producer that remembers, per key, the committed record a reader should end with."""

    def __init__(self, cluster, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5,
                                  "transactional.id": f"writer-{uuid.uuid4().hex[:8]}"})
        self.producer.init_transactions(30)
        self.latest: dict[bytes, tuple[int, bytes]] = {}

    def transaction(self, records: list[tuple[bytes, bytes]], commit: bool) -> None:
        delivered = {}

        def on_delivery(error, message):
            assert error is None, error
            delivered[message.key()] = (message.offset(), message.value())

        self.producer.begin_transaction()
        for key, value in records:
            self.producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=on_delivery)
        self.producer.flush(30)
        assert len(delivered) == len({key for key, _ in records})
        if commit:
            self.producer.commit_transaction(30)
            self.latest.update(delivered)
        else:
            self.producer.abort_transaction(30)

    def roll_out(self) -> None:
        """A record of a key of its own, once the segment holding the rest is old enough to roll: what came
        before leaves the active segment, which is never cleaned."""
        time.sleep(SEGMENT_MS * 2 / 1000)
        self.transaction([(b"tail-%d" % time.monotonic_ns(), b"rolls the rest out")], commit=True)

    def expected(self) -> list[tuple[int, bytes, bytes]]:
        return sorted((offset, key, value) for key, (offset, value) in self.latest.items())


def on_disk(cluster, node_id: int, topic: str) -> tuple[list, list, list]:
    """A replica's segment files as they lie: (offset, key, value) of each record, (offset, producer id,
    kind) of each marker, and (last offset, producer id) of each transactional data batch."""
    records, markers, transactional = [], [], []
    paths = sorted((cluster.nodes[node_id].data_dir / f"{topic}-0").glob("*.log"))
    for path in paths:
        for batch, header in batches(path, Throttle(0)):
            if header.is_control:
                kind = control_records.control_type(batch) if header.record_count else "empty"
                markers.append((header.base_offset, header.producer_id, kind, path == paths[-1]))
                continue
            if header.is_transactional:
                transactional.append((header.last_offset, header.producer_id))
            records += [(r.offset, r.key, r.value) for r in decode_records(header, records_body(batch, header))]
    return records, markers, transactional


def wait_until(check, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"not {what} in {TIMEOUT_S}s"
        time.sleep(0.2)  # the cleaner works in the background: the test polls what it left on disk


def read(cluster, topic: str, isolation: str) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, -2)])
    found = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition in 10 s"
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaException(message.error())
            found.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def needed_markers(markers: list, transactional: list) -> list:
    """The markers a replica must keep: each that ends a transaction with a batch left, and those in the
    active segment, which is never cleaned."""
    needed = {offset for offset, _, _, active in markers if active}
    for last_offset, producer_id in transactional:
        needed |= {min((o for o, p, _, _ in markers if p == producer_id and o > last_offset), default=-1)}
    return [marker for marker in markers if marker[0] in needed]


def test_commits_and_aborts_of_the_same_keys_compact_to_what_kafka_leaves(cluster):
    topic = "compacted-transactions"
    cluster.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    writer = Writer(cluster, topic)
    keys = [b"k%02d" % key for key in range(KEYS)]
    for round_ in range(ROUNDS):
        writer.transaction([(key, b"committed-%d" % round_) for key in keys], commit=True)
        # An aborted value of every key, then a committed one of half of them: the last word on the
        # other half is an abort, which must not take their committed values away.
        writer.transaction([(key, b"aborted-%d" % round_) for key in keys], commit=False)
        writer.transaction([(key, b"recommitted-%d" % round_) for key in keys[::2]], commit=True)
    writer.transaction([(key, b"aborted-last") for key in keys], commit=False)
    writer.roll_out()
    expected = writer.expected()
    assert {key: value for _, key, value in expected if key in keys} == {
        key: (b"recommitted-%d" if i % 2 == 0 else b"committed-%d") % (ROUNDS - 1) for i, key in enumerate(keys)}

    wait_until(lambda: all(on_disk(cluster, n, topic)[0] == expected for n in NODES),
               "compacted to the committed values on every replica")
    # Kafka's result: the aborted records are gone, so both isolation levels read the same.
    assert read(cluster, topic, "read_committed") == expected
    assert read(cluster, topic, "read_uncommitted") == expected
    for node_id in NODES:
        _, markers, transactional = on_disk(cluster, node_id, topic)
        assert {kind for _, _, kind, _ in markers} <= {control_records.COMMIT, control_records.ABORT}
        assert needed_markers(markers, transactional) != markers  # some end nothing any more: they wait

    # Once a later cleaning has stamped those markers and delete.retention.ms has passed, the next one
    # removes them; the markers whose transactions have batches left stay.
    writer.transaction([(b"fresh-1", b"f")], commit=True)
    writer.roll_out()
    wait_until(lambda: all(on_disk(cluster, n, topic)[0] == writer.expected() for n in NODES), "cleaned again")
    time.sleep(DELETE_RETENTION_MS / 1000 + 0.5)
    writer.transaction([(b"fresh-2", b"f")], commit=True)
    writer.roll_out()
    expected = writer.expected()

    def only_needed_markers_left() -> bool:
        found = [on_disk(cluster, n, topic) for n in NODES]
        return all(records == expected and needed_markers(markers, transactional) == markers
                   for records, markers, transactional in found)

    wait_until(only_needed_markers_left, "left with the markers still needed")
    assert read(cluster, topic, "read_committed") == expected
    assert read(cluster, topic, "read_uncommitted") == expected
