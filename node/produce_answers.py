"""Produce answers of versions 3+ written with struct, for the common case: no partition names its
current leader (a tagged field), none carries record errors, and no leader's endpoint is named.
node/apis/produce.py builds every other answer with kafka.protocol.

An acks=all producer gets one answer per write, so its cost is part of every write's: building
kafka.protocol structs and encoding them costs several times what writing the bytes here does,
the check that they can be written here included.
tests/unit/test_produce_response.py checks, for every version, that these bytes are what
kafka.protocol encodes.
"""
from __future__ import annotations

import struct

from cluster.formats.records import write_compact_string, write_uvarint
from node.spliced_response import EncodedResponse

FIRST_WRITTEN_VERSION = 3
FIRST_LOG_START_VERSION = 5
FIRST_ERROR_MESSAGE_VERSION = 8
FIRST_FLEXIBLE_VERSION = 9
FIRST_TOPIC_ID_VERSION = 13

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# Partition index, error code, base offset, log append time.
_PARTITION_FIELDS = struct.Struct(">ihqq")
_LOG_START = struct.Struct(">q")
_NO_THROTTLE = _INT32.pack(0)
# An empty record errors array and a null error message, before the flexible versions.
_NO_RECORD_ERRORS = _INT32.pack(0)
_NULL_STRING = _INT16.pack(-1)


def writable(topics: list, version: int, endpoints: list) -> bool:
    """Whether produce_answer can write this answer (topics as produce.response_of takes them)."""
    return version >= FIRST_WRITTEN_VERSION and not endpoints and all(
        not answer["record_errors"] and answer.get("current_leader") is None
        for _, _, answers in topics for answer in answers)


def produce_answer(topics: list, version: int) -> EncodedResponse:
    """The Produce answer for (topic name, topic id, [partition answers as dicts]) at `version`;
    check `writable` first."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = bytearray()
    _write_count(len(topics), flexible, out)
    for name, topic_id, answers in topics:
        if version >= FIRST_TOPIC_ID_VERSION:
            out += topic_id.bytes
        else:
            _write_string(name, flexible, out)
        _write_count(len(answers), flexible, out)
        for answer in answers:
            _write_partition(answer, version, flexible, out)
        if flexible:
            out.append(0)  # the topic's tagged fields
    out += _NO_THROTTLE
    if flexible:
        out.append(0)  # the answer's tagged fields
    return EncodedResponse([bytes(out)])


def _write_partition(answer: dict, version: int, flexible: bool, out: bytearray) -> None:
    out += _PARTITION_FIELDS.pack(answer["index"], answer["error_code"], answer["base_offset"],
                                  answer["log_append_time_ms"])
    if version >= FIRST_LOG_START_VERSION:
        out += _LOG_START.pack(answer["log_start_offset"])
    if version >= FIRST_ERROR_MESSAGE_VERSION:
        if flexible:
            out.append(1)  # no record errors: a compact array's count + 1
        else:
            out += _NO_RECORD_ERRORS
        _write_nullable_string(answer["error_message"], flexible, out)
    if flexible:
        out.append(0)  # the partition's tagged fields


def _write_count(count: int, flexible: bool, out: bytearray) -> None:
    if flexible:
        write_uvarint(count + 1, out)
    else:
        out += _INT32.pack(count)


def _write_string(text: str, flexible: bool, out: bytearray) -> None:
    if flexible:
        write_compact_string(text, out)
    else:
        encoded = text.encode()
        out += _INT16.pack(len(encoded))
        out += encoded


def _write_nullable_string(text: str | None, flexible: bool, out: bytearray) -> None:
    if text is not None:
        _write_string(text, flexible, out)
    elif flexible:
        out.append(0)
    else:
        out += _NULL_STRING
