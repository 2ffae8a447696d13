"""What tests read back from a running cluster besides messages: a group's committed offsets
and what its nodes logged at ERROR."""
from __future__ import annotations

from kafka import KafkaAdminClient


def committed(cluster, group: str) -> dict[int, int]:
    """The group's committed offset per partition (of any topic), as OffsetFetch answers it."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        return {tp.partition: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def node_errors(cluster) -> dict[int, list[str]]:
    """Each node's ERROR lines so far; read them before stop() to judge what clients caused."""
    return {node.node_id: [line for line in node.log_path.read_text(errors="replace").splitlines()
                           if " ERROR " in line]
            for node in cluster.nodes.values()}
