"""A response whose large byte fields go to the socket beside the encoded body, never through it.

kafka.protocol's encoder copies every field into one buffer; for a Fetch answer that is every
record byte, several times over. Instead each large field is encoded as a short marker, and
the encoded body is cut at the markers: the pieces in between are the encoder's own bytes,
and each marker (with its length prefix) is replaced by the field's true length prefix and
the field's own buffer, which the server writes with `writelines` (vectored, no join).

Markers are 16 bytes: a random token drawn at start-up, then the field's index. A token
that the rest of an encoded body (names, offsets, error messages) matched by chance would
take 2^96 tries.
"""
from __future__ import annotations

import os
import struct

from cluster.formats.records import write_uvarint

_TOKEN = os.urandom(12)
_INDEX = struct.Struct(">I")
_INT32 = struct.Struct(">i")
MARKER_BYTES = len(_TOKEN) + _INDEX.size
# A flexible version's compact bytes carry length + 1 as an unsigned varint: 17 is one byte.
_COMPACT_MARKER_PREFIX = 1
_PLAIN_MARKER_PREFIX = _INT32.size


def marker(index: int) -> bytes:
    return _TOKEN + _INDEX.pack(index)


class SplicedResponse:
    """A kafka.protocol response built with `marker(i)` in place of `blobs[i]`."""

    __slots__ = ("response", "blobs", "compact")

    def __init__(self, response, blobs: list, compact: bool):
        self.response = response
        self.blobs = blobs
        self.compact = compact

    def encode_pieces(self, version: int) -> list:
        """The encoded body as a list of buffers whose concatenation is what `encode` would give."""
        body = memoryview(self.response.encode(version=version))
        prefix_bytes = _COMPACT_MARKER_PREFIX if self.compact else _PLAIN_MARKER_PREFIX
        pieces = []
        done = 0
        for index, blob in enumerate(self.blobs):
            at = body.obj.find(marker(index), done)
            if at < 0:
                raise ValueError(f"marker {index} not found in the encoded response")
            pieces.append(body[done:at - prefix_bytes])
            pieces.append(_length_prefix(len(blob), self.compact))
            pieces.append(blob)
            done = at + MARKER_BYTES
        pieces.append(body[done:])
        return pieces


def _length_prefix(length: int, compact: bool) -> bytes:
    if not compact:
        return _INT32.pack(length)
    out = bytearray()
    write_uvarint(length + 1, out)
    return bytes(out)


class EncodedResponse:
    """A response already encoded, as the buffers of its body (a kept Metadata answer, a Fetch
    answer written by node.fetch_answers): the listener writes them as a SplicedResponse's pieces."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list):
        self.pieces = pieces

    def encode_pieces(self, version: int) -> list:
        return self.pieces
