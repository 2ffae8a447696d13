"""What tests read back from a cluster besides messages: a group's committed offsets and what
its processes logged at ERROR."""
from __future__ import annotations

from kafka import KafkaAdminClient


def committed(cluster, group: str) -> dict[int, int]:
    """The group's committed offset per partition (of any topic), as OffsetFetch answers it."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        return {tp.partition: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def logged_errors(cluster) -> dict[str, list[str]]:
    """The ERROR lines of every process of the cluster (controller and nodes), by log name.
    After stop() they include the shutdown, when the cluster's data dir was passed in."""
    return {log.stem: [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line]
            for log in sorted((cluster.data_dir / "logs").glob("*.log"))}
