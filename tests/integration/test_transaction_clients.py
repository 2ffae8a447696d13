"""Transactions with every client kraftwerk holds itself to, unmodified: kafka-python, aiokafka and
KafkaJS write and read them; kcat reads them at both isolation levels; Sarama 1.22 and kafka-go
0.2.1, which predate transactions, read a topic that holds them. Every value and every offset is
checked, markers included: each transaction takes one offset per partition it wrote, for its
COMMIT or ABORT marker, and no client ever shows a marker as a record.

What each client is given is what Kafka gives it. A read_committed reader (Fetch v4+ with
isolation level 1) reads up to the last stable offset and gets the list of aborted transactions
in what it read, and drops their records itself; ListOffsets at read_committed answers the LSO.
A read_uncommitted reader reads every data record, aborted ones too. Readers older than record
batches (Fetch v0-3: Sarama at its default 0.8.2 and at 0.10.2, kafka-go 0.2.1) get the data
records down-converted to magic 0 or 1 with their offsets, and no control batch (Kafka's
RecordsUtil.downConvert leaves them out), so their offsets skip the markers' offsets.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from cluster.launch import Cluster
from tests.integration import go_programs
from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.observe import logged_errors
from tests.integration.txn_wire import wait_for_last_stable_offset

PARTITIONS = 2
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # A data dir of our own outlives stop(), so the logs are read to the end of the shutdown.
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn-clients") / "kraftwerk",
                 node_config={"transaction.state.log.num.partitions": "5"}) as running:
        yield running
    logged = logged_errors(running)
    assert logged == {name: [] for name in logged}, "errors logged while serving transactional clients"


def new_topic(cluster, partitions: int = PARTITIONS) -> str:
    topic = f"txn-clients-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    return topic


# --- the transactions every client writes, and where Kafka puts them ---

@dataclass(frozen=True)
class Transaction:
    commit: bool
    messages: tuple[tuple[int, bytes], ...]  # (partition, value), in the order they are sent


@dataclass(frozen=True)
class Stored:
    partition: int
    offset: int
    value: bytes
    committed: bool


def standard_transactions(tag: str) -> list[Transaction]:
    """A committed transaction, an aborted one, and a committed one that writes the last record of
    each partition ("...-end-<partition>", which KafkaJS readers wait for)."""
    return [
        Transaction(True, tuple((i % PARTITIONS, f"{tag}-committed-{i}".encode()) for i in range(6))),
        Transaction(False, tuple((i % PARTITIONS, f"{tag}-aborted-{i}".encode()) for i in range(4))),
        Transaction(True, tuple((p, f"{tag}-end-{p}".encode()) for p in range(PARTITIONS))),
    ]


def layout(transactions: list[Transaction], plain_after: tuple[tuple[int, bytes], ...] = ()) -> list[Stored]:
    """Where each record lands: offsets count up per partition, and a transaction's end takes one
    offset in each partition it wrote (its marker). `plain_after`: records written without a
    transaction once every transaction has ended."""
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    stored = []
    for transaction in transactions:
        for partition, value in transaction.messages:
            stored.append(Stored(partition, next_offset[partition], value, transaction.commit))
            next_offset[partition] += 1
        for partition in {p for p, _ in transaction.messages}:
            next_offset[partition] += 1
    for partition, value in plain_after:
        stored.append(Stored(partition, next_offset[partition], value, True))
        next_offset[partition] += 1
    return stored


def log_end_offsets(transactions: list[Transaction]) -> dict[int, int]:
    """Each partition's log end once every transaction has ended (markers included)."""
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for transaction in transactions:
        for partition, _ in transaction.messages:
            ends[partition] += 1
        for partition in {p for p, _ in transaction.messages}:
            ends[partition] += 1
    return ends


def committed_view(stored: list[Stored]) -> list[tuple[int, int, bytes]]:
    return sorted((s.partition, s.offset, s.value) for s in stored if s.committed)


def uncommitted_view(stored: list[Stored]) -> list[tuple[int, int, bytes]]:
    return sorted((s.partition, s.offset, s.value) for s in stored)


# --- readers ---

def read_kafka_python(cluster, topic: str, isolation: str, partitions: int = PARTITIONS):
    """(records as (partition, offset, value) in the order each partition gave them, the end offsets
    ListOffsets answers at this isolation level, each partition's position once read to them)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        ends = {tp.partition: offset for tp, offset in consumer.end_offsets(assigned).items()}
        found = []
        deadline = time.monotonic() + 20
        while any(consumer.position(tp) < ends[tp.partition] for tp in assigned):
            assert time.monotonic() < deadline, f"kafka-python at {isolation} stuck before {ends}: {found}"
            for records in consumer.poll(timeout_ms=200).values():
                found += [(r.partition, r.offset, r.value) for r in records]
        return found, ends, {tp.partition: consumer.position(tp) for tp in assigned}
    finally:
        consumer.close()


def read_kcat(cluster, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    """Every record kcat reads from the beginning to the end of each partition (-e) at `isolation`."""
    out = subprocess.run([KCAT, "-b", cluster.bootstrap_servers, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-X", f"isolation.level={isolation}", "-f", "%p\t%o\t%s\n", "-q"],
                         capture_output=True, check=True, timeout=60).stdout
    return [(int(p), int(o), v.encode()) for p, o, v in (line.split("\t") for line in out.decode().splitlines())]


def in_offset_order(records: list[tuple[int, int, bytes]]) -> bool:
    for partition in {p for p, _, _ in records}:
        offsets = [o for p, o, _ in records if p == partition]
        if offsets != sorted(offsets):
            return False
    return True


def produce_with_kafka_python(cluster, topic: str, transactions: list[Transaction],
                              transactional_id: str | None = None) -> list[tuple[int, int, bytes]]:
    """Writes the transactions with one kafka-python transactional producer: (partition, offset, value)
    of each acknowledged record."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id=transactional_id or f"kp-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        delivered = []
        for transaction in transactions:
            producer.begin_transaction()
            sent = [(value, producer.send(topic, value=value, partition=partition))
                    for partition, value in transaction.messages]
            producer.flush()
            delivered += [(f.get(10).partition, f.get(10).offset, value) for value, f in sent]
            if transaction.commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(10)
    wait_until_ended(cluster, topic, transactions)
    return delivered


def wait_until_ended(cluster, topic: str, transactions: list[Transaction]) -> None:
    """Until the markers of every transaction are in: EndTxn is answered once its outcome is decided,
    and the markers follow (the LSO reaches the log end once they are in)."""
    for partition, end in log_end_offsets(transactions).items():
        wait_for_last_stable_offset(cluster, topic, partition, end)


# --- kafka-python ---

def test_kafka_python_transactions_read_at_both_isolation_levels(cluster):
    topic = new_topic(cluster)
    transactions = standard_transactions("kafka-python")
    stored = layout(transactions)
    delivered = produce_with_kafka_python(cluster, topic, transactions)
    assert sorted(delivered) == uncommitted_view(stored)

    ends = log_end_offsets(transactions)
    committed, committed_ends, positions = read_kafka_python(cluster, topic, "read_committed")
    assert sorted(committed) == committed_view(stored) and in_offset_order(committed)
    # Every transaction has ended: the LSO is the log end, and readers move past the last marker.
    assert committed_ends == ends and positions == ends

    everything, uncommitted_ends, positions = read_kafka_python(cluster, topic, "read_uncommitted")
    assert sorted(everything) == uncommitted_view(stored) and in_offset_order(everything)
    assert uncommitted_ends == ends and positions == ends


def test_kafka_python_read_committed_stops_at_an_open_transaction(cluster):
    topic = new_topic(cluster, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    plain = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        producer.init_transactions()
        assert plain.send(topic, b"before", partition=0).get(10).offset == 0
        producer.begin_transaction()
        assert producer.send(topic, b"open", partition=0).get(10).offset == 1
        assert plain.send(topic, b"meanwhile", partition=0).get(10).offset == 2

        committed, ends, positions = read_kafka_python(cluster, topic, "read_committed", partitions=1)
        assert (committed, ends, positions) == ([(0, 0, b"before")], {0: 1}, {0: 1})
        everything, ends, _ = read_kafka_python(cluster, topic, "read_uncommitted", partitions=1)
        assert (everything, ends) == ([(0, 0, b"before"), (0, 1, b"open"), (0, 2, b"meanwhile")], {0: 3})

        producer.abort_transaction()
        wait_for_last_stable_offset(cluster, topic, 0, 4)
        committed, ends, positions = read_kafka_python(cluster, topic, "read_committed", partitions=1)
        assert (committed, ends, positions) == ([(0, 0, b"before"), (0, 2, b"meanwhile")], {0: 4}, {0: 4})
    finally:
        producer.close(10)
        plain.close(10)


# --- aiokafka ---

def test_aiokafka_transactions_read_committed_and_uncommitted(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = new_topic(cluster)
    transactions = standard_transactions("aiokafka")
    stored = layout(transactions)

    class Abort(Exception):
        pass

    async def produce() -> list[tuple[int, int, bytes]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                             transactional_id=f"aio-{uuid.uuid4().hex[:8]}")
        await producer.start()
        delivered = []
        try:
            for transaction in transactions:
                try:
                    async with producer.transaction():
                        for partition, value in transaction.messages:
                            meta = await producer.send_and_wait(topic, value=value, partition=partition)
                            delivered.append((meta.partition, meta.offset, value))
                        if not transaction.commit:
                            raise Abort()  # leaving the block with an exception aborts the transaction
                except Abort:
                    pass
        finally:
            await producer.stop()
        return delivered

    async def read(isolation: str):
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation,
                                             enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            assigned = [aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning()
            ends = {tp.partition: offset for tp, offset in (await consumer.end_offsets(assigned)).items()}
            found = []
            deadline = time.monotonic() + 20
            while [tp for tp in assigned if await consumer.position(tp) < ends[tp.partition]]:
                assert time.monotonic() < deadline, f"aiokafka at {isolation} stuck before {ends}: {found}"
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    found += [(r.partition, r.offset, r.value) for r in records]
            return found, ends, {tp.partition: await consumer.position(tp) for tp in assigned}
        finally:
            await consumer.stop()

    delivered = asyncio.run(produce())
    wait_until_ended(cluster, topic, transactions)
    committed, committed_ends, committed_positions = asyncio.run(read("read_committed"))
    everything, ends, positions = asyncio.run(read("read_uncommitted"))
    assert sorted(delivered) == uncommitted_view(stored)
    assert sorted(committed) == committed_view(stored) and in_offset_order(committed)
    assert sorted(everything) == uncommitted_view(stored) and in_offset_order(everything)
    expected_ends = log_end_offsets(transactions)
    assert committed_ends == ends == committed_positions == positions == expected_ends


# --- KafkaJS ---

@pytest.mark.skipif(kafkajs_missing() is not None, reason=str(kafkajs_missing()))
def test_kafkajs_transactions_and_consumers_at_both_isolation_levels(cluster):
    topic = new_topic(cluster)
    transactions = standard_transactions("kafkajs")
    stored = layout(transactions)
    spec = [{"commit": t.commit, "messages": [{"partition": p, "value": v.decode()} for p, v in t.messages]}
            for t in transactions]
    result = subprocess.run(["node", str(JS_DIR / "transactions.js"), cluster.bootstrap_servers, topic,
                             str(PARTITIONS), f"kafkajs-{uuid.uuid4().hex[:8]}"],
                            input=json.dumps(spec).encode(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout)

    def records(key: str) -> list[tuple[int, int, bytes]]:
        return [(r["partition"], r["offset"], r["value"].encode()) for r in report[key]]

    assert sorted(records("delivered")) == uncommitted_view(stored)
    assert sorted(records("committed")) == committed_view(stored) and in_offset_order(records("committed"))
    assert sorted(records("uncommitted")) == uncommitted_view(stored) and in_offset_order(records("uncommitted"))


# --- kcat ---

@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_kcat_reads_committed_and_uncommitted_records(cluster):
    topic = new_topic(cluster)
    transactions = standard_transactions("kcat")
    stored = layout(transactions)
    produce_with_kafka_python(cluster, topic, transactions)
    # One more transaction stays open in partition 0 while kcat reads: read_committed stops before it.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id=f"kcat-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        open_offset = producer.send(topic, b"kcat-open", partition=0).get(10).offset
        assert open_offset == log_end_offsets(transactions)[0]

        committed = read_kcat(cluster, topic, "read_committed")
        assert sorted(committed) == committed_view(stored) and in_offset_order(committed)
        everything = read_kcat(cluster, topic, "read_uncommitted")
        assert sorted(everything) == sorted(uncommitted_view(stored) + [(0, open_offset, b"kcat-open")])
        assert in_offset_order(everything)

        producer.commit_transaction()
        wait_for_last_stable_offset(cluster, topic, 0, open_offset + 2)
        committed = read_kcat(cluster, topic, "read_committed")
        assert sorted(committed) == sorted(committed_view(stored) + [(0, open_offset, b"kcat-open")])
    finally:
        producer.close(10)


# --- clients older than transactions: Sarama 1.22 and kafka-go 0.2.1 ---

@pytest.fixture(scope="module")
def go_bin():
    with go_programs.built() as binaries:
        yield binaries


@pytest.fixture(scope="module")
def go_topic(cluster):
    """A topic holding committed and aborted transactions, then a record written without one in each
    partition, after the last marker: (name, what is stored)."""
    topic = new_topic(cluster)
    transactions = standard_transactions("go")
    tail = tuple((p, f"go-plain-{p}".encode()) for p in range(PARTITIONS))
    produce_with_kafka_python(cluster, topic, transactions)
    plain = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        for partition, value in tail:
            plain.send(topic, value, key=b"plain", partition=partition).get(10)
    finally:
        plain.close(10)
    return topic, layout(transactions, plain_after=tail)


def go_records(lines: list[dict]) -> list[tuple[int, int, bytes]]:
    return [(line["partition"], line["offset"], line["value"].encode()) for line in lines if "offset" in line]


# Sarama's default (0.8.2) fetches with Fetch v0 (magic 0), 0.10.2 with Fetch v3 (magic 1): record
# batches down-converted, control batches left out. 2.0 fetches with Fetch v4 at read_uncommitted:
# record batches as stored, markers included, which Sarama recognises as control records and skips.
@pytest.mark.parametrize("version", ["", "0.10.2.0", "2.0.0"], ids=["default-0.8.2", "0.10.2", "2.0"])
def test_sarama_reads_every_data_record_of_a_transactional_topic_and_no_marker(cluster, go_bin, go_topic, version):
    topic, stored = go_topic
    lines = go_programs.run(go_bin["sarama-consume"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                            "-version", version, "-messages", str(len(stored)), "-timeout", "30s")
    read = go_records(lines)
    # Each partition's last record is the plain one after the last marker: had a marker come through
    # as a message, it would have taken that record's place in the count.
    assert sorted(read) == uncommitted_view(stored) and in_offset_order(read)


def test_sarama_read_committed_skips_aborted_transactions(cluster, go_bin, go_topic):
    """Sarama 1.22 knows read_committed from Kafka 0.11's protocol on (Fetch v4, isolation level 1):
    it drops what the aborted-transaction list of each answer names."""
    topic, stored = go_topic
    committed = [s for s in stored if s.committed]
    lines = go_programs.run(go_bin["sarama-consume"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                            "-version", "2.0.0", "-isolation", "read_committed", "-messages", str(len(committed)),
                            "-timeout", "30s")
    read = go_records(lines)
    assert sorted(read) == committed_view(stored) and in_offset_order(read)


def test_kafka_go_reads_every_data_record_of_a_transactional_topic_and_no_marker(cluster, go_bin, go_topic):
    """kafka-go 0.2.1's Reader fetches with Fetch v2: magic-1 messages, markers left out, offsets
    skipping theirs; it moves on from each message's offset without complaint."""
    topic, stored = go_topic
    read = []
    for partition in range(PARTITIONS):
        expected = [s for s in stored if s.partition == partition]
        lines = go_programs.run(go_bin["kafkago-consume"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                                "-partition", str(partition), "-messages", str(len(expected)), "-timeout", "30s")
        assert lines[-1] == {"closed": True, "consumed": len(expected)}
        read += go_records(lines)
    assert sorted(read) == uncommitted_view(stored) and in_offset_order(read)


# --- two transactional producers interleaved in one partition ---

@pytest.fixture(scope="module")
def interleaved(cluster):
    """Producer A commits and producer B aborts, their records interleaved with each other's and with
    plain ones, B's transaction spanning A's marker and A's next transaction opening before B's
    abort: (topic, every record written as (partition, offset, value), the committed ones)."""
    topic = new_topic(cluster, partitions=1)
    first = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"a-{uuid.uuid4().hex[:8]}")
    second = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"b-{uuid.uuid4().hex[:8]}")
    plain = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        first.init_transactions()
        second.init_transactions()
        first.begin_transaction()
        second.begin_transaction()

        def send(producer, value: bytes) -> tuple[int, int, bytes]:
            return 0, producer.send(topic, value, partition=0).get(10).offset, value

        written = [send(first, b"a1"), send(second, b"b1"), send(plain, b"plain1"), send(first, b"a2"),
                   send(second, b"b2")]
        # EndTxn is answered once the outcome is decided; the markers follow. Each is awaited here
        # (the LSO moves when it is in) so that the offsets are known.
        first.commit_transaction()  # its marker: offset 5
        wait_for_last_stable_offset(cluster, topic, 0, 1)  # B's first offset
        written += [send(second, b"b3"), send(plain, b"plain2")]
        first.begin_transaction()
        written.append(send(first, b"a3"))
        second.abort_transaction()  # offset 9, while A's second transaction is open
        wait_for_last_stable_offset(cluster, topic, 0, 8)  # A's second transaction's first offset
        written.append(send(first, b"a4"))
        first.commit_transaction()  # offset 11
        wait_for_last_stable_offset(cluster, topic, 0, 12)
    finally:
        for producer in (first, second, plain):
            producer.close(10)
    assert [offset for _, offset, _ in written] == [0, 1, 2, 3, 4, 6, 7, 8, 10]
    committed = [record for record in written if not record[2].startswith(b"b")]
    assert committed == [(0, 0, b"a1"), (0, 2, b"plain1"), (0, 3, b"a2"), (0, 7, b"plain2"), (0, 8, b"a3"),
                         (0, 10, b"a4")]
    return topic, written, committed


def test_interleaved_transactions_read_committed_by_the_python_clients(cluster, interleaved):
    topic, written, committed = interleaved
    assert read_kafka_python(cluster, topic, "read_committed", partitions=1) == (committed, {0: 12}, {0: 12})
    assert read_kafka_python(cluster, topic, "read_uncommitted", partitions=1) == (written, {0: 12}, {0: 12})
    assert read_confluent(cluster, topic) == committed
    assert read_aiokafka(cluster, topic) == committed


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_interleaved_transactions_read_committed_by_kcat(cluster, interleaved):
    topic, written, committed = interleaved
    assert read_kcat(cluster, topic, "read_committed") == committed
    assert read_kcat(cluster, topic, "read_uncommitted") == written


def test_interleaved_transactions_read_committed_by_sarama(cluster, go_bin, interleaved):
    topic, _, committed = interleaved
    lines = go_programs.run(go_bin["sarama-consume"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                            "-version", "2.0.0", "-isolation", "read_committed", "-messages", str(len(committed)),
                            "-timeout", "30s")
    assert go_records(lines) == committed


def read_confluent(cluster, topic: str) -> list[tuple[int, int, bytes]]:
    """Partition 0 as librdkafka reads it at read_committed, to its end."""
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(topic, 0, 0)])
    found = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaException(message.error())
            found.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    pytest.fail(f"librdkafka did not reach the end: {found}")


def read_aiokafka(cluster, topic: str) -> list[tuple[int, int, bytes]]:
    """Partition 0 as aiokafka reads it at read_committed, to its last stable offset."""
    aiokafka = pytest.importorskip("aiokafka")

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                             isolation_level="read_committed", enable_auto_commit=False,
                                             group_id=None, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning()
            end = (await consumer.end_offsets([partition]))[partition]
            found = []
            while await consumer.position(partition) < end:
                for records in (await asyncio.wait_for(consumer.getmany(timeout_ms=200), 20)).values():
                    found += [(r.partition, r.offset, r.value) for r in records]
            return found
        finally:
            await consumer.stop()

    return asyncio.run(run())
