"""How a log dir names its partition directories: `<topic>-<partition>`, and
`<topic>-<partition>.<id>-delete` for one being deleted."""
from __future__ import annotations

import re

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
DELETED_DIR_SUFFIX = "-delete"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    match = _PARTITION_DIR.match(name)
    if not match or "." in match.group(2):
        return None
    return match.group(1), int(match.group(2))
