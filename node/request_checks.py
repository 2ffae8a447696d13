"""Requests decoded and checked against their schema before a handler sees them.

kafka.protocol's decoders are lenient where Kafka's generated readers are strict. They read a
length of -1 as null for every array, string and bytes field, whether or not the schema lets that
field be null at that version, and they cut a string or bytes field short where it runs past the
end of the frame. Kafka's readers refuse both ("non-nullable field ... was serialized as null", a
buffer underflow): the request fails to parse and the connection is closed. `decode` does the same,
so that a handler never meets a null where its schema promises a list or a string: it decodes the
body, checks that the decoding ended inside the frame, and walks the request for nulls the schema
forbids, raising MalformedRequest for any of these (the connection closes with one INFO line).

Kafka's readers also refuse a string longer than 32767 bytes ("string field ... had invalid
length"), which only a flexible version's compact string can carry; kafka.protocol reads it, and a
handler would meet an id it cannot store (a transactional id or a group id is written with a 16-bit
length). `decode` refuses those too.

The check for each (request, version) is built once from the schema, compiled to one function that
reads only the fields that can be wrong: non-nullable arrays, strings and bytes, and the structs
that hold them. A request with nothing to check pays one cached look-up; a Produce or a Fetch pays
an `is None` per topic and per top-level field, a small part of what its decoding costs.

Kafka logs the closing of such a connection at ERROR; a bad client is not the node's error, so
here it is one INFO line.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from node.client_connection import MalformedRequest

# A check returns what is wrong with the first field that is null where its schema forbids it (or,
# in a flexible version, a string too long), or None when every field it looks at is well formed.
Check = Callable[[Any], "str | None"]

# Simple types a decoder turns into None from a negative length. (A zero UUID also decodes as
# None, but it is a value Kafka gives meaning to, not a null.)
_NULLABLE_ON_THE_WIRE = frozenset({"string", "bytes", "records"})
# The longest string Kafka reads (Short.MAX_VALUE bytes of UTF-8); a string of at most a quarter as
# many characters is short enough whatever they are, so only longer ones are encoded to count.
MAX_STRING_BYTES = 0x7FFF
_SHORT_ENOUGH_CHARS = MAX_STRING_BYTES // 4


def decode(request_class, body: memoryview, version: int):
    """The request in `body` (the frame after its header), decoded and checked."""
    decoder, check = _plan(request_class, version)
    try:
        request, end = decoder(body, 0)
    except Exception as exc:
        raise MalformedRequest(f"cannot decode {request_class.name} v{version}: {exc}") from exc
    if end > len(body):
        raise MalformedRequest(f"{request_class.name} v{version} runs {end - len(body)} bytes past its frame")
    if check is not None:
        problem = check(request)
        if problem is not None:
            raise MalformedRequest(f"{request_class.name} v{version}: {problem}")
    return request


@lru_cache(maxsize=None)
def _plan(request_class, version: int) -> tuple[Callable, Check | None]:
    """The decoder kafka.protocol compiles for this version (it returns where the decoding ended
    as well as the request; `request_class.decode` drops the former) and the check of its schema."""
    flexible = request_class.flexible_version_q(version)
    decoder = request_class._struct.compiled_decode_from(version, compact=flexible, tagged=flexible,
                                                         data_class=request_class[None])
    return decoder, struct_check(request_class._struct, version, flexible)


def struct_check(struct, version: int, flexible: bool = False) -> Check | None:
    """The check of a request's fields at `version` (`flexible`: a version with compact strings,
    whose lengths are checked too), or None when none of them can be wrong.

    It is compiled to one straight-line function (as kafka.protocol compiles its decoders), so
    that a well-formed request costs an attribute read and an `is None` (and, for a string of a
    flexible version, a `len`) per field looked at."""
    body = _struct_lines(struct, version, flexible, "request", "", "    ", 0)
    if not body:
        return None
    source = "\n".join(["def check(request):", *body, "    return None"])
    namespace: dict = {}
    exec(compile(source, f"<request check {struct.name} v{version}>", "exec"), namespace)
    return namespace["check"]


def _struct_lines(struct, version: int, flexible: bool, item: str, path: str, indent: str,
                  depth: int) -> list[str]:
    lines = []
    for field in struct._fields:
        if field.for_version_q(version):
            lines += _field_lines(field, version, flexible, item, path, indent, depth)
    return lines


def _too_long(value: str, indent: str, where: str) -> str:
    """The line refusing a string `value` (not None) longer than Kafka reads."""
    problem = f"string field {where} is longer than {MAX_STRING_BYTES} bytes"
    return (f"{indent}if len({value}) > {_SHORT_ENOUGH_CHARS} and len({value}.encode()) > {MAX_STRING_BYTES}: "
            f"return {problem!r}")


def _field_lines(field, version: int, flexible: bool, item: str, path: str, indent: str,
                 depth: int) -> list[str]:
    where = path + field.name
    value = f"v{depth}"
    # A tagged field the client left out reads as its default, which may be null.
    may_be_null = field.nullable_for_version_q(version) or field.tagged_field_q(version)
    null_field = f"non-nullable field {where} is null"
    null_check = [] if may_be_null else [f"{indent}if {value} is None: return {null_field!r}"]
    # (what is inside a field that may be null is looked at only when it is there)
    guard, inner_indent = ([f"{indent}if {value} is not None:"], indent + "    ") if may_be_null else ([], indent)
    if field.is_struct_array():
        element = f"e{depth}"
        inner = _struct_lines(field.array_of, version, flexible, element, where + ".", inner_indent + "    ",
                              depth + 1)
        loop = [*guard, f"{inner_indent}for {element} in {value}:", *inner] if inner else []
    elif field.is_struct():
        inner = _struct_lines(field, version, flexible, value, where + ".", inner_indent, depth + 1)
        loop = [*guard, *inner] if inner else []
    elif field.is_array():
        # Kafka's arrays of strings never hold a null, whatever the array's own nullability.
        nullable_elements = field.array_of.type_str in _NULLABLE_ON_THE_WIRE
        null_element = f"non-nullable field {where}[] is null"
        loop = ([f"{indent}if {value} is not None and None in {value}: return {null_element!r}"]
                if nullable_elements else [])
        if flexible and field.array_of.type_str == "string":
            element = f"e{depth}"
            loop += [f"{indent}for {element} in {value} or ():", _too_long(element, indent + "    ", where + "[]")]
    elif field.type_str in _NULLABLE_ON_THE_WIRE:
        loop = [*guard, _too_long(value, inner_indent, where)] if flexible and field.type_str == "string" else []
    else:
        return []
    if not null_check and not loop:
        return []
    return [f"{indent}{value} = {item}.{field.name}", *null_check, *loop]
