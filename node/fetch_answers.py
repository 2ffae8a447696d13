"""Fetch answers of the flexible versions (12+) written with struct, each record set a piece of
its own, for the common case: no partition carries a tagged field (a diverging epoch or a
current leader) and no leader's endpoint is named. node/apis/fetch.py builds every other answer
with kafka.protocol (node.spliced_response).

Every follower's parked Fetch is answered on each acks=all write, so its cost is part of every
write's: building kafka.protocol structs, encoding them and cutting the body at the record sets'
markers costs several times what writing the bytes here does. tests/unit/test_fetch_response.py
checks, for every version, that these bytes are exactly what kafka.protocol encodes.
"""
from __future__ import annotations

import struct

from cluster.formats.records import write_compact_string, write_uvarint
from node.fetch_sessions import FIRST_TOPIC_ID_VERSION
from node.spliced_response import EncodedResponse

FIRST_FLEXIBLE_VERSION = 12

# By the schema's order: throttle time, error code, session id.
_ANSWER_FIELDS = struct.Struct(">ihi")
# Partition index, error code, high watermark, last stable offset, log start offset.
_PARTITION_FIELDS = struct.Struct(">ihqqq")
# Aborted transactions null (0), preferred read replica -1.
_NO_ABORTED_NO_PREFERRED = b"\x00" + struct.pack(">i", -1)
_NO_PREFERRED = struct.pack(">i", -1)
# An aborted transaction: producer id, first offset, no tagged fields.
_ABORTED = struct.Struct(">qqx")


def writable(fetches: list, version: int) -> bool:
    """Whether fetch_answer_pieces can write this answer."""
    return version >= FIRST_FLEXIBLE_VERSION and all(
        f.leader is None and f.diverging is None and _topic_key(f, version) is not None for f in fetches)


def fetch_answer_pieces(fetches: list, version: int, session_id: int) -> EncodedResponse:
    """The Fetch answer carrying `fetches` (node.apis.fetch.PartitionFetch), grouped by topic in
    the order they come, as kafka.protocol encodes it at `version`; check `writable` first."""
    by_topic: dict = {}
    for fetch in fetches:
        by_topic.setdefault(_topic_key(fetch, version), []).append(fetch)
    pieces: list = []
    out = bytearray(_ANSWER_FIELDS.pack(0, 0, session_id))
    write_uvarint(len(by_topic) + 1, out)
    for topic, partitions in by_topic.items():
        if version >= FIRST_TOPIC_ID_VERSION:
            out += topic.bytes
        else:
            write_compact_string(topic, out)
        write_uvarint(len(partitions) + 1, out)
        for fetch in partitions:
            out = _write_partition(fetch, out, pieces)
        out.append(0)  # the topic's tagged fields
    out.append(0)  # the answer's
    pieces.append(bytes(out))
    return EncodedResponse(pieces)


def _write_partition(fetch, out: bytearray, pieces: list) -> bytearray:
    """Writes one partition; its records become a piece of their own. Returns the buffer to go on with."""
    stable = fetch.last_stable_offset if fetch.last_stable_offset >= 0 else fetch.high_watermark
    out += _PARTITION_FIELDS.pack(fetch.request.partition, fetch.error, fetch.high_watermark, stable,
                                  fetch.log_start_offset)
    if fetch.aborted is None:
        out += _NO_ABORTED_NO_PREFERRED
    else:
        write_uvarint(len(fetch.aborted) + 1, out)
        for producer_id, first_offset in fetch.aborted:
            out += _ABORTED.pack(producer_id, first_offset)
        out += _NO_PREFERRED
    records = fetch.records
    write_uvarint(len(records) + 1, out)
    if records:
        pieces.append(bytes(out))
        pieces.append(records)
        out = bytearray()
    out.append(0)  # the partition's tagged fields
    return out


def _topic_key(fetch, version: int):
    return fetch.topic_id if version >= FIRST_TOPIC_ID_VERSION else fetch.topic
