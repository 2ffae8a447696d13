"""The KafkaJS programs of tests/clients/js, which `scripts/dev-setup` installs KafkaJS for
(npm ci), and whether they can run here."""
from __future__ import annotations

import shutil
from pathlib import Path

JS_DIR = Path(__file__).resolve().parents[1] / "clients" / "js"


def kafkajs_missing() -> str | None:
    """Why KafkaJS cannot run here, or None when it can."""
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").exists():
        return "KafkaJS is not installed (scripts/dev-setup runs npm ci in tests/clients/js)"
    return None
