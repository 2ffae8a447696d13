"""Kafka's rules for topic names."""
from __future__ import annotations

import re

from cluster.formats.errors import ErrorCode

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str | None) -> ErrorCode | None:
    if not name or name in (".", "..") or len(name) > MAX_NAME_LENGTH or not _LEGAL.fullmatch(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return None
