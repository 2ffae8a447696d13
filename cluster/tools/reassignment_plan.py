"""Reassignment plans in the JSON of Kafka's kafka-reassign-partitions.sh.

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3, 1]}, ...]}

Each partition may also carry Kafka's `log_dirs` (one per replica); only "any" is meaningful
with one log dir per node, so other values are refused rather than ignored.
"""
from __future__ import annotations

import json

Moves = dict[tuple[str, int], list[int]]


class PlanError(ValueError):
    """A plan file that is not a reassignment plan, with what is wrong with it."""


def read_plan(text: str) -> Moves:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != 1:
        raise PlanError('expected {"version": 1, "partitions": [...]}')
    partitions = document.get("partitions")
    if not isinstance(partitions, list) or not partitions:
        raise PlanError('"partitions" must be a non-empty list')
    moves: Moves = {}
    for entry in partitions:
        key, replicas = _move(entry)
        if key in moves:
            raise PlanError(f"partition {key[0]}-{key[1]} appears more than once")
        moves[key] = replicas
    return moves


def _move(entry) -> tuple[tuple[str, int], list[int]]:
    if not isinstance(entry, dict):
        raise PlanError(f"each partition must be an object, got {entry!r}")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
        raise PlanError(f"each partition needs a \"topic\" string and a \"partition\" number: {entry!r}")
    if not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
        raise PlanError(f"{topic}-{partition}: \"replicas\" must be a list of node ids")
    log_dirs = entry.get("log_dirs")
    if log_dirs is not None and any(d != "any" for d in log_dirs):
        raise PlanError(f"{topic}-{partition}: only \"any\" log dirs can be asked for (one log dir per node)")
    return (topic, partition), replicas


def plan_document(moves: Moves) -> dict:
    """The plan kafka-reassign-partitions.sh --execute reads."""
    return {"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": list(replicas),
                                          "log_dirs": ["any"] * len(replicas)}
                                         for (topic, partition), replicas in sorted(moves.items())]}
