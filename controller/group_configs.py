"""ConfigRecords for GROUP config resources (KIP-848, KIP-932), checked as Kafka's controller checks them.

A group's configs can be set whether or not the group exists. Each change is checked against the
group's configs as they would stand after it (Kafka's ControllerConfigurationValidator hands
GroupConfig.validate the whole resulting set), within the bounds of this controller's broker
configs (group.consumer.min.session.timeout.ms and the like).
"""
from __future__ import annotations

from cluster.formats.errors import ErrorCode
from cluster.formats.group_configs import GroupConfigError, validate_group_configs
from cluster.formats.image import CONFIG_RESOURCE_GROUP, MetadataImage

# IncrementalAlterConfigs' config operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class GroupConfigRefused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def altered_group_records(image: MetadataImage, broker_config, group_id: str, changes: list[dict]) -> list:
    """IncrementalAlterConfigs of a group: each change is a SET or a DELETE (no group config is a list)."""
    current = _checked_name(image, group_id)
    wanted = dict(current)
    for change in changes:
        name, op = change["name"], change["op"]
        if op in (APPEND, SUBTRACT):
            raise GroupConfigRefused(ErrorCode.INVALID_CONFIG, f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} "
                                                               f"to key {name} because its type is not LIST.")
        if op == SET:
            if change["value"] is None:
                raise GroupConfigRefused(ErrorCode.INVALID_CONFIG, f"Null value not supported for group configs: "
                                                                   f"{name}")
            wanted[name] = change["value"]
        elif op == DELETE:
            wanted.pop(name, None)
        else:
            raise GroupConfigRefused(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}")
    return _records(group_id, current, wanted, broker_config)


def replaced_group_records(image: MetadataImage, broker_config, group_id: str, wanted: dict) -> list:
    """Legacy AlterConfigs of a group: its configs become exactly `wanted`."""
    current = _checked_name(image, group_id)
    nulls = [name for name, value in wanted.items() if value is None]
    if nulls:
        raise GroupConfigRefused(ErrorCode.INVALID_CONFIG, f"Null value not supported for group configs: "
                                                           f"{','.join(nulls)}")
    return _records(group_id, current, dict(wanted), broker_config)


def _checked_name(image: MetadataImage, group_id: str) -> dict[str, str]:
    if not group_id:
        raise GroupConfigRefused(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    return image.configs.get((CONFIG_RESOURCE_GROUP, group_id), {})


def _records(group_id: str, current: dict, wanted: dict, broker_config) -> list:
    try:
        validate_group_configs(wanted, broker_config)
    except GroupConfigError as exc:
        raise GroupConfigRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None
    changed = [(name, value) for name, value in sorted(wanted.items()) if current.get(name) != value]
    removed = [(name, None) for name in sorted(current) if name not in wanted]
    return [("ConfigRecord", {"resource_type": CONFIG_RESOURCE_GROUP, "resource_name": group_id,
                              "name": name, "value": value}) for name, value in changed + removed]
