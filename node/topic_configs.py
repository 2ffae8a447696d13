"""Effective topic configs and where each value comes from, as DescribeConfigs reports them."""
from __future__ import annotations

from dataclasses import dataclass

from cluster.formats.config import BROKER_DEFAULTS, TOPIC_CONFIG_DEFAULTS_FROM_BROKER, is_sensitive

# Kafka's ConfigSource ids
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    config_type: int = 0  # Kafka's ConfigEntry.ConfigType; 0 (unknown) where not filled in


def topic_config_entries(broker, topic: str) -> list[ConfigEntry]:
    overrides = broker.image.topic_configs(topic)
    from_broker = broker.config.topic_defaults()
    entries = []
    for name in sorted(set(from_broker) | set(overrides)):
        if name in overrides:
            entries.append(ConfigEntry(name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        else:
            entries.append(ConfigEntry(name, from_broker[name], _default_source(broker, name)))
    return entries


def _default_source(broker, topic_config: str) -> int:
    broker_name = TOPIC_CONFIG_DEFAULTS_FROM_BROKER.get(topic_config)
    if broker_name and broker.config.get(broker_name) != BROKER_DEFAULTS.get(broker_name):
        return STATIC_BROKER_CONFIG
    return DEFAULT_CONFIG


def broker_config_entries(broker) -> list[ConfigEntry]:
    return [
        ConfigEntry(name, None if is_sensitive(name) else value,
                    STATIC_BROKER_CONFIG if value != BROKER_DEFAULTS.get(name) else DEFAULT_CONFIG,
                    read_only=True, sensitive=is_sensitive(name))
        for name, value in sorted(broker.config.values.items())
    ]
