"""Per-group configs (KIP-848, KIP-932): what a GROUP config resource sets, else the broker's default.

Kept as ConfigRecords of resource type GROUP in the metadata log, as Kafka keeps them, so every
node reads the same value for a group whichever coordinates it or leads its partitions.
"""
from __future__ import annotations

from cluster.formats.image import CONFIG_RESOURCE_GROUP

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


def group_config(broker, group_id: str) -> dict[str, str]:
    """Every group config of the group, its own values over the defaults."""
    values = {name: broker.config.get(default) for name, default in GROUP_CONFIG_DEFAULTS_FROM_BROKER.items()}
    values.update(GROUP_CONFIG_FIXED_DEFAULTS)
    values.update(broker.image.configs.get((CONFIG_RESOURCE_GROUP, group_id), {}))
    return values


def group_setting(broker, group_id: str, name: str) -> str:
    own = broker.image.configs.get((CONFIG_RESOURCE_GROUP, group_id), {})
    if name in own:
        return own[name]
    if name in GROUP_CONFIG_FIXED_DEFAULTS:
        return GROUP_CONFIG_FIXED_DEFAULTS[name]
    return broker.config.get(GROUP_CONFIG_DEFAULTS_FROM_BROKER[name])


def group_setting_int(broker, group_id: str, name: str) -> int:
    return int(group_setting(broker, group_id, name))
