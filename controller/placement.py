"""Replica placement as Kafka's rack-unaware assignment does it: leaders striped over the
brokers, followers shifted so that no two partitions share the same replica order."""
from __future__ import annotations

from typing import Iterator


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, start_index: int = 0) -> list[list[int]]:
    return list(iter_replica_assignments(brokers, partitions, replication_factor, first_partition=first_partition,
                                         start_index=start_index))


def iter_replica_assignments(brokers: list[int], partitions: int, replication_factor: int, *,
                             first_partition: int = 0, start_index: int = 0) -> Iterator[list[int]]:
    """The replicas of each partition in turn, so that a caller can give way between partitions."""
    brokers = sorted(brokers)
    count = len(brokers)
    if replication_factor > count:
        raise ValueError(f"replication factor {replication_factor} is larger than the {count} available brokers")
    shift = start_index
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % max(count - 1, 1)) % count])
        yield replicas
