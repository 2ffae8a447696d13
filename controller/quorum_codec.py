"""The quorum's messages (controller/raft/messages.py) as msgpack values on the control channel.

An envelope travels as the `raft` control op's `envelope` argument: [source, destination,
correlation id, message type, [fields in declaration order]]. Log entries are [offset, epoch,
batch bytes, control]. Decoding checks every field's type, so a malformed message from a peer is
refused as a bad request and never reaches the state machine.
"""
from __future__ import annotations

import dataclasses

from cluster.formats.control import BadControlRequest
from cluster.formats.errors import ErrorCode
from controller.raft.log import LogEntry
from controller.raft.messages import (
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest, EndQuorumEpochResponse,
    EpochEndOffset, Envelope, FetchRequest, FetchResponse, SnapshotId, VoteRequest, VoteResponse,
)

MESSAGE_TYPES = {cls.__name__: cls for cls in (
    VoteRequest, VoteResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse, EndQuorumEpochRequest,
    EndQuorumEpochResponse, FetchRequest, FetchResponse)}


def encode_envelope(envelope: Envelope) -> list:
    body = envelope.body
    return [envelope.source, envelope.destination, envelope.correlation_id, type(body).__name__,
            [_encode_field(getattr(body, f.name)) for f in dataclasses.fields(body)]]


def _encode_field(value):
    if isinstance(value, ErrorCode):
        return int(value)
    if isinstance(value, LogEntry):
        return [value.offset, value.epoch, value.payload, value.control]
    if isinstance(value, (EpochEndOffset, SnapshotId)):
        return list(dataclasses.astuple(value))
    if isinstance(value, tuple):
        return [_encode_field(item) for item in value]
    return value


def decode_envelope(value) -> Envelope:
    if not isinstance(value, list) or len(value) != 5:
        raise BadControlRequest("raft envelope: expected [source, destination, correlation id, type, fields]")
    source, destination, correlation_id, type_name, values = value
    if not all(_is_int(item) for item in (source, destination, correlation_id)):
        raise BadControlRequest("raft envelope: source, destination and correlation id must be integers")
    cls = MESSAGE_TYPES.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise BadControlRequest(f"raft envelope: unknown message type {type_name!r}")
    fields = dataclasses.fields(cls)
    if not isinstance(values, list) or len(values) != len(fields):
        raise BadControlRequest(f"raft {type_name}: expected {len(fields)} fields")
    try:
        body = cls(*(_decode_field(f.name, f.type, item) for f, item in zip(fields, values)))
    except (TypeError, ValueError) as exc:
        raise BadControlRequest(f"raft {type_name}: {exc}") from None
    return Envelope(source, destination, correlation_id, body)


def _decode_field(name: str, annotation: str, value):
    if name == "error":
        return ErrorCode(_int(name, value))
    if name == "records":
        return tuple(_log_entry(item) for item in _list(name, value))
    if name == "preferred_successors":
        return tuple(_int(name, item) for item in _list(name, value))
    if name == "diverging_epoch":
        return None if value is None else EpochEndOffset(*(_int(name, item) for item in _pair(name, value)))
    if name == "snapshot_id":
        return None if value is None else SnapshotId(*(_int(name, item) for item in _pair(name, value)))
    if annotation == "str":
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string")
        return value
    if annotation == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a boolean")
        return value
    return _int(name, value)


def _log_entry(value) -> LogEntry:
    if not isinstance(value, list) or len(value) != 4:
        raise TypeError("a log entry is [offset, epoch, batch, control]")
    offset, epoch, payload, control = value
    if not isinstance(payload, bytes) or not isinstance(control, bool):
        raise TypeError("a log entry's batch must be bytes and its control flag a boolean")
    return LogEntry(_int("offset", offset), _int("epoch", epoch), payload, control)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(name: str, value) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer")
    return value


def _list(name: str, value) -> list:
    if not isinstance(value, list):
        raise TypeError(f"{name} must be a list")
    return value


def _pair(name: str, value) -> list:
    if not isinstance(value, list) or len(value) != 2:
        raise TypeError(f"{name} must be a pair of integers")
    return value
