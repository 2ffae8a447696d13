"""Per-group configs (KIP-848, KIP-932): what a GROUP config resource sets, else the broker's default.

Kept as ConfigRecords of resource type GROUP in the metadata log, as Kafka keeps them, so every
node reads the same value for a group whichever coordinates it or leads its partitions. The
names, defaults and validation are cluster.formats.group_configs, which the controller checks
changes with.
"""
from __future__ import annotations

from cluster.formats.group_configs import (GROUP_CONFIG_DEFAULTS_FROM_BROKER, GROUP_CONFIG_FIXED_DEFAULTS,
                                           GROUP_CONFIG_NAMES, group_config_defaults, group_config_type)
from cluster.formats.image import CONFIG_RESOURCE_GROUP
from node.topic_configs import DEFAULT_CONFIG, ConfigEntry

__all__ = ["GROUP_CONFIG_DEFAULTS_FROM_BROKER", "GROUP_CONFIG_FIXED_DEFAULTS", "GROUP_CONFIG_NAMES",
           "group_config", "group_setting", "group_setting_int", "group_config_entries"]

# Kafka's ConfigSource.GROUP_CONFIG: a value the group sets itself.
DYNAMIC_GROUP_CONFIG = 8


def _own(broker, group_id: str) -> dict[str, str]:
    return broker.image.configs.get((CONFIG_RESOURCE_GROUP, group_id), {})


def group_config(broker, group_id: str) -> dict[str, str]:
    """Every group config of the group, its own values over the defaults."""
    return {**group_config_defaults(broker.config), **_own(broker, group_id)}


def group_setting(broker, group_id: str, name: str) -> str:
    own = _own(broker, group_id)
    if name in own:
        return own[name]
    if name in GROUP_CONFIG_FIXED_DEFAULTS:
        return GROUP_CONFIG_FIXED_DEFAULTS[name]
    return broker.config.get(GROUP_CONFIG_DEFAULTS_FROM_BROKER[name])


def group_setting_int(broker, group_id: str, name: str) -> int:
    return int(group_setting(broker, group_id, name))


def group_config_entries(broker, group_id: str) -> list[ConfigEntry]:
    """Each group config with its value and source, as Kafka's DescribeConfigs answers a GROUP: the
    group's own values are GROUP_CONFIG, the rest DEFAULT_CONFIG (Kafka names no broker synonym)."""
    own = _own(broker, group_id)
    return [ConfigEntry(name, value, DYNAMIC_GROUP_CONFIG if name in own else DEFAULT_CONFIG,
                        config_type=group_config_type(name))
            for name, value in sorted(group_config(broker, group_id).items())]
