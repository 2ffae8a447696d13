"""What a consumer group member is subscribed to: topic names, and a topic regex resolved against metadata.

SubscribedTopicRegex is RE2 syntax, as Kafka's (it compiles them with com.google.re2j): compiled
here with google-re2, and a topic matches when the whole name matches, as Java's
Matcher.matches(). Internal topics (names starting "__") never match a regex, as Kafka's
resolution leaves them out.
"""
from __future__ import annotations

import functools
import uuid

import re2


class InvalidRegex(ValueError):
    pass


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str):
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise InvalidRegex(str(exc)) from None


def matching_topics(pattern: str, topic_names) -> set[str]:
    try:
        compiled = compile_regex(pattern)
    except InvalidRegex:
        return set()
    return {name for name in topic_names if not name.startswith("__") and compiled.fullmatch(name)}


def member_topic_names(member, topics: dict) -> set[str]:
    """The existing topics a member is subscribed to. topics: the metadata image's topics by name."""
    names = {name for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex:
        names |= matching_topics(member.subscribed_topic_regex, topics)
    return names


def member_topic_ids(member, topics: dict) -> set[uuid.UUID]:
    return {topics[name].topic_id for name in member_topic_names(member, topics)}


def subscribed_partition_counts(group, topics: dict) -> dict[str, tuple[uuid.UUID, int]]:
    """Id and partition count of every existing topic some member of the group is subscribed to: when
    they change (a topic created, deleted, re-created or grown), the group's assignment must be computed again."""
    names: set[str] = set()
    for member in group.members.values():
        names |= member_topic_names(member, topics)
    return {name: (topics[name].topic_id, len(topics[name].partitions)) for name in sorted(names)}
