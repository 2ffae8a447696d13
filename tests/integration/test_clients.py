"""Each real client library produces 1,000 keyed messages (some with headers, half of them
compressed) to a 6-partition topic spread over 3 nodes, and reads every one back exactly."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections import Counter
from dataclasses import replace

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.integration.js_programs import JS_DIR, kafkajs_missing
from tests.integration.messages import Consumed, Delivered, assert_read_back_exactly, make_messages

PARTITIONS = 6


@pytest.fixture(scope="module")
def shared_cluster():
    from cluster.launch import Cluster

    with Cluster(nodes=3) as cluster:
        yield cluster


def create_topic(cluster, name: str, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def new_topic(cluster) -> str:
    name = f"roundtrip-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, name)
    return name


def test_six_partitions_on_three_nodes_have_two_leaders_each(shared_cluster):
    topic = new_topic(shared_cluster)
    consumer = KafkaConsumer(bootstrap_servers=shared_cluster.bootstrap_servers)
    try:
        consumer.topics()
        leaders = Counter(consumer._client.cluster.leader_for_partition(TopicPartition(topic, p)) for p in range(PARTITIONS))
    finally:
        consumer.close()
    assert leaders == {1: 2, 2: 2, 3: 2}


def read_back_kafka_python(bootstrap: str, topic: str, count: int) -> list[Consumed]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        records = []
        for record in consumer:
            records.append(Consumed(record.key, record.value, tuple((k, bytes(v)) for k, v in record.headers),
                                    record.timestamp, record.partition, record.offset))
            if len(records) >= count:
                break
        return records
    finally:
        consumer.close()


def test_kafka_python_round_trip(shared_cluster):
    topic = new_topic(shared_cluster)
    messages = make_messages("kafka-python")
    delivered = []
    for compression, chunk in ((None, messages[:500]), ("gzip", messages[500:750]), ("lz4", messages[750:])):
        producer = KafkaProducer(bootstrap_servers=shared_cluster.bootstrap_servers, acks="all",
                                 compression_type=compression, linger_ms=5)
        futures = [(m, producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), timestamp_ms=m.timestamp))
                   for m in chunk]
        producer.flush()
        delivered += [Delivered(m, f.get().partition, f.get().offset) for m, f in futures]
        producer.close()
    consumed = read_back_kafka_python(shared_cluster.bootstrap_servers, topic, len(messages))
    assert_read_back_exactly(delivered, consumed, PARTITIONS)


def test_confluent_kafka_round_trip(shared_cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = new_topic(shared_cluster)
    messages = make_messages("confluent")
    delivered = []
    for compression, chunk in (("none", messages[:500]), ("snappy", messages[500:750]), ("zstd", messages[750:])):
        producer = confluent_kafka.Producer({"bootstrap.servers": shared_cluster.bootstrap_servers, "acks": "all",
                                             "compression.type": compression, "linger.ms": 5})
        for m in chunk:
            def on_delivery(err, msg, m=m):
                assert err is None, err
                delivered.append(Delivered(m, msg.partition(), msg.offset()))
            producer.produce(topic, key=m.key, value=m.value, headers=list(m.headers) or None,
                             timestamp=m.timestamp, on_delivery=on_delivery)
        assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": shared_cluster.bootstrap_servers,
                                         "group.id": "unused-assign-only", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    consumed = []
    try:
        for _ in range(200):
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                consumed.append(Consumed(msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1],
                                         msg.partition(), msg.offset()))
            if len(consumed) >= len(messages):
                break
    finally:
        consumer.close()
    assert_read_back_exactly(delivered, consumed, PARTITIONS)


def test_aiokafka_round_trip(shared_cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = new_topic(shared_cluster)
    messages = make_messages("aiokafka")

    async def run():
        delivered = []
        for compression, chunk in ((None, messages[:500]), ("gzip", messages[500:])):
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=shared_cluster.bootstrap_servers, acks="all",
                                                 compression_type=compression)
            await producer.start()
            try:
                futures = [(m, await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers),
                                                   timestamp_ms=m.timestamp)) for m in chunk]
                for m, future in futures:
                    meta = await future
                    delivered.append(Delivered(m, meta.partition, meta.offset))
            finally:
                await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=shared_cluster.bootstrap_servers,
                                             enable_auto_commit=False, group_id=None)
        await consumer.start()
        consumed = []
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            while len(consumed) < len(messages):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batches.values():
                    consumed += [Consumed(r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers), r.timestamp,
                                          r.partition, r.offset) for r in records]
        finally:
            await consumer.stop()
        return delivered, consumed

    delivered, consumed = asyncio.run(run())
    assert_read_back_exactly(delivered, consumed, PARTITIONS)


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/dev-setup installs it)")
def test_kcat_round_trip(shared_cluster):
    topic = new_topic(shared_cluster)
    # kcat takes headers per invocation, so headers go on a few messages sent one by one and
    # the rest stream through stdin; kcat sets timestamps itself.
    messages = [m if i % 100 == 0 else replace(m, headers=()) for i, m in enumerate(make_messages("kcat"))]
    bootstrap = shared_cluster.bootstrap_servers
    for compression, chunk in (("none", messages[:500]), ("lz4", messages[500:])):
        base = [KCAT, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-z", compression, "-X", "acks=all"]
        plain = [m for m in chunk if not m.headers]
        _kcat_produce(base, plain)
        for m in chunk:
            if m.headers:
                _kcat_produce(base + [arg for k, v in m.headers for arg in ("-H", f"{k}={v.decode()}")], [m])
    consumed = _consume_with_kcat(bootstrap, topic, len(messages))
    by_key = {c.key: c for c in consumed}
    assert sorted(by_key) == sorted(m.key for m in messages)
    for m in messages:
        assert (by_key[m.key].value, by_key[m.key].headers) == (m.value, m.headers)
    # kcat's view and another client's view of the log agree on every field.
    assert sorted(consumed, key=lambda c: (c.partition, c.offset)) == sorted(
        read_back_kafka_python(bootstrap, topic, len(messages)), key=lambda c: (c.partition, c.offset))
    offsets: dict[int, list[int]] = {}
    for c in consumed:
        offsets.setdefault(c.partition, []).append(c.offset)
    assert set(offsets) == set(range(PARTITIONS))
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values())


def _kcat_produce(args: list[str], chunk) -> None:
    if chunk:
        payload = b"".join(m.key + b"\t" + m.value + b"\n" for m in chunk)
        subprocess.run(args, input=payload, check=True, timeout=60)


def _consume_with_kcat(bootstrap: str, topic: str, count: int) -> list[Consumed]:
    fmt = "%k\t%s\t%p\t%o\t%T\t%h\n"
    out = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-c", str(count),
                          "-f", fmt], capture_output=True, check=True, timeout=60).stdout
    consumed = []
    for line in out.decode().splitlines():
        key, value, partition, offset, timestamp, headers = line.split("\t")
        pairs = tuple((k, v.encode()) for k, _, v in (h.partition("=") for h in headers.split(","))) if headers else ()
        consumed.append(Consumed(key.encode(), value.encode(), pairs, int(timestamp), int(partition), int(offset)))
    return consumed


@pytest.mark.skipif(kafkajs_missing() is not None, reason=str(kafkajs_missing()))
def test_kafkajs_round_trip(shared_cluster):
    topic = new_topic(shared_cluster)
    messages = make_messages("kafkajs")
    spec = [{"key": m.key.decode(), "value": m.value.decode(), "timestamp": str(m.timestamp),
             "headers": {k: v.decode() for k, v in m.headers}} for m in messages]
    result = subprocess.run(["node", str(JS_DIR / "roundtrip.js"), shared_cluster.bootstrap_servers, topic,
                             str(PARTITIONS)], input=json.dumps(spec).encode(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout)
    delivered = [Delivered(m, d["partition"], d["offset"]) for m, d in zip(messages, report["delivered"])]
    consumed = [Consumed(c["key"].encode(), c["value"].encode(),
                         tuple((k, v.encode()) for k, v in c["headers"]), int(c["timestamp"]), c["partition"],
                         int(c["offset"])) for c in report["consumed"]]
    assert_read_back_exactly(delivered, consumed, PARTITIONS)
