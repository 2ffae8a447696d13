"""What this node served to consumers, per partition: fetch answers carrying records, and their bytes.

Replica fetches are left out, so the figures show which node clients actually read each
partition from (a Spark job reading every partition from its leader, say). The admin op
`client_fetch_stats` reports them; they live as long as the node process.
"""
from __future__ import annotations

_served: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [fetches, bytes]


def record_client_fetches(fetches, follower_id: int) -> None:
    """Count the partitions of one Fetch answer that carry records, unless a follower asked."""
    if follower_id >= 0:
        return
    for fetch in fetches:
        if fetch.records:
            counts = _served.setdefault((fetch.topic, fetch.request.partition), [0, 0])
            counts[0] += 1
            counts[1] += len(fetch.records)


def client_fetch_stats() -> list[dict]:
    return [{"topic": topic, "partition": partition, "fetches": fetches, "bytes": size}
            for (topic, partition), (fetches, size) in sorted(_served.items())]
