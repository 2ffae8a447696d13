"""What the Spark tests share: a local SparkSession, and skipping (or failing in CI) without Spark.

On a user's machine without pyspark or java the Spark tests skip and say why; in CI
(CI=true) the same absence fails them, so that a missing install step cannot pass green.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def require_spark() -> None:
    """Skip (fail in CI) unless pyspark, pyarrow and a java runtime are installed."""
    missing = []
    for module in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing.append("java")
    if not missing:
        return
    reason = (f"Spark tests need {', '.join(missing)}: pip install -e '.[spark]' and a Java 17+ runtime "
              "(./scripts/dev-setup installs both)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def spark_environment() -> dict:
    """Python workers import spark_jobs from this checkout, with this interpreter."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}


def local_session(app_name: str):
    """A local[2] session with the kraftwerk source registered; times shown in UTC."""
    require_spark()
    os.environ.update(spark_environment())
    from pyspark.sql import SparkSession

    import spark_jobs

    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_jobs.register(spark)
    return spark


def module_fixtures(app_name: str, node_config: dict | None = None):
    """A test module's `spark` (local[2]) and `kraftwerk` (3 nodes) fixtures, each started once per module:
    `spark, kraftwerk = module_fixtures("my-tests")`."""
    @pytest.fixture(scope="module")
    def spark():
        session = local_session(app_name)
        yield session
        session.stop()

    @pytest.fixture(scope="module")
    def kraftwerk():
        from cluster.launch import Cluster

        require_spark()
        with Cluster(nodes=3, node_config=node_config) as running:
            yield running

    return spark, kraftwerk


def produce(bootstrap: str, topic: str, records, config: dict | None = None) -> None:
    """Write (partition, key, value, headers, timestamp_ms) tuples with an acks=all producer."""
    from confluent_kafka import Producer

    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **(config or {})})
    for partition, key, value, headers, timestamp in records:
        producer.produce(topic, value, key, partition=-1 if partition is None else partition,  # -1: partitioner
                         headers=headers, timestamp=timestamp or 0,
                         on_delivery=lambda error, _m: failures.append(error) if error else None)
        producer.poll(0)
    producer.flush()
    assert failures == []


def leaders_of(cluster, topic: str) -> dict[int, int]:
    """Partition -> the node leading it, as the nodes themselves report."""
    return {p["partition"]: node["node_id"] for node in cluster.replica_states().values()
            for p in node["partitions"] if p["topic"] == topic and p["leader"] == node["node_id"]}


def assert_read_from_leaders(cluster, topic: str, leaders_before: dict[int, int]) -> None:
    """Each partition's consumer fetches were served by its leader, and by no other node.

    A leadership that moved during the read (a node fenced on a loaded machine) lets both the
    old and the new leader have served it.
    """
    leaders_after = leaders_of(cluster, topic)
    served = cluster.client_fetch_stats()
    for partition, leader in leaders_before.items():
        allowed = {leader, leaders_after.get(partition, leader)}
        servers = {node for node, partitions in served.items() if (topic, partition) in partitions}
        assert servers and servers <= allowed, f"{topic}-{partition} led by {allowed} was served by {servers}"
