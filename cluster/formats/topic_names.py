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


def illegal_name_message(name: str) -> str:
    """Kafka's Topic.validate messages, for a name topic_name_error refuses."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
    return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
