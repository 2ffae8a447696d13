"""AlterClientQuotas as ClientQuotaRecords, checked as Kafka's ClientQuotaControlManager checks them.

An entity is user and/or client-id, or ip alone; a name of None is the entity type's default.
Each entry is answered on its own (INVALID_REQUEST with Kafka's message for an empty or badly
combined entity, an unknown key, a value not above 0, a fraction for an integral key, a key given
twice); the entries that pass are written together. A value that would not change writes nothing.
"""
from __future__ import annotations

import ipaddress
import math

from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage, quota_entity
from controller.topics import MAX_RECORDS_PER_USER_OP, Outcome, refuse_too_large

USER, CLIENT_ID, IP = "user", "client-id", "ip"
# Kafka's QuotaConfig: the keys of user/client-id entities and of IP entities, with their types.
CLIENT_KEYS = {"producer_byte_rate": "LONG", "consumer_byte_rate": "LONG", "request_percentage": "DOUBLE",
               "controller_mutation_rate": "DOUBLE"}
IP_KEYS = {"connection_creation_rate": "INT"}
_TYPE_LIMITS = {"SHORT": (2**15 - 1, "a SHORT"), "INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}


class QuotaRefused(Exception):
    pass


async def alter_client_quotas(image: MetadataImage, entries: list) -> Outcome:
    """entries: [{"entity": [[type, name or None], ...], "ops": [[key, value, remove], ...]}]."""
    outcome = Outcome()
    answered: dict = {}
    for entry in entries:
        pairs = [tuple(pair) for pair in entry["entity"]]
        key = quota_entity(pairs)
        alterations, duplicate_key = {}, None
        for name, value, remove in entry["ops"]:
            if name in alterations:
                duplicate_key = name
            alterations[name] = None if remove else value
        if key in answered or duplicate_key is not None:
            # (Kafka answers a duplicate key with this message too: its check of the entity runs after)
            answered[key] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {_entity_text(pairs)}")
            continue
        try:
            outcome.records += _records(image, pairs, alterations)
            answered[key] = (ErrorCode.NONE, None)
        except QuotaRefused as exc:
            answered[key] = (ErrorCode.INVALID_REQUEST, str(exc))
    if len(outcome.records) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    for entity, (code, message) in answered.items():
        outcome.results.append({"entity": [list(pair) for pair in entity], "error_code": int(code),
                                "error_message": message})
    return outcome


def _records(image: MetadataImage, pairs: list, alterations: dict) -> list:
    keys = _keys_of(_checked_entity(pairs))
    current = image.client_quotas.get(quota_entity(pairs), {})
    entity = [{"entity_type": kind, "entity_name": name} for kind, name in pairs]
    records = []
    for name, value in alterations.items():
        if value is None:
            if name in current:
                records.append(("ClientQuotaRecord", {"entity": entity, "key": name, "value": 0.0, "remove": True}))
            continue
        _check_value(keys, name, value)
        if current.get(name) != value:
            records.append(("ClientQuotaRecord", {"entity": entity, "key": name, "value": value, "remove": False}))
    return records


def _checked_entity(pairs: list) -> dict:
    if not pairs:
        raise QuotaRefused("Invalid empty client quota entity")
    entity: dict = {}
    for kind, name in pairs:
        if kind in entity:
            raise QuotaRefused(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRefused(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaRefused(f"Empty {kind} not supported")
        entity[kind] = name
    return entity


def _keys_of(entity: dict) -> dict:
    if IP in entity:
        if USER in entity or CLIENT_ID in entity:
            raise QuotaRefused("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        if not _valid_ip(entity[IP]):
            raise QuotaRefused(f"{entity[IP]} is not a valid IP or resolvable host.")
        return IP_KEYS
    return CLIENT_KEYS


def _valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name == "localhost"


def _check_value(keys: dict, name: str, value: float) -> None:
    kind = keys.get(name)
    if kind is None:
        raise QuotaRefused(f"Invalid configuration key {name}")
    if not value > 0.0:
        raise QuotaRefused(f"Quota {name} must be greater than 0")
    if kind == "DOUBLE":
        return
    limit, words = _TYPE_LIMITS[kind]
    if value > limit:
        raise QuotaRefused(f"Proposed value for {name} is too large for {words}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise QuotaRefused(f"{name} cannot be a fractional value.")


def _entity_text(pairs: list) -> str:
    """As Kafka's ClientQuotaEntity prints itself."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{kind}={name}" for kind, name in pairs) + "})"
