"""Fixtures shared by the integration tests; a test module may define its own `cluster` with a wider scope."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # the kraftwerk_cluster plugin is tested by running pytest on a sample suite

SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture
def cluster(tmp_path):
    """A running 3-node cluster on free ports; every process is killed when the test ends."""
    from cluster.launch import Cluster

    with Cluster(nodes=3, data_dir=tmp_path / "kraftwerk") as running:
        yield running


@pytest.fixture
def shared_dir() -> Path:
    """The `shared` directory beside this checkout (reference data and Kafka-written fixtures)."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"{SHARED_DIR} is absent: these tests need the shared fixtures beside the checkout")
    return SHARED_DIR
