"""Reading topics to their end with confluent-kafka (librdkafka) at an isolation level, for tests."""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def read_all(cluster, topic: str, isolation: str, partitions: int = 2, expected: int | None = None,
             timeout_s: float = 10.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a consumer at `isolation` reads to the end."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found, at_end = [], set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    if len(at_end) == partitions and (expected is None or len(found) >= expected):
                        break
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            found.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    return sorted(found)
