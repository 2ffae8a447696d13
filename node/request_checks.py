"""Requests decoded and checked against their schema before a handler sees them.

kafka.protocol's decoders are lenient where Kafka's generated readers are strict. They read a
length of -1 as null for every array, string and bytes field, whether or not the schema lets that
field be null at that version, and they cut a string or bytes field short where it runs past the
end of the frame. Kafka's readers refuse both ("non-nullable field ... was serialized as null", a
buffer underflow): the request fails to parse and the connection is closed. `decode` does the same,
so that a handler never meets a null where its schema promises a list or a string: it decodes the
body, checks that the decoding ended inside the frame, and walks the request for nulls the schema
forbids, raising MalformedRequest for any of these (the connection closes with one INFO line).

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

# A check returns the dotted path of the first field that is null where its schema forbids it,
# or None when every field it looks at is well formed.
Check = Callable[[Any], "str | None"]

# Simple types a decoder turns into None from a negative length. (A zero UUID also decodes as
# None, but it is a value Kafka gives meaning to, not a null.)
_NULLABLE_ON_THE_WIRE = frozenset({"string", "bytes", "records"})


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
            raise MalformedRequest(f"{request_class.name} v{version}: non-nullable field {problem} is null")
    return request


@lru_cache(maxsize=None)
def _plan(request_class, version: int) -> tuple[Callable, Check | None]:
    """The decoder kafka.protocol compiles for this version (it returns where the decoding ended
    as well as the request; `request_class.decode` drops the former) and the check of its schema."""
    flexible = request_class.flexible_version_q(version)
    decoder = request_class._struct.compiled_decode_from(version, compact=flexible, tagged=flexible,
                                                         data_class=request_class[None])
    return decoder, struct_check(request_class._struct, version)


def struct_check(struct, version: int) -> Check | None:
    """The check of a request's fields at `version`, or None when none of them can be wrong.

    It is compiled to one straight-line function (as kafka.protocol compiles its decoders), so
    that a well-formed request costs an attribute read and an `is None` per field looked at."""
    body = _struct_lines(struct, version, "request", "", "    ", 0)
    if not body:
        return None
    source = "\n".join(["def check(request):", *body, "    return None"])
    namespace: dict = {}
    exec(compile(source, f"<request check {struct.name} v{version}>", "exec"), namespace)
    return namespace["check"]


def _struct_lines(struct, version: int, item: str, path: str, indent: str, depth: int) -> list[str]:
    lines = []
    for field in struct._fields:
        if field.for_version_q(version):
            lines += _field_lines(field, version, item, path, indent, depth)
    return lines


def _field_lines(field, version: int, item: str, path: str, indent: str, depth: int) -> list[str]:
    where = path + field.name
    value = f"v{depth}"
    # A tagged field the client left out reads as its default, which may be null.
    may_be_null = field.nullable_for_version_q(version) or field.tagged_field_q(version)
    null_check = [] if may_be_null else [f"{indent}if {value} is None: return {where!r}"]
    # (what is inside a field that may be null is looked at only when it is there)
    guard, inner_indent = ([f"{indent}if {value} is not None:"], indent + "    ") if may_be_null else ([], indent)
    if field.is_struct_array():
        element = f"e{depth}"
        inner = _struct_lines(field.array_of, version, element, where + ".", inner_indent + "    ", depth + 1)
        loop = [*guard, f"{inner_indent}for {element} in {value}:", *inner] if inner else []
    elif field.is_struct():
        inner = _struct_lines(field, version, value, where + ".", inner_indent, depth + 1)
        loop = [*guard, *inner] if inner else []
    elif field.is_array():
        # Kafka's arrays of strings never hold a null, whatever the array's own nullability.
        nullable_elements = field.array_of.type_str in _NULLABLE_ON_THE_WIRE
        loop = [f"{indent}if {value} is not None and None in {value}: return {where + '[]'!r}"] if nullable_elements else []
    elif field.type_str in _NULLABLE_ON_THE_WIRE:
        loop = []
    else:
        return []
    if not null_check and not loop:
        return []
    return [f"{indent}{value} = {item}.{field.name}", *null_check, *loop]
