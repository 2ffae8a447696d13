"""Topic ids as Kafka prints them (partition.metadata, admin answers, the CLI)."""
from __future__ import annotations

import base64
import uuid


def topic_id_to_kafka_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_kafka_string(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
