"""A Spark standalone cluster (a master and a worker JVM from the pyspark installation, executors in
their own processes) runs jobs against a 3-node kraftwerk cluster, each task reading its
partition from the node that leads it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.launch import Cluster
from tests.integration.spark_support import (
    REPO, assert_read_from_leaders, leaders_of, produce, require_spark, spark_environment,
)

SPARK_READY_TIMEOUT_S = 120


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def start_daemon(args: list[str], log_path: Path, ready: str) -> tuple[subprocess.Popen, re.Match]:
    """Start a Spark daemon in its own process group; returns it and the match of `ready` in its log."""
    log = open(log_path, "w+b")
    process = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, **spark_environment(), "SPARK_HOME": str(spark_home())})
    with open(log_path, "rb") as reader:
        found = _follow(reader, process, re.compile(ready.encode()))
    if found is None:
        stop_daemon(process)
        raise RuntimeError(f"{args[0]} did not start: {log_path.read_text(errors='replace')[-2000:]}")
    return process, found


def _follow(reader, process, pattern):
    """Read the log as it grows until pattern appears or the process exits."""
    import select
    import time

    text = b""
    deadline = time.monotonic() + SPARK_READY_TIMEOUT_S
    pidfd = os.pidfd_open(process.pid)
    try:
        while time.monotonic() < deadline:
            text += reader.read()
            found = pattern.search(text)
            if found or process.poll() is not None:
                return found
            select.select([pidfd], [], [], 0.1)  # wakes at once if the daemon dies
    finally:
        os.close(pidfd)
    return None


def stop_daemon(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A master and one worker (2 cores) on loopback; yields the master URL."""
    require_spark()
    work = tmp_path_factory.mktemp("spark-standalone")
    master, found = start_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                                  "--webui-port", "0"], work / "master.log",
                                 r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
    url = found.group(1).decode()
    try:
        worker, _ = start_daemon(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                                  "--webui-port", "0", "--cores", "2", "--memory", "2g", "--work-dir",
                                  str(work / "work"), url], work / "worker.log", r"Successfully registered with master")
        try:
            yield url
        finally:
            stop_daemon(worker)
    finally:
        stop_daemon(master)


@pytest.fixture(scope="module")
def kraftwerk():
    require_spark()
    with Cluster(nodes=3) as running:
        yield running


def submit(master_url: str, *args: str) -> subprocess.CompletedProcess:
    """spark-submit to the standalone master: two executors of one core each, both up before tasks start."""
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", master_url,
               "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
               "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
               "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
               "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
               "--conf", f"spark.executorEnv.PYTHONPATH={spark_environment()['PYTHONPATH']}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **spark_environment(), "SPARK_HOME": str(spark_home())})


def test_executors_in_their_own_processes_read_partitions_from_their_leaders(standalone, kraftwerk):
    kraftwerk.create_topic("standalone", partitions=6, replication_factor=3)
    produce(kraftwerk.bootstrap_servers, "standalone",
            [(i % 6, None, f"v{i}".encode(), None, None) for i in range(6000)])
    led_by = leaders_of(kraftwerk, "standalone")
    assert sorted(set(led_by.values())) == [1, 2, 3]

    done = submit(standalone, str(REPO / "tests" / "integration" / "spark_standalone_job.py"),
                  kraftwerk.bootstrap_servers, "standalone")

    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = result["rows"]
    assert sorted((p, o) for p, o, _pid in rows) == sorted((i % 6, i // 6) for i in range(6000))
    executor_of = {p: pid for p, _o, pid in rows}
    assert all(pid > 0 and pid != result["driver_pid"] for pid in executor_of.values())
    assert len(set(executor_of.values())) == 2  # two executor processes shared the partitions
    assert_read_from_leaders(kraftwerk, "standalone", led_by)


def test_an_example_job_runs_on_the_standalone_cluster_as_a_module(standalone, kraftwerk):
    done = subprocess.run([sys.executable, "-m", "spark_jobs.partition_report", "standalone", "--master", standalone,
                           "--bootstrap-servers", kraftwerk.bootstrap_servers],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **spark_environment(), "SPARK_HOME": str(spark_home())})

    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "topic standalone: 6000 records in 6 partitions with data"
    led_by = leaders_of(kraftwerk, "standalone")
    assert [line.split("\t")[:5] + line.split("\t")[-1:] for line in lines[2:]] == [
        [str(p), "1000", str(sum(len(f"v{i}") for i in range(p, 6000, 6))), "0", "999", str(led_by[p])]
        for p in range(6)]
