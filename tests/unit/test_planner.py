"""The rebalance planner and rack-aware placement: balance, fewest moves, racks, draining a node."""
from __future__ import annotations

import pytest

from cluster.tools.planner import PlannerError, balance_plan, drain_plan, leader_counts, replica_counts
from controller.placement import assign_replicas, rack_alternated


def placed(nodes: list[int], partitions: int, factor: int, racks=None, topic: str = "t") -> dict:
    return {(topic, i): r for i, r in enumerate(assign_replicas(nodes, partitions, factor, racks=racks))}


def spread(counts: dict[int, int]) -> int:
    return max(counts.values()) - min(counts.values())


def replica_moves(before: dict, moves: dict) -> int:
    """Replicas that land on a node that did not hold them: the data a plan copies."""
    return sum(len(set(replicas) - set(before[key])) for key, replicas in moves.items())


@pytest.mark.parametrize("partitions, factor, old, new", [(12, 3, 3, 5), (7, 2, 2, 3), (30, 3, 4, 7), (1, 1, 1, 4)])
def test_a_grown_cluster_ends_even_in_replicas_and_leaders(partitions, factor, old, new):
    before = placed(list(range(1, old + 1)), partitions, factor)
    nodes = list(range(1, new + 1))
    after = {**before, **balance_plan(before, nodes)}
    assert spread(replica_counts(after, nodes)) <= 1
    assert spread(leader_counts(after, nodes)) <= 1
    assert all(sorted(set(r)) == sorted(r) and len(r) == factor for r in after.values())


def test_the_plan_moves_only_what_evening_out_needs():
    before = placed([1, 2, 3], 12, 3)
    moves = balance_plan(before, [1, 2, 3, 4, 5])
    # 36 replicas over 5 nodes: the new nodes need 7 each, and nothing else moves.
    assert replica_moves(before, moves) == 14
    assert balance_plan({**before, **moves}, [1, 2, 3, 4, 5]) == {}


def test_a_balanced_cluster_needs_no_plan():
    before = placed([1, 2, 3], 9, 2)
    assert balance_plan(before, [1, 2, 3]) == {}


def test_leaders_are_evened_by_reordering_without_moving_data():
    before = {("t", i): [1, 2, 3] for i in range(6)}
    moves = balance_plan(before, [1, 2, 3])
    assert all(sorted(r) == [1, 2, 3] for r in moves.values())
    assert leader_counts({**before, **moves}, [1, 2, 3]) == {1: 2, 2: 2, 3: 2}


def test_moves_never_put_a_partition_on_fewer_racks():
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    before = placed([1, 2, 3], 12, 3, racks=racks)
    nodes = [1, 2, 3, 4, 5, 6]
    after = {**before, **balance_plan(before, nodes, racks)}
    assert all(len({racks[r] for r in replicas}) == 3 for replicas in after.values())
    assert spread(replica_counts(after, nodes)) <= 1


def test_placement_puts_each_partition_on_distinct_racks():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assert rack_alternated(racks) == [1, 3, 5, 2, 4, 6]
    assignment = assign_replicas([1, 2, 3, 4, 5, 6], 12, 3, racks=racks)
    assert all(len({racks[r] for r in replicas}) == 3 for replicas in assignment)
    assert spread(leader_counts({("t", i): r for i, r in enumerate(assignment)}, list(racks))) == 0


def test_placement_without_racks_is_kafkas_striping():
    assert assign_replicas([1, 2, 3], 4, 3) == [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]]


def test_draining_a_node_keeps_racks_and_replica_counts():
    racks = {1: "a", 2: "b", 3: "a", 4: "b"}
    before = placed([1, 2, 3, 4], 8, 2, racks=racks)
    moves = drain_plan(before, 1, [1, 2, 3, 4], racks)
    after = {**before, **moves}
    assert all(1 not in replicas and len(replicas) == 2 for replicas in after.values())
    assert all(len({racks[r] for r in replicas}) == 2 for replicas in after.values())
    assert set(moves) == {key for key, replicas in before.items() if 1 in replicas}


def test_draining_refuses_when_the_replication_factor_cannot_be_kept():
    before = placed([1, 2, 3], 3, 3)
    with pytest.raises(PlannerError, match="topic t has replication factor 3, which 2 remaining nodes cannot keep"):
        drain_plan(before, 2, [1, 2, 3])
