"""Group configs (KIP-848, KIP-932): their names, defaults and Kafka's GroupConfig validation.

Both process kinds need them: the controller validates a GROUP config resource before it writes
its ConfigRecords, a node reads the values (node.group_configs) and describes them.
"""
from __future__ import annotations

import re

# Group config name -> the broker config that supplies its default.
GROUP_CONFIG_DEFAULTS_FROM_BROKER: dict[str, str] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
}
GROUP_CONFIG_FIXED_DEFAULTS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
}
GROUP_CONFIG_NAMES = tuple(sorted([*GROUP_CONFIG_DEFAULTS_FROM_BROKER, *GROUP_CONFIG_FIXED_DEFAULTS]))

# Integer group config -> (its lowest value, the broker configs bounding it), as Kafka's GroupConfig.
_INT_BOUNDS: dict[str, tuple[int, str, str]] = {
    "consumer.session.timeout.ms": (1, "group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": (1, "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": (1, "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": (1, "group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": (1000, "group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
}
# A session must outlast the heartbeat interval of the same group type.
_SESSION_OVER_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                           ("share.session.timeout.ms", "share.heartbeat.interval.ms"))
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
# Java's Duration.parse form that share.auto.offset.reset's by_duration:<duration> takes, not negative.
_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:(T)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?", re.IGNORECASE)

# Kafka's ConfigEntry.ConfigType ids, as DescribeConfigs v3+ answers them.
CONFIG_TYPE_STRING, CONFIG_TYPE_INT = 2, 3


class GroupConfigError(ValueError):
    """A group config Kafka answers with INVALID_CONFIG; the message is Kafka's."""


def group_config_type(name: str) -> int:
    return CONFIG_TYPE_INT if name in _INT_BOUNDS else CONFIG_TYPE_STRING


def group_config_defaults(broker_config) -> dict[str, str]:
    """Every group config's value for a group that sets none of its own."""
    values = {name: broker_config.get(default) for name, default in GROUP_CONFIG_DEFAULTS_FROM_BROKER.items()}
    values.update(GROUP_CONFIG_FIXED_DEFAULTS)
    return values


def validate_group_configs(own: dict[str, str], broker_config) -> None:
    """Check a group's own configs as they would stand after a change (Kafka's GroupConfig.validate):
    known names only, each value of its type and within the broker's bounds, each session timeout
    over its heartbeat interval. Raises GroupConfigError."""
    for name in own:
        if name not in GROUP_CONFIG_NAMES:
            raise GroupConfigError(f"Unknown group config name: {name}")
    values = {**group_config_defaults(broker_config), **own}
    numbers = {name: _parsed_int(name, values[name], low) for name, (low, _, _) in _INT_BOUNDS.items()}
    for name, (_, lowest, highest) in _INT_BOUNDS.items():
        if numbers[name] < broker_config.get_int(lowest):
            raise GroupConfigError(f"{name} must be greater than or equal to {lowest}")
        if numbers[name] > broker_config.get_int(highest):
            raise GroupConfigError(f"{name} must be less than or equal to {highest}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if numbers[session] <= numbers[heartbeat]:
            raise GroupConfigError(f"{session} must be greater than {heartbeat}")
    _check_auto_offset_reset(values["share.auto.offset.reset"])
    level = values["share.isolation.level"]
    if level not in ISOLATION_LEVELS:
        raise GroupConfigError(f"Invalid value {level} for configuration share.isolation.level: "
                               f"String must be one of: {', '.join(ISOLATION_LEVELS)}")


def _parsed_int(name: str, value: str, lowest: int) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d+", text) or not -2**31 <= int(text) < 2**31:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
    if int(text) < lowest:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {lowest}")
    return int(text)


def _check_auto_offset_reset(value: str) -> None:
    strategy = value.strip().lower()
    if strategy in ("latest", "earliest"):
        return
    if strategy.startswith("by_duration:") and duration_to_ms(strategy[len("by_duration:"):]) is not None:
        return
    raise GroupConfigError(f"Invalid value {value} for configuration share.auto.offset.reset: Invalid value "
                           f"`{value}` for configuration share.auto.offset.reset. The value must be either "
                           f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


def duration_to_ms(text: str) -> int | None:
    """A non-negative ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS; a comma may
    stand for the point) in milliseconds, the fraction truncated; None when it is not one. What
    validates share.auto.offset.reset's by_duration: is what reads it."""
    match = _ISO_DURATION.fullmatch(text.strip())
    if match is None:
        return None
    days, time_part, hours, minutes, seconds, fraction = match.groups()
    if not any((days, hours, minutes, seconds)) or (time_part and not any((hours, minutes, seconds))):
        return None  # "P", "PT", "P1DT": Java refuses them
    whole_seconds = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60 + int(seconds or 0)
    return whole_seconds * 1000 + int((fraction or "").ljust(3, "0")[:3])
