"""Growing and shrinking a running cluster: a node added with the next free id, a node removed
after every replica has moved off it (then unregistered, as `kafka-cluster.sh unregister` does).

Every function takes a running `Cluster` (cluster/launch) and raises ClusterError when it cannot
be done.
"""
from __future__ import annotations

import shutil

from cluster.tools import reassignment
from cluster.tools.errors import ClusterError
from cluster.tools.planner import PlannerError, drain_plan


def add_node(cluster, rack: str | None = None) -> int:
    """Start a node with the next free id in the running cluster; returns its id once it is
    registered, unfenced and caught up. It hosts nothing until topics are created or moved."""
    node_id = max(cluster.nodes, default=0) + 1
    if rack:
        cluster.racks[node_id] = rack
    cluster.launch_node(node_id)
    cluster.node_count = len(cluster.nodes)
    cluster.write_state()
    cluster.wait_ready([node_id])
    return node_id


def remove_node(cluster, node_id: int, throttle_bytes_per_s: int | None = None, timeout: float = 300) -> None:
    """Decommission node_id: move every replica off it (ClusterError, with nothing changed, when a
    topic's replication factor cannot be kept on the other nodes), wait for the moves, stop it,
    unregister it (UnregisterBroker) and delete its data dir."""
    if node_id not in cluster.nodes:
        raise ClusterError(f"node {node_id} is not part of the cluster (nodes: {sorted(cluster.nodes)})")
    try:
        moves = drain_plan(cluster.assignment(), node_id, sorted(cluster.nodes), cluster.racks)
    except PlannerError as exc:
        raise ClusterError(f"cannot remove node {node_id}: {exc}") from None
    reassignment.run_plan(cluster, moves, throttle_bytes_per_s, timeout)
    cluster.stop_node(node_id)
    unregister_node(cluster, node_id)
    node = cluster.forget_node(node_id)
    shutil.rmtree(node.data_dir, ignore_errors=True)
    cluster.write_state()


def unregister_node(cluster, node_id: int) -> None:
    """UnregisterBroker, sent to a node as `kafka-cluster.sh unregister --id` sends it."""
    from kafka import KafkaAdminClient
    from node.apis.unregister_broker import UnregisterBrokerRequest

    others = ",".join(cluster.address(n) for i, n in sorted(cluster.nodes.items()) if i != node_id)
    admin = KafkaAdminClient(bootstrap_servers=others, **cluster.kafka_python_config())
    try:
        # The admin client's own path to the controller, as Kafka's Admin.unregisterBroker takes it.
        request = UnregisterBrokerRequest[0](broker_id=node_id)
        response = admin._manager.run(admin._send_request_to_controller, request)
    finally:
        admin.close()
    if response.error_code:
        raise ClusterError(f"UnregisterBroker of node {node_id}: {response.error_message}")
