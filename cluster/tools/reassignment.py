"""Moving partitions between nodes, as kafka-reassign-partitions.sh does: AlterPartitionReassignments
sent by a real admin client, Kafka's replication throttles around it, and waiting until it is done.

Every function takes a running `Cluster` (cluster/launch) and raises ClusterError when the cluster
refuses.
"""
from __future__ import annotations

from cluster.formats.errors import ErrorCode
from cluster.formats.image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC
from cluster.tools.errors import ClusterError

Moves = dict[tuple[str, int], list[int] | None]


def reassign(cluster, moves: Moves, throttle_bytes_per_s: int | None = None) -> dict[tuple[str, int], str | None]:
    """Move partitions, {(topic, partition): replicas}, through AlterPartitionReassignments as
    kafka-reassign-partitions.sh does (None as the replicas cancels that partition's move).
    Returns, per partition, Kafka's error name if it was refused, else None.

    With throttle_bytes_per_s, every node's leader and follower replication throttles are set to
    it and the moving replicas listed as throttled (Kafka's --throttle); clear_throttles() lifts it."""
    from kafka import KafkaAdminClient, TopicPartition

    if throttle_bytes_per_s is not None:
        throttle_moves(cluster, moves, throttle_bytes_per_s)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, **cluster.kafka_python_config())
    try:
        results = admin.alter_partition_reassignments(
            {TopicPartition(topic, partition): replicas for (topic, partition), replicas in moves.items()})
    finally:
        admin.close()
    return {(tp.topic, tp.partition): None if error is None else ErrorCode(error.errno).name
            for tp, error in results.items()}


def list_reassignments(cluster) -> dict[tuple[str, int], dict]:
    """Partitions being moved: {(topic, partition): {"replicas", "adding_replicas", "removing_replicas"}}."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, **cluster.kafka_python_config())
    try:
        ongoing = admin.list_partition_reassignments()
    finally:
        admin.close()
    return {(tp.topic, tp.partition): moving for tp, moving in ongoing.items()}


def wait_reassigned(cluster, partitions: list[tuple[str, int]] | None = None, timeout: float = 300) -> bool:
    """True once none of partitions (default: any) is being moved; False on timeout. Waits on the
    controller's metadata changes, not by polling."""
    keys = None if partitions is None else [list(p) for p in partitions]
    reply = cluster.control("wait_reassigned", partitions=keys, timeout_ms=int(timeout * 1000), timeout=timeout + 5)
    return reply["settled"]


def start_moves(cluster, moves: Moves, throttle_bytes_per_s: int | None = None) -> None:
    """Reassign as moves says; ClusterError, naming the first partition refused, if any was."""
    refused = {key: error for key, error in reassign(cluster, moves, throttle_bytes_per_s).items() if error}
    if refused:
        (topic, partition), error = sorted(refused.items())[0]
        raise ClusterError(f"the reassignment of {topic}-{partition} was refused: {error}")


def run_plan(cluster, moves: Moves, throttle_bytes_per_s: int | None = None, timeout: float = 300) -> None:
    """Reassign as moves says and wait until every move is complete (lifting a throttle it set)."""
    if not moves:
        return
    start_moves(cluster, moves, throttle_bytes_per_s)
    settled = wait_reassigned(cluster, list(moves), timeout=timeout)
    if throttle_bytes_per_s is not None:
        clear_throttles(cluster)
    if not settled:
        raise ClusterError(f"{len(list_reassignments(cluster))} partitions were still moving after {timeout:.0f}s")


def elect_preferred(cluster, partitions: list[tuple[str, int]]) -> None:
    """The first replica of each moved partition leads it again (ElectLeaders, preferred)."""
    from kafka import KafkaAdminClient

    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, **cluster.kafka_python_config())
    try:
        # Partitions led by their first replica already answer ELECTION_NOT_NEEDED: not a failure.
        admin.elect_leaders(0, by_topic, raise_errors=False)
    finally:
        admin.close()


# --- replication throttles ---

def throttle_moves(cluster, moves: Moves, rate: int) -> None:
    """Kafka's --throttle: rates on every node; leaders throttled on the current replicas, followers on
    the ones being added, appended to what each topic lists already."""
    current = cluster.assignment()
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for (topic, partition), replicas in moves.items():
        existing = current.get((topic, partition), [])
        leaders.setdefault(topic, set()).update(f"{partition}:{r}" for r in existing)
        followers.setdefault(topic, set()).update(f"{partition}:{r}" for r in replicas or () if r not in existing)
    rates = [{"name": f"{side}.replication.throttled.rate", "op": 0, "value": str(rate)}
             for side in ("leader", "follower")]
    resources = [{"resource_type": CONFIG_RESOURCE_BROKER, "resource_name": "", "configs": rates}]
    for topic in leaders:
        resources.append({"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic, "configs": [
            {"name": f"{side}.replication.throttled.replicas", "op": 2, "value": ",".join(sorted(listed))}
            for side, listed in (("leader", leaders[topic]), ("follower", followers[topic])) if listed]})
    _configure(cluster, resources)


def clear_throttles(cluster) -> None:
    """Lift every replication throttle: the rates and each topic's throttled replicas (Kafka's --verify)."""
    def deleted(kind: str) -> list[dict]:
        return [{"name": f"{side}.replication.throttled.{kind}", "op": 1, "value": None}
                for side in ("leader", "follower")]
    resources = [{"resource_type": CONFIG_RESOURCE_BROKER, "resource_name": "", "configs": deleted("rate")}]
    resources += [{"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": topic["name"],
                   "configs": deleted("replicas")} for topic in cluster.status()["topics"]]
    _configure(cluster, resources)


def _configure(cluster, resources: list[dict]) -> None:
    reply = cluster.control("alter_configs", resources=resources)
    refused = [r for r in reply.get("results", ()) if r["error_code"]] or (
        [reply] if reply.get("error_code") else [])
    if refused:
        raise ClusterError(f"cannot set replication throttles: {refused[0]['error_message']}")
