"""The messages every client round-trip test writes, and the exact comparison it makes."""
from __future__ import annotations

import time
from dataclasses import dataclass

COUNT = 1000


@dataclass(frozen=True)
class Message:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def make_messages(tag: str, count: int = COUNT) -> list[Message]:
    base = int(time.time() * 1000) - 60_000
    messages = []
    for i in range(count):
        headers = ((("seq", str(i).encode()), ("client", tag.encode())) if i % 3 == 0 else ())
        messages.append(Message(f"{tag}-key-{i}".encode(), f"{tag} value {i} ".encode() * (1 + i % 5), headers, base + i))
    return messages


@dataclass(frozen=True)
class Delivered:
    message: Message
    partition: int
    offset: int


@dataclass(frozen=True)
class Consumed:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    partition: int
    offset: int


def assert_read_back_exactly(delivered: list[Delivered], consumed: list[Consumed], partitions: int) -> None:
    assert len(delivered) == len({(d.partition, d.offset) for d in delivered}), "two messages acknowledged at one offset"
    expected = {(d.partition, d.offset): d.message for d in delivered}
    got = {(c.partition, c.offset): c for c in consumed}
    assert len(got) == len(consumed), "a message was read twice"
    assert sorted(got) == sorted(expected)
    for position, message in expected.items():
        record = got[position]
        assert (record.key, record.value, record.headers, record.timestamp) == (
            message.key, message.value, message.headers, message.timestamp), position
    used = {d.partition for d in delivered}
    assert used == set(range(partitions)), f"keys should spread over all partitions, got {sorted(used)}"
    for partition in used:
        offsets = sorted(o for p, o in expected if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} offsets are not dense from 0"


def read_partition(bootstrap: str, topic: str, partition: int = 0) -> list[bytes]:
    """Every value of one partition, read from its start by a kafka-python consumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        consumer.seek_to_beginning()
        return [record.value for record in consumer]
    finally:
        consumer.close()
