"""The clients' side of the benches: one producer writing, one consumer reading, timed.

`kraftwerk bench` (cluster.bench.standard) and its side-by-side with librdkafka's mock
(cluster.bench.against_mock) drive the cluster through these, so that both time the same loops.
Each takes a bootstrap string, so the same code measures a kraftwerk cluster and the mock.
"""
from __future__ import annotations

import time
from dataclasses import dataclass


# The settings of every confluent-kafka producer the benches time.
PRODUCER_SETTINGS = {"linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000}


def produce_confluent(confluent_kafka, bootstrap: str, topic: str, messages: int, value: bytes, acks: str,
                      config: dict | None = None) -> float:
    """Seconds one confluent-kafka producer takes to write `messages` copies of `value` and have them
    acknowledged; raises if any was refused or left unacknowledged. config: more producer settings."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_SETTINGS,
                                         **(config or {})})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(error)

    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    # A figure for messages the cluster refused would be meaningless.
    if remaining or failures:
        raise RuntimeError(f"{remaining} messages unacknowledged, {len(failures)} refused "
                           f"(first error: {failures[0] if failures else None})")
    return elapsed


def consume_confluent(confluent_kafka, bootstrap: str, topic: str, partitions: int, messages: int,
                      config: dict | None = None) -> float:
    """Seconds one confluent-kafka consumer takes to read `messages` messages of the topic's first
    `partitions` partitions from the beginning. config: more consumer settings."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "kraftwerk-bench",
                                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                                         **(config or {})})
    elapsed = read_from_beginning(consumer, topic, range(partitions), messages, 10_000).seconds
    consumer.close()
    return elapsed


def read_from_beginning(consumer, topic: str, partitions, messages: int, batch_size: int) -> ReadTimes:
    """A confluent-kafka consumer's read of `messages` messages from the first offsets of the topic's
    partitions, timed from before it asks for the topic's metadata.

    It is assigned the partitions once it knows their leaders: assigned before it has the topic's
    metadata, librdkafka finds no leader and queries the offsets only when a 500 ms timer fires,
    which would then be most of a short read's time, against the mock as against kraftwerk."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    started = time.perf_counter()
    consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in partitions])
    return read_times(consumer, messages, batch_size, started)


@dataclass
class ReadTimes:
    """How long an assigned consumer took to read: in all, and to its first message."""

    messages: int
    seconds: float  # from the start given to read_times to the last message
    first_message_seconds: float

    def steady_rate(self) -> float:
        """Messages per second after the first message: what the cluster serves, without the client's
        own start (connections, metadata, offsets)."""
        rest = self.seconds - self.first_message_seconds
        return (self.messages - 1) / rest if rest > 0 else self.messages / self.seconds


def read_times(consumer, messages: int, batch_size: int, started: float) -> ReadTimes:
    """How long an assigned confluent-kafka consumer takes to read `messages` messages, counted from
    `started` (a time.perf_counter() taken before it was assigned)."""
    seen = 0
    first_message_seconds = None
    while seen < messages:
        # consume() waits for num_messages or the timeout: never ask for more than is left, and
        # ask for the first message alone, to know when the stream began.
        wanted = 1 if first_message_seconds is None else min(batch_size, messages - seen)
        batch = consumer.consume(num_messages=wanted, timeout=5)
        if not batch:
            raise RuntimeError(f"read {seen} of {messages} messages before the stream went quiet")
        seen += len(batch)
        if first_message_seconds is None:
            first_message_seconds = time.perf_counter() - started
    return ReadTimes(messages, time.perf_counter() - started, first_message_seconds)


def produce_kafka_python(bootstrap: str, topic: str, messages: int, value: bytes, acks: str,
                         api_version: tuple[int, int] | None = None) -> float:
    """Seconds one kafka-python producer takes to write `messages` copies of `value` and have them
    acknowledged; raises if any was refused."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks), linger_ms=5,
                             batch_size=256 * 1024, api_version=api_version)
    started = time.perf_counter()
    futures = [producer.send(topic, value=value, key=str(i).encode()) for i in range(messages)]
    producer.flush()
    elapsed = time.perf_counter() - started
    refused = [f for f in futures if f.failed()]
    if refused:
        raise RuntimeError(f"{len(refused)} messages refused (first error: {refused[0].exception})")
    producer.close()
    return elapsed


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, messages: int) -> float:
    """Seconds one kafka-python consumer takes to read `messages` messages of the topic's first
    `partitions` partitions from the beginning."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000,
                             fetch_max_bytes=52428800)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    started = time.perf_counter()
    seen = 0
    for _ in consumer:
        seen += 1
        if seen >= messages:
            break
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed
