"""A normal start, use and stop writes nothing at WARNING or ERROR in any process's log."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer

from cluster.launch import Cluster
from tests.integration.test_cli import KRAFTWERK, kraftwerk
from tests.integration.test_cli import data_dir  # noqa: F401 (fixture: kills what a failed test left running)


def complaints(data_dir: Path) -> dict[str, list[str]]:
    """Log file -> its WARNING, ERROR and traceback lines, and Python's warnings (a coroutine never
    awaited, say: "sys:1: RuntimeWarning: ...")."""
    found = {}
    for log in sorted((data_dir / "logs").glob("*.log")):
        lines = [line for line in log.read_text().splitlines()
                 if " WARNING " in line or " ERROR " in line or line.startswith("Traceback") or "Warning: " in line]
        if lines:
            found[log.name] = lines
    return found


def produce_and_consume_in_a_group(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(30):
        producer.send(topic, f"m{i}".encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="readers", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    read = []
    for record in consumer:
        read.append(record.value)
        if len(read) == 30:
            break
    consumer.commit()
    consumer.close()
    assert sorted(read) == sorted(f"m{i}".encode() for i in range(30))


def test_cli_up_use_down_logs_nothing_wrong(data_dir):  # noqa: F811
    kraftwerk("up", "--nodes", "3", "--port", "0", "--detach", data_dir=data_dir)
    kraftwerk("topic", "create", "orders", "--partitions", "6", data_dir=data_dir)
    bootstrap = json.loads((data_dir / "cluster.json").read_text())["bootstrap_servers"]
    produce_and_consume_in_a_group(bootstrap, "orders")
    kraftwerk("down", data_dir=data_dir)
    assert complaints(data_dir) == {}
    stopped = subprocess.run([*KRAFTWERK, "status", "--data-dir", str(data_dir)], capture_output=True, text=True,
                             timeout=60)
    assert stopped.returncode == 1
    assert stopped.stderr == f"Error: the cluster in {data_dir} is not running (kraftwerk up starts it)\n"


def test_cluster_exit_and_node_stop_log_nothing_wrong(tmp_path):
    data_dir = tmp_path / "cluster"
    with Cluster(nodes=3, data_dir=data_dir) as cluster:
        cluster.create_topic("orders", partitions=6, replication_factor=3)
        produce_and_consume_in_a_group(cluster.bootstrap_servers, "orders")
        cluster.stop_node(2)
        assert complaints(data_dir) == {}
        cluster.restart_node(2)
        assert cluster.wait_in_sync("orders")
    assert complaints(data_dir) == {}
