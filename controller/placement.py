"""Replica placement as Kafka's assignment does it: leaders striped over the brokers, followers
shifted so that no two partitions share the same replica order. When brokers have racks
(`broker.rack`), the brokers are first ordered alternating between racks and each follower goes
to a rack that has no replica of the partition yet, as long as there is one (Kafka's rack-aware
assignment), so that losing a whole rack loses at most one replica of each partition."""
from __future__ import annotations

from typing import Iterator

Racks = dict[int, str | None]


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, start_index: int = 0, racks: Racks | None = None) -> list[list[int]]:
    return list(iter_replica_assignments(brokers, partitions, replication_factor, first_partition=first_partition,
                                         start_index=start_index, racks=racks))


def iter_replica_assignments(brokers: list[int], partitions: int, replication_factor: int, *,
                             first_partition: int = 0, start_index: int = 0,
                             racks: Racks | None = None) -> Iterator[list[int]]:
    """The replicas of each partition in turn, so that a caller can give way between partitions."""
    count = len(brokers)
    if replication_factor > count:
        raise ValueError(f"replication factor {replication_factor} is larger than the {count} available brokers")
    rack_of = {b: (racks or {}).get(b) for b in brokers}
    rack_aware = any(rack is not None for rack in rack_of.values())
    ordered = rack_alternated(rack_of) if rack_aware else sorted(brokers)
    rack_count = len(set(rack_of.values())) if rack_aware else 1
    shift = start_index
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        if rack_aware:
            yield _rack_aware_replicas(ordered, rack_of, first, shift * rack_count, replication_factor)
        else:
            yield [ordered[first]] + [ordered[_follower_index(first, shift, j, count)]
                                      for j in range(replication_factor - 1)]


def _follower_index(first: int, shift: int, nth: int, count: int) -> int:
    return (first + 1 + (shift + nth) % max(count - 1, 1)) % count


def rack_alternated(rack_of: Racks) -> list[int]:
    """Brokers taken in turn from each rack (racks and brokers in order): a, b, c, a, b, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker] or "", []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[row] for row in range(max(map(len, columns))) for column in columns if row < len(column)]


def _rack_aware_replicas(ordered: list[int], rack_of: Racks, first: int, shift: int, factor: int) -> list[int]:
    """The leader, then followers each on a rack without a replica yet (any rack once all have one)."""
    count, rack_count = len(ordered), len(set(rack_of.values()))
    replicas = [ordered[first]]
    racks_used = {rack_of[ordered[first]]}
    nth = 0
    while len(replicas) < factor:
        broker = ordered[_follower_index(first, shift, nth, count)]
        nth += 1
        rack_fits = rack_of[broker] not in racks_used or len(racks_used) == rack_count
        if rack_fits and broker not in replicas:
            replicas.append(broker)
            racks_used.add(rack_of[broker])
    return replicas
