"""Log compaction with real clients: the latest value per key survives at its offset on every
replica, readers of every library skip the gaps, idempotent producers carry on, keyless records
are refused, `__consumer_offsets` is compacted, and a follower that was down converges."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer, TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidRecordError

from cluster.formats.log_cleaner import Throttle, batches, records_body
from cluster.formats.records import decode_records
from cluster.launch import Cluster
from node.groups.placement import partition_for_group
from tests.integration import go_programs
from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.observe import committed, logged_errors

KEYS = 12
ROUNDS = 15
SEGMENT_MS = 200  # segments roll quickly, so that little stays in the active one
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": str(SEGMENT_MS),
                "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "2"}
CLEANED_TIMEOUT_S = 60
# Long enough for the first cleaning to find the tombstones young on a loaded machine.
TOMBSTONE_RETENTION_MS = 10_000
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("compaction") / "kraftwerk"
    with Cluster(nodes=3, data_dir=data_dir, node_config={
            "log.cleaner.backoff.ms": "100", "offsets.topic.segment.bytes": "8192",
            "offsets.topic.num.partitions": "3"}) as running:
        yield running
    errors = logged_errors(running)
    assert not any(errors.values()), errors


def produce_rounds(cluster, topic: str, rounds: int = ROUNDS, producer: Producer | None = None,
                   tombstones: bool = True, value_size: int = 7, keys: range = range(KEYS)) -> dict:
    """Every key written once per round; then (with `tombstones`) the keys 0-2 deleted. Returns
    key -> (offset, value) of each key's last record."""
    producer = producer or Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                                     "linger.ms": 5})
    latest = {}

    def delivered(error, message):
        assert error is None, error
        latest[message.key()] = (message.offset(), message.value())

    for round_ in range(rounds):
        for key in keys:
            value = b"v%02d-%03d" % (key, round_)
            producer.produce(topic, key=b"k%02d" % key, value=value + b"." * (value_size - len(value)), partition=0,
                             on_delivery=delivered)
            producer.poll(0)
        producer.flush(30)
    for key in range(3 if tombstones else 0):
        producer.produce(topic, key=b"k%02d" % key, value=None, partition=0, on_delivery=delivered)
    producer.flush(30)
    time.sleep(SEGMENT_MS * 2 / 1000)
    # A key of its own: a key also in the active segment is never taken for superseded there.
    producer.produce(topic, key=b"tail-%d" % time.monotonic_ns(), value=b"rolls the rest out of the active segment",
                     partition=0, on_delivery=delivered)
    producer.flush(30)
    return latest


def replica_records(cluster, node_id: int, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a replica's segment files, read as they lie on disk."""
    found = []
    directory = cluster.nodes[node_id].data_dir / f"{topic}-0"
    for path in sorted(directory.glob("*.log")):
        for batch, header in batches(path, Throttle(0)):
            found += [(r.offset, r.key, r.value) for r in decode_records(header, records_body(batch, header))]
    return found


def expected_records(latest: dict) -> list[tuple[int, bytes, bytes | None]]:
    return sorted((offset, key, value) for key, (offset, value) in latest.items())


def wait_cleaned(cluster, topic: str, expected: list, nodes=(1, 2, 3)) -> None:
    deadline = time.monotonic() + CLEANED_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(replica_records(cluster, n, topic) == expected for n in nodes):
            return
        time.sleep(0.2)  # the cleaner works in the background: a test polls what it left on disk
    found = {n: len(replica_records(cluster, n, topic)) for n in nodes}
    pytest.fail(f"not compacted to {len(expected)} records in {CLEANED_TIMEOUT_S}s: records per node {found}")


def read_confluent(cluster, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-confluent",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([ConfluentPartition(topic, 0, -2)])
    read = []
    while True:
        message = consumer.poll(10)
        assert message is not None
        if message.error():
            assert message.error().code() == message.error()._PARTITION_EOF, message.error()
            break
        read.append((message.offset(), message.key(), message.value()))
    consumer.close()
    return read


def read_kafka_python(cluster, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    read = [(r.offset, r.key, r.value) for r in consumer]
    consumer.close()
    return read


def test_every_replica_keeps_the_latest_value_per_key_and_every_reader_skips_the_gaps(cluster):
    cluster.create_topic("compacted", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, "compacted"))
    assert len(expected) == KEYS + 1  # tombstones included: they stay for delete.retention.ms
    wait_cleaned(cluster, "compacted", expected)
    assert read_confluent(cluster, "compacted") == expected
    assert read_kafka_python(cluster, "compacted") == expected
    cluster.create_topic("not-compacted", partitions=1, replication_factor=3)
    # The last cleaning reached the active segment, which holds only the tail record.
    reported = cleaned_up_to(cluster)
    assert (reported["compacted"], reported["not-compacted"]) == (expected[-1][0], None)


def cleaned_up_to(cluster) -> dict[str, int | None]:
    """Each topic's partition 0 as `kraftwerk status --json` reports its next cleaning's start."""
    status = subprocess.run([sys.executable, "-m", "cluster.cli", "status", "--json", "--data-dir",
                             str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    return {t["name"]: t["partitions"][0]["cleaned_up_to"] for t in json.loads(status.stdout)["topics"]
            if not t["name"].startswith("__")}


def test_a_compacted_topic_created_again_starts_dirty(cluster):
    cluster.create_topic("compacted-again", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, "compacted-again", rounds=3))
    wait_cleaned(cluster, "compacted-again", expected)
    assert cleaned_up_to(cluster)["compacted-again"] == expected[-1][0]
    subprocess.run([sys.executable, "-m", "cluster.cli", "topic", "delete", "compacted-again", "--data-dir",
                    str(cluster.data_dir)], check=True, capture_output=True, timeout=60)
    cluster.create_topic("compacted-again", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    assert cluster.wait_in_sync("compacted-again")
    assert cleaned_up_to(cluster)["compacted-again"] == 0  # not where the deleted topic's cleaning stopped


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_kcat_reads_a_compacted_topic_from_the_beginning(cluster):
    cluster.create_topic("compacted-kcat", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, "compacted-kcat"))
    wait_cleaned(cluster, "compacted-kcat", expected)
    done = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap_servers, "-t", "compacted-kcat", "-o", "beginning",
                           "-e", "-Z", "-f", "%o %k %S\\n"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{o} {k.decode()} {-1 if v is None else len(v)}" for o, k, v in expected]


def test_an_idempotent_producer_carries_on_across_cleanings_and_a_restart(cluster):
    cluster.create_topic("compacted-idempotent", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5})
    first = produce_rounds(cluster, "compacted-idempotent", producer=producer)
    wait_cleaned(cluster, "compacted-idempotent", expected_records(first))
    leader = next(p for t in cluster.status()["topics"] if t["name"] == "compacted-idempotent"
                  for p in t["partitions"])["leader"]
    cluster.kill_node(leader)
    cluster.restart_node(leader)
    assert cluster.wait_in_sync("compacted-idempotent")
    second = produce_rounds(cluster, "compacted-idempotent", rounds=3, producer=producer)
    wait_cleaned(cluster, "compacted-idempotent", expected_records({**first, **second}))


def test_keyless_records_are_refused_and_nothing_else_is_disturbed(cluster):
    cluster.create_topic("compacted-keys", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=0)
    with pytest.raises(InvalidRecordError):
        producer.send("compacted-keys", value=b"no key", partition=0).get(30)
    assert producer.send("compacted-keys", key=b"k", value=b"keyed", partition=0).get(30).offset == 0
    producer.close()
    confluent = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    errors = []
    confluent.produce("compacted-keys", value=b"no key either", partition=0,
                      on_delivery=lambda error, message: errors.append(error))
    confluent.flush(30)
    assert [e.name() for e in errors] == ["INVALID_RECORD"]


def test_consumer_offsets_are_compacted_and_read_back_after_a_coordinator_restart(cluster):
    cluster.create_topic("committed-often", partitions=1, replication_factor=3)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "commits-often",
                         "enable.auto.commit": False})
    for offset in range(1, 1501):
        consumer.commit(offsets=[ConfluentPartition("committed-often", 0, offset)], asynchronous=False)
    consumer.close()
    partition = partition_for_group("commits-often", 3)
    coordinator = next(p for t in cluster.status()["topics"] if t["name"] == "__consumer_offsets"
                       for p in t["partitions"] if p["partition"] == partition)["leader"]
    directory = cluster.nodes[coordinator].data_dir / f"__consumer_offsets-{partition}"
    deadline = time.monotonic() + CLEANED_TIMEOUT_S
    while time.monotonic() < deadline and _records_in(directory) > 300:
        time.sleep(0.2)
    assert _records_in(directory) <= 300, "1,500 commits of one partition were not compacted"
    cluster.kill_node(coordinator)
    cluster.restart_node(coordinator)
    assert committed(cluster, "commits-often") == {0: 1500}


def _records_in(directory) -> int:
    return sum(header.record_count for path in directory.glob("*.log") for _, header in batches(path, Throttle(0)))


def test_a_follower_down_through_a_cleaning_converges(cluster):
    cluster.create_topic("compacted-follower", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    state = next(p for t in cluster.status()["topics"] if t["name"] == "compacted-follower" for p in t["partitions"])
    follower = next(r for r in state["replicas"] if r != state["leader"])
    first = produce_rounds(cluster, "compacted-follower", rounds=5)
    cluster.kill_node(follower)
    try:
        latest = {**first, **produce_rounds(cluster, "compacted-follower")}
        others = tuple(n for n in (1, 2, 3) if n != follower)
        wait_cleaned(cluster, "compacted-follower", expected_records(latest), nodes=others)
    finally:
        cluster.restart_node(follower)
    assert cluster.wait_in_sync("compacted-follower")
    # What it fetched back is its active segment, which no replica cleans: one more round rolls it.
    latest.update(produce_rounds(cluster, "compacted-follower", rounds=1))
    wait_cleaned(cluster, "compacted-follower", expected_records(latest))


@pytest.mark.skipif(kafkajs_missing() is not None, reason=kafkajs_missing() or "")
def test_kafkajs_and_aiokafka_read_a_compacted_topic_across_its_gaps(cluster):
    cluster.create_topic("compacted-readers", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, "compacted-readers"))
    wait_cleaned(cluster, "compacted-readers", expected)
    done = subprocess.run(["node", str(JS_DIR / "group.js"), cluster.bootstrap_servers, "compacted-readers",
                           "compacted-kafkajs", str(len(expected))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [(m["offset"], m["key"].encode()) for m in json.loads(done.stdout)] == [(o, k) for o, k, _ in expected]

    async def read_aiokafka():
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("compacted-readers", 0)])
            await consumer.seek_to_beginning()
            read = []
            while len(read) < len(expected):
                for records in (await consumer.getmany(timeout_ms=5000)).values():
                    read += [(r.offset, r.key, r.value) for r in records]
            return read
        finally:
            await consumer.stop()

    assert asyncio.run(read_aiokafka()) == expected


def test_tombstones_go_with_their_keys_after_delete_retention_ms(cluster):
    cluster.create_topic("compacted-tombstones", partitions=1, replication_factor=3,
                         config={**TOPIC_CONFIG, "delete.retention.ms": str(TOMBSTONE_RETENTION_MS)})
    first = produce_rounds(cluster, "compacted-tombstones", rounds=3)
    wait_cleaned(cluster, "compacted-tombstones", expected_records(first))  # the tombstones are still young
    time.sleep(TOMBSTONE_RETENTION_MS / 1000 + 0.5)
    # A later cleaning, once they are older than delete.retention.ms, drops them and their keys.
    second = produce_rounds(cluster, "compacted-tombstones", rounds=1, tombstones=False, keys=range(3, KEYS))
    latest = {key: found for key, found in {**first, **second}.items() if found[1] is not None}
    wait_cleaned(cluster, "compacted-tombstones", expected_records(latest))
    assert {b"k00", b"k01", b"k02"}.isdisjoint(key for _, key, _ in read_confluent(cluster, "compacted-tombstones"))


def test_a_node_killed_while_it_cleans_reopens_a_valid_log_and_cleans_again(cluster):
    cluster.create_topic("compacted-killed", partitions=1, replication_factor=1,
                         config={**TOPIC_CONFIG, "segment.bytes": str(256 << 10)})
    node_id = next(p for t in cluster.status()["topics"] if t["name"] == "compacted-killed"
                   for p in t["partitions"])["leader"]
    directory = cluster.nodes[node_id].data_dir / "compacted-killed-0"
    latest = produce_rounds(cluster, "compacted-killed", rounds=300, value_size=1000)
    deadline = time.monotonic() + CLEANED_TIMEOUT_S
    while not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap")):
        assert time.monotonic() < deadline, "no cleaning started"
        time.sleep(0.005)  # watching for the cleaner's files, to kill the node while they are being written
    cluster.kill_node(node_id)
    cluster.restart_node(node_id)
    assert cluster.wait_in_sync("compacted-killed")
    read = read_confluent(cluster, "compacted-killed")
    assert [offset for offset, _, _ in read] == sorted({offset for offset, _, _ in read})
    assert {key: (offset, value) for offset, key, value in read} == latest  # nothing live was lost
    wait_cleaned(cluster, "compacted-killed", expected_records(latest), nodes=(node_id,))
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))


@pytest.fixture(scope="module")
def go_bin():
    with go_programs.built() as binaries:
        yield binaries


@pytest.mark.parametrize("version", ["", "0.10.2.0", "2.0.0"], ids=["Fetch v0", "Fetch v3", "Fetch v4"])
def test_sarama_reads_a_compacted_topic_at_every_message_format(cluster, go_bin, version):
    """Old fetch versions get the compacted batches down-converted, gaps and all."""
    topic = f"compacted-sarama-{version or 'default'}"
    cluster.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, topic))
    wait_cleaned(cluster, topic, expected)
    lines = go_programs.run(go_bin["sarama-consume"], "-brokers", cluster.bootstrap_servers, "-topic", topic,
                            "-version", version, "-messages", str(len(expected)))
    # (The Go programs print a tombstone's null value as an empty string.)
    assert [(m["offset"], m["key"].encode(), m["value"].encode()) for m in lines] == [
        (o, k, v or b"") for o, k, v in expected]


def test_kafka_go_reads_a_compacted_topic(cluster, go_bin):
    cluster.create_topic("compacted-kafka-go", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    expected = expected_records(produce_rounds(cluster, "compacted-kafka-go"))
    wait_cleaned(cluster, "compacted-kafka-go", expected)
    lines = go_programs.run(go_bin["kafkago-consume"], "-brokers", cluster.bootstrap_servers,
                            "-topic", "compacted-kafka-go", "-partition", "0", "-messages", str(len(expected)))
    consumed = [line for line in lines if "offset" in line]  # (a last line reports the reader's close)
    assert [(m["offset"], m["key"].encode(), m["value"].encode()) for m in consumed] == [
        (o, k, v or b"") for o, k, v in expected]
