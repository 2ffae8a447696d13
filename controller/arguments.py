"""Type checks for control-plane request arguments.

Anything that can reach the controller's port can send a frame, so every argument is
checked before it is used: a wrong type is answered as a bad request, never a traceback.
"""
from __future__ import annotations

from typing import Any

from cluster.formats.control import BadControlRequest


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind):
        raise BadControlRequest(f"{what}: expected {_name(kind)}, got {type(value).__name__}")
    return value


def optional(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    return None if value is None else expect(value, kind, what)


def expect_list(value: Any, what: str) -> list:
    return expect(value, (list, tuple), what)


def check_arguments(args: dict, spec: dict[str, type | tuple[type, ...]]) -> None:
    """Every argument named in spec is present with its type (None allowed where spec's type allows it)."""
    for name, kind in spec.items():
        expect(args.get(name), kind, name)


def _name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
