"""Whether two processes see the same process ids, so that one can watch the other's exit."""
from __future__ import annotations

import os
from pathlib import Path


def process_table_id() -> str | None:
    """This kernel's boot and our pid namespace: processes with equal ids name each other by pid.

    None where /proc does not tell (not Linux): then nobody watches by pid.
    """
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot_id}/{namespace}"
