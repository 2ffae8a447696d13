"""What the nodes of a running cluster logged at ERROR, for tests that hold clients to a clean log."""
from __future__ import annotations


def node_errors(cluster) -> dict[int, list[str]]:
    """Each node's ERROR lines so far; read them before stop() to judge what clients caused."""
    return {node.node_id: [line for line in node.log_path.read_text(errors="replace").splitlines()
                           if " ERROR " in line]
            for node in cluster.nodes.values()}
