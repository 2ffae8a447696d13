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


def subscribes_to_any(group, names: set[str]) -> bool:
    """Whether a member of the group subscribes to one of these topics (by name or regex), or the
    group's target assignment was computed with one."""
    if any(name in group.subscription_metadata for name in names):
        return True
    return any(not names.isdisjoint(m.subscribed_topic_names) or
               (m.subscribed_topic_regex and matching_topics(m.subscribed_topic_regex, names))
               for m in group.members.values())


class TopicShapes:
    """Every topic's (id, partition count) as last seen, and a version that moves when they change
    (a topic created, deleted, re-created or grown): a consumer group whose subscription was
    resolved at the current version need not be resolved again until a subscription changes."""

    def __init__(self):
        self._shapes: dict[str, tuple[uuid.UUID, int]] | None = None
        self.version = 0

    def refresh(self, topics: dict) -> set[str] | None:
        """The names of the topics whose shape changed since the last call (None: not known, on the
        first); the version moves when there are any. topics: the metadata image's topics by name."""
        shapes = {name: (topic.topic_id, len(topic.partitions)) for name, topic in topics.items()}
        if shapes == self._shapes:
            return set()
        changed = None if self._shapes is None else \
            {name for name in shapes.keys() | self._shapes.keys() if shapes.get(name) != self._shapes.get(name)}
        self._shapes = shapes
        self.version += 1
        return changed
