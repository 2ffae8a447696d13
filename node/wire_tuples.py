"""Nested structs of a kafka.protocol message given as plain tuples, which its encoders take as they are.

kafka.protocol's compiled encoder reads a struct array whose first element is a tuple by
position, in the order of the struct's untagged fields for the version being encoded (the
form messages were built in before its data classes). Building a tuple costs a fraction of a
data class instance, whose constructor visits every field of every version, and the replica
round trip of an acks=all write builds such structs for every answer (a Fetch answer per
follower, a Produce answer).

A tuple carries no tagged fields, so a struct with one set (a Fetch partition's diverging epoch
or current leader, say) is built as a data class, and so is every other element of its array:
the encoder picks the form of an array by its first element. tests/unit/test_fetch_response.py
and tests/unit/test_produce_response.py check that each message built this way encodes to the
same bytes as with data classes, for every version used.
"""
from __future__ import annotations

from functools import cache


@cache
def _tagged_names(data_class) -> frozenset[str]:
    return frozenset(name for name, field in data_class._struct.fields.items() if field.tag is not None)


@cache
def _fields(data_class, version: int) -> tuple[tuple[str, object], ...]:
    return tuple((field.name, field.default) for field in data_class._struct.untagged_fields(version))


def struct_array(data_class, version: int, elements: list[dict]) -> list:
    """The struct array `[data_class(**values) for values in elements]` as kafka.protocol encodes it at
    `version`: tuples, unless an element sets a tagged field, which a tuple cannot carry, and then
    data classes for all of them. Fields the version lacks are left out either way."""
    tagged = _tagged_names(data_class)
    if not any(values.keys() & tagged for values in elements):
        return [struct_tuple(data_class, version, values) for values in elements]
    return [data_class(**values) for values in elements]


def struct_tuple(data_class, version: int, values: dict) -> tuple:
    """The struct `data_class(**values)` as the tuple kafka.protocol encodes at `version`; fields
    not given take their defaults, and fields the version lacks are left out."""
    return tuple(values.get(name, default) for name, default in _fields(data_class, version))
