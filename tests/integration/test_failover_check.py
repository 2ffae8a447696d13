"""The failover checker: 60 s of acks=all writes and a consumer group under random faults and
membership changes lose nothing acknowledged and meet no unexpected error; transactions stay
all-or-nothing under random faults."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cluster.tools.failover_check import FAULTS, FailoverCheck
from cluster.tools.failover_report import render
from cluster.launch import Cluster

CHECK_SECONDS = float(os.environ.get("KRAFTWERK_FAILOVER_CHECK_SECONDS", "60"))
CONTROLLER_CHECK_SECONDS = 25
CHECKOUT = Path(__file__).resolve().parents[2]
# This checkout's CLI: an installed `kraftwerk` script may belong to another checkout.
CLI = [sys.executable, "-m", "cluster.cli"]


def kraftwerk(*args: str, data_dir: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--data-dir", str(data_dir)], cwd=CHECKOUT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(CHECK_SECONDS * 3 + 240)
def test_random_faults_and_membership_changes_lose_nothing_and_surprise_no_client(tmp_path, capsys):
    """A seeded schedule of every fault, with a node added and rebalanced onto and a node removed, and
    members of a consumer group restarting: nothing acknowledged is lost, the group reads every
    message, no client sees an error failover does not explain and no process logs at ERROR."""
    # Kafka's own initial rebalance delay: members joining during it were once refused.
    with Cluster(nodes=4, data_dir=tmp_path / "cluster",
                 node_config={"group.initial.rebalance.delay.ms": "3000"}) as cluster:
        report = FailoverCheck(cluster, duration_s=CHECK_SECONDS, seed=24, partitions=6, rebalance=True,
                               hold_s=(1.5, 3.5), gap_s=(0.5, 1.5)).run()
    with capsys.disabled():  # the fault log and unavailability windows belong in every run's output
        Console(width=140).print(render(report))
        print(f"cluster data and logs: {tmp_path / 'cluster'}")
    assert not report.lost, f"acknowledged but lost: {report.lost[:20]}"
    assert not report.duplicated, f"written more than once: {report.duplicated[:20]}"
    assert not report.misplaced, f"not at their acknowledged offsets: {report.misplaced[:20]}"
    assert not report.reordered, f"out of order: {report.reordered[:20]}"
    assert report.in_sync_at_end and not report.unread
    assert {f.fault for f in report.faults} == set(FAULTS), report.faults
    assert all(f.healed_s is not None and f.error is None for f in report.faults), report.faults
    assert [c.change.split(" ")[0] for c in report.changes] == ["add", "restart", "remove", "restart"]
    assert not [c for c in report.changes if c.error], report.changes
    assert report.acknowledged > 1000
    assert report.acknowledged_after_last_heal > 0, "writes did not recover after the last fault"
    group = report.group
    assert group.undelivered == [] and group.phantom == [] and group.committed_past_end == []
    assert group.caught_up and group.reads >= report.acknowledged
    assert report.unexpected_errors == []
    assert report.cluster_errors == []
    assert report.ok


CONSUMER_GROUP_CHECK_SECONDS = float(os.environ.get("KRAFTWERK_CONSUMER_GROUP_CHECK_SECONDS", "25"))


@pytest.mark.timeout(CONSUMER_GROUP_CHECK_SECONDS * 3 + 240)
def test_a_consumer_protocol_group_reads_everything_under_random_faults(tmp_path, capsys):
    """Members of a KIP-848 consumer group read the checked topic while nodes (the group's coordinator
    and the partitions' leaders among them) are killed, stopped, paused and isolated: the group reads
    every acknowledged message, commits nothing past a log's end, and meets no error failover does
    not explain."""
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        report = FailoverCheck(cluster, duration_s=CONSUMER_GROUP_CHECK_SECONDS, seed=11, partitions=6,
                               producers=1, group_protocol="consumer", strategy="",
                               faults=("kill", "stop", "pause", "isolate"), hold_s=(1.5, 3.0),
                               gap_s=(0.5, 1.0)).run()
    with capsys.disabled():
        Console(width=140).print(render(report))
        print(f"cluster data and logs: {tmp_path / 'cluster'}")
    assert not report.lost and not report.duplicated and not report.reordered
    group = report.group
    assert "consumer protocol" in group.strategy
    assert group.undelivered == [] and group.phantom == [] and group.committed_past_end == []
    assert group.caught_up and group.reads >= report.acknowledged > 100
    assert {f.fault for f in report.faults} == {"kill", "stop", "pause", "isolate"}, report.faults
    assert report.unexpected_errors == []
    assert report.cluster_errors == []
    assert report.ok


TRANSACTION_CHECK_SECONDS = float(os.environ.get("KRAFTWERK_TRANSACTION_CHECK_SECONDS", "25"))


@pytest.mark.timeout(TRANSACTION_CHECK_SECONDS * 3 + 240)
def test_transactions_stay_all_or_nothing_under_random_faults(tmp_path, capsys):
    """Transactional writers over two topics, some transactions aborted on purpose, while nodes are
    killed, stopped, paused and isolated (the transactions' coordinators and partition leaders among
    them): a read_committed reader sees every committed transaction whole, once and in order, no
    aborted one, and nothing undecided; no client sees an error failover does not explain."""
    with Cluster(nodes=3, data_dir=tmp_path / "cluster",
                 node_config={"transaction.state.log.num.partitions": "6"}) as cluster:
        report = FailoverCheck(cluster, duration_s=TRANSACTION_CHECK_SECONDS, seed=5, partitions=3, producers=1,
                               group_members=0, transactions=3, faults=("kill", "stop", "pause", "isolate"),
                               hold_s=(1.5, 3.0), gap_s=(0.5, 1.0)).run()
    with capsys.disabled():
        Console(width=140).print(render(report))
        print(f"cluster data and logs: {tmp_path / 'cluster'}")
    audit = report.transactions
    assert audit.problems == [], audit.problems[:20]
    assert audit.strangers == [] and audit.unread == {} and audit.undecided == []
    assert audit.committed > 100 and audit.aborted_on_purpose > 10, audit
    assert {f.fault for f in report.faults} == {"kill", "stop", "pause", "isolate"}, report.faults
    assert all(f.healed_s is not None and f.error is None for f in report.faults), report.faults
    assert report.writes_ok and report.in_sync_at_end
    assert report.unexpected_errors == []
    assert report.cluster_errors == []
    assert report.ok


@pytest.mark.timeout(CONTROLLER_CHECK_SECONDS * 3 + 240)
def test_controller_faults_lose_no_acknowledged_topic_creation_nor_message(tmp_path, capsys):
    """Three controllers: the active one is killed, paused and isolated between the nodes' faults
    while an admin creates topics: every acknowledged creation exists afterwards, every acknowledged
    message is there once and in order, and no client sees an error failover does not explain."""
    with Cluster(nodes=3, controllers=3, data_dir=tmp_path / "cluster") as cluster:
        report = FailoverCheck(cluster, duration_s=CONTROLLER_CHECK_SECONDS, seed=7, partitions=3, producers=1,
                               group_members=0, faults=("kill",), controller_faults=True,
                               hold_s=(1.5, 3.0), gap_s=(0.5, 1.0)).run()
    with capsys.disabled():
        Console(width=140).print(render(report))
    controller_faults = {f.fault for f in report.faults} - {"kill"}
    assert controller_faults == {"controller-kill", "controller-pause", "controller-isolate"}, report.faults
    assert all(f.healed_s is not None and f.error is None for f in report.faults), report.faults
    creations = report.creations
    assert creations.listed and creations.missing == [] and len(creations.acknowledged) > 10, creations
    assert report.writes_ok and report.in_sync_at_end
    assert report.unexpected_errors == []
    assert report.cluster_errors == []
    assert report.ok


@pytest.mark.timeout(300)
def test_check_failover_command_against_a_detached_cluster(tmp_path):
    data_dir = tmp_path / "cluster"
    started = kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", data_dir=data_dir)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        result = kraftwerk("check-failover", "--duration", "12", "--seed", "11", "--faults", "kill,pause",
                           "--hold", "1-3", "--transactions", "--transactional-ids", "2", data_dir=data_dir,
                           timeout=240)
        print(result.stdout)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "seed 11" in result.stdout and "PASS" in result.stdout
        assert "kill node" in result.stdout or "pause node" in result.stdout
        assert "lost 0, duplicated 0, at another offset 0, out of order 0" in result.stdout
        assert "0 acknowledged messages never read, 0 reads the log does not hold" in result.stdout
        assert "transactions of 2 transactional ids" in result.stdout
        assert "committed lost 0, partly visible 0, duplicated 0" in " ".join(result.stdout.split())
        refused = kraftwerk("check-failover", "--faults", "kill,flood", data_dir=data_dir)
        assert refused.returncode == 1 and "unknown faults ['flood']" in refused.stderr, refused.stderr
    finally:
        stopped = kraftwerk("down", data_dir=data_dir)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
