"""Faults a node can be told to act out while its process lives on: isolation, latency, errors.

Isolation behaves like a network partition on a TCP connection: nothing is refused, it just
does not arrive. Requests from an isolated party are held (not answered) until the node heals,
and this node's own traffic to an isolated party (heartbeats and metadata fetches to the
controller, replica fetches from a peer) waits the same way. Parties are "controller",
"clients" (anything that is not a peer node) and peer node ids.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections import deque

import kafka.errors
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from cluster.formats.errors import ErrorCode

log = logging.getLogger(__name__)

CONTROLLER = "controller"
CLIENTS = "clients"
# Replica fetchers identify themselves with this client id; see node/replica_fetcher.py.
_PEER_CLIENT_ID = re.compile(r"replica-(\d+)$")


@functools.lru_cache(maxsize=1024)  # asked on every request; a node sees few client ids
def party_of(client_id: str | None) -> str | int:
    """Who sent a request on the Kafka listener: a peer node's id, or "clients"."""
    match = _PEER_CLIENT_ID.match(client_id or "")
    return int(match.group(1)) if match else CLIENTS


def error_code_by_name(name: str | int) -> int:
    """A Kafka error code from its number or its protocol name (NOT_LEADER_OR_FOLLOWER, ...)."""
    if isinstance(name, int) or str(name).lstrip("-").isdigit():
        return int(name)
    wanted = str(name).upper()
    if wanted in ErrorCode.__members__:
        return int(ErrorCode[wanted])
    for error in vars(kafka.errors).values():
        if isinstance(error, type) and issubclass(error, kafka.errors.BrokerResponseError) \
                and getattr(error, "message", None) == wanted:
            return error.errno
    raise ValueError(f"unknown Kafka error {name!r}")


class Faults:
    def __init__(self):
        self.isolated: set[str | int] = set()
        self.delay_ms = 0
        self._injected: dict[int, deque[int]] = {}
        self._changed = asyncio.Condition()

    # --- isolation ---

    async def isolate(self, parties: list[str | int]) -> None:
        async with self._changed:
            self.isolated |= set(parties)
            log.warning("isolated from %s", ", ".join(map(str, sorted(self.isolated, key=str))))

    async def heal(self) -> None:
        """End isolation, latency and pending error injections."""
        async with self._changed:
            self.isolated.clear()
            self.delay_ms = 0
            self._injected.clear()
            self._changed.notify_all()
        log.warning("healed: every fault cleared")

    def reachable(self, party: str | int) -> bool:
        return party not in self.isolated

    async def wait_reachable(self, party: str | int) -> None:
        """Returns at once normally; while isolated from party, holds the caller until healed."""
        if not self.reachable(party):
            async with self._changed:
                await self._changed.wait_for(lambda: self.reachable(party))

    # --- latency and errors ---

    def delay(self, delay_ms: int) -> None:
        self.delay_ms = max(0, int(delay_ms))

    def inject_error(self, api_key: int, error_code: int, count: int = 1) -> None:
        self._injected.setdefault(api_key, deque()).extend([error_code] * count)

    def take_injected_error(self, api_key: int) -> int | None:
        queue = self._injected.get(api_key)
        if not queue:
            return None
        code = queue.popleft()
        if not queue:
            del self._injected[api_key]
        return code

    def holds_response(self, party: str | int) -> bool:
        """Whether before_response would hold an answer to party (callers skip the await if not)."""
        return bool(self.delay_ms) or not self.reachable(party)

    async def before_response(self, party: str | int) -> None:
        if self.delay_ms:
            # The event loop's timers run on a clock cached at the start of each iteration, in
            # whole milliseconds, so a timer can fire up to a millisecond before the latency asked
            # for has passed; the second sleep makes up the remainder.
            deadline = time.monotonic() + self.delay_ms / 1000
            while (remaining := deadline - time.monotonic()) > 0:
                await asyncio.sleep(remaining)
        await self.wait_reachable(party)

    def describe(self) -> dict:
        return {
            "isolated_from": sorted(map(str, self.isolated)),
            "delay_ms": self.delay_ms,
            "injected_errors": [[api_key, list(codes)] for api_key, codes in self._injected.items()],
        }


# --- error responses shaped like the request ---

# Fields that name what an entry is about; an error response copies them from the request.
_SAME_MEANING = ({"name", "topic", "topic_name"}, {"index", "partition", "partition_index", "partition_id"},
                 {"topic_id"}, {"group_id"}, {"member_id"}, {"group_instance_id"}, {"key"})


def error_response(response_class, request, version: int, error_code: int):
    """A response of this API and version whose every error code is error_code.

    Built from the response schema, mirroring the request's topics and partitions (and its
    group, member and ids) so that the client can match every entry; the request itself is
    never executed, so a failed Produce wrote nothing.
    """
    values = _mirror(response_class.fields, request, error_code)
    if "error_code" in values and _entries_carry_errors(response_class.fields, values):
        values["error_code"] = 0  # e.g. Fetch's top-level code means a fetch-session error
    return response_class[version](**values)


def _entries_carry_errors(fields: dict, values: dict) -> bool:
    """True when some list entry, at any depth, has an error code of its own."""
    for name, field in fields.items():
        if isinstance(field, StructArrayField) and values.get(name):
            if "error_code" in field.fields:
                return True
            if any(_entries_carry_errors(field.fields, _values_of(item, field.fields)) for item in values[name]):
                return True
    return False


def _values_of(item, fields: dict) -> dict:
    return {name: getattr(item, name, None) for name in fields}


def _mirror(fields: dict, source, error_code: int) -> dict:
    values = {}
    for name, field in fields.items():
        if name == "error_code":
            values[name] = error_code
        elif isinstance(field, StructArrayField):
            values[name] = [field.data_class(**_mirror(field.fields, item, error_code))
                            for item in _matching_array(name, source)]
        elif not isinstance(field, StructField):
            value = _matching_value(name, source)
            if value is not None:
                values[name] = value
            elif name == "high_watermark" or name.endswith("offset"):
                values[name] = -1  # Kafka's "no offset" in every error answer
    return values


def _struct_arrays(source) -> dict:
    fields = getattr(source, "fields", None) or {}
    return {name: getattr(source, name, None) for name, field in fields.items()
            if isinstance(field, StructArrayField)}


def _matching_array(name: str, source) -> list:
    """The request's list that a response list answers: same name, else its only list of structs."""
    arrays = {key: value for key, value in _struct_arrays(source).items() if value}
    if name in arrays:
        return arrays[name]
    return next(iter(arrays.values())) if len(arrays) == 1 else []


def _matching_value(name: str, source):
    fields = getattr(source, "fields", None) or {}
    for names in _SAME_MEANING:
        if name in names:
            for other in names & set(fields):
                return getattr(source, other, None)
    return None
