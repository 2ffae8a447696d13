"""Reassignment plans that even out a cluster, or empty one node, with as few moves as possible.

Pure functions over an assignment, {(topic, partition): [replica, ...]} with the preferred
leader first, as ListPartitionReassignments and kafka-reassign-partitions.sh see it. They
return only the partitions whose replica list changes, in the same form (cluster.tools.reassignment_plan
reads and writes it as Kafka's JSON).

- Replicas: a replica moves only from a node above its share (ceil of replicas / nodes) to one
  below it, so every move is one that evening out needs. A move never lowers the number of racks
  a partition spans (Kafka's rack-aware placement keeps replicas on distinct racks).
- Leaders: without moving data, each partition's replicas are reordered so that the node that
  leads it after a preferred leader election evens out the leaderships too (±1 per node).
"""
from __future__ import annotations

Assignment = dict[tuple[str, int], list[int]]
Racks = dict[int, str | None]


class PlannerError(ValueError):
    """No plan can do what was asked, with the reason."""


def balance_plan(assignment: Assignment, nodes: list[int], racks: Racks | None = None) -> Assignment:
    """The moves that leave every node with an equal share (±1) of replicas and of preferred leaders."""
    if not nodes:
        raise PlannerError("there are no nodes to place replicas on")
    planned = {key: list(replicas) for key, replicas in assignment.items()}
    _even_replicas(planned, sorted(nodes), racks or {})
    _even_leaders(planned, sorted(nodes))
    return changed_partitions(assignment, planned)


def drain_plan(assignment: Assignment, node: int, nodes: list[int], racks: Racks | None = None) -> Assignment:
    """The moves that take every replica off node, each to the least loaded remaining node that keeps
    the partition's racks; PlannerError (and no plan) when a partition cannot keep its replica count."""
    remaining = sorted(n for n in nodes if n != node)
    racks = racks or {}
    planned = {key: list(replicas) for key, replicas in assignment.items()}
    load = replica_counts(planned, remaining)
    for (topic, partition), replicas in sorted(planned.items()):
        if node not in replicas:
            continue
        candidates = [n for n in remaining if n not in replicas]
        if not candidates:
            raise PlannerError(f"topic {topic} has replication factor {len(replicas)}, which "
                               f"{len(remaining)} remaining nodes cannot keep (partition {partition})")
        best = min(candidates, key=lambda n: (not _keeps_racks(replicas, node, n, racks), load[n], n))
        replicas[replicas.index(node)] = best
        load[best] += 1
    return changed_partitions(assignment, planned)


def replica_counts(assignment: Assignment, nodes: list[int]) -> dict[int, int]:
    counts = dict.fromkeys(nodes, 0)
    for replicas in assignment.values():
        for replica in replicas:
            counts[replica] = counts.get(replica, 0) + 1
    return counts


def leader_counts(assignment: Assignment, nodes: list[int]) -> dict[int, int]:
    """Preferred leaders per node: the first replica of each partition."""
    counts = dict.fromkeys(nodes, 0)
    for replicas in assignment.values():
        if replicas:
            counts[replicas[0]] = counts.get(replicas[0], 0) + 1
    return counts


def changed_partitions(before: Assignment, after: Assignment) -> Assignment:
    return {key: replicas for key, replicas in after.items() if replicas != before.get(key)}


def _keeps_racks(replicas: list[int], leaving: int, arriving: int, racks: Racks) -> bool:
    """True when replacing leaving by arriving does not put the partition on fewer racks."""
    after = [arriving if r == leaving else r for r in replicas]
    return len({racks.get(r) for r in after}) >= len({racks.get(r) for r in replicas})


def _even_replicas(planned: Assignment, nodes: list[int], racks: Racks) -> None:
    """Move one replica at a time from the most to the least loaded node until they differ by at most one."""
    load = replica_counts(planned, nodes)
    while True:
        move = _next_replica_move(planned, nodes, load, racks)
        if move is None:
            return
        key, source, target = move
        replicas = planned[key]
        replicas[replicas.index(source)] = target
        load[source] -= 1
        load[target] += 1


def _next_replica_move(planned: Assignment, nodes: list[int], load: dict[int, int], racks: Racks):
    """(partition, from, to) between the most unequal pair of nodes that have a movable replica, or None."""
    by_load = sorted(load, key=lambda n: (load[n], n))
    for source in reversed(by_load):
        for target in (n for n in by_load if n in nodes):
            if load[source] - load[target] <= 1:
                break
            for key in sorted(planned):
                replicas = planned[key]
                if source in replicas and target not in replicas and _keeps_racks(replicas, source, target, racks):
                    return key, source, target
    return None


def _even_leaders(planned: Assignment, nodes: list[int]) -> None:
    """Bring another replica of a partition to the front while its first replica leads at least two
    more partitions than that replica does."""
    leaders = leader_counts(planned, nodes)
    improved = True
    while improved:
        improved = False
        for key in sorted(planned):
            replicas = planned[key]
            if not replicas:
                continue
            first = replicas[0]
            lightest = min(replicas[1:], key=lambda r: (leaders[r], r), default=None)
            if lightest is not None and leaders[first] - leaders[lightest] > 1:
                replicas.remove(lightest)
                replicas.insert(0, lightest)
                leaders[first] -= 1
                leaders[lightest] += 1
                improved = True
