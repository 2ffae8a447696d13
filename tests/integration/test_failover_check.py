"""The failover checker: 60 s of acks=all writes under random faults loses nothing acknowledged."""
from __future__ import annotations

import os
import subprocess

import pytest
from rich.console import Console

from cluster.failover_check import FAULTS, FailoverCheck, render
from cluster.launcher import Cluster
from tests.integration.test_cli import KRAFTWERK, kraftwerk

CHECK_SECONDS = float(os.environ.get("KRAFTWERK_FAILOVER_CHECK_SECONDS", "60"))


@pytest.mark.timeout(CHECK_SECONDS * 3 + 120)
def test_random_faults_lose_no_acknowledged_message(tmp_path, capsys):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        report = FailoverCheck(cluster, duration_s=CHECK_SECONDS).run()
    with capsys.disabled():  # the fault log and unavailability windows belong in every run's output
        Console(width=120).print(render(report))
    assert not report.lost and not report.duplicated and not report.misplaced and not report.reordered
    assert report.ok
    assert len(report.faults) >= 3 and len({f.fault for f in report.faults}) >= 2, report.faults
    assert {f.fault for f in report.faults} <= set(FAULTS)
    assert all(f.healed_s is not None for f in report.faults)
    assert report.acknowledged > 1000
    assert report.acknowledged_after_last_heal > 0, "writes did not recover after the last fault"


@pytest.mark.timeout(300)
def test_check_failover_command_against_a_detached_cluster(tmp_path):
    data_dir = tmp_path / "cluster"
    kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", data_dir=data_dir)
    try:
        result = subprocess.run([*KRAFTWERK, "check-failover", "--duration", "12", "--seed", "11",
                                 "--faults", "kill,pause", "--data-dir", str(data_dir)],
                                capture_output=True, text=True, timeout=240)
        print(result.stdout)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "seed 11" in result.stdout and "PASS" in result.stdout
        assert "kill node" in result.stdout or "pause node" in result.stdout
    finally:
        kraftwerk("down", data_dir=data_dir)
