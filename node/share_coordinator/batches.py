"""Merging a share-partition's state batches, as Kafka's PersisterStateBatchCombiner does.

The stored batches never overlap and are kept in offset order. A write's batches replace what was
stored for the offsets they cover (a later batch of the same write over an earlier one), offsets
before the start offset are dropped, and neighbours with the same delivery state and count are
joined into one batch.
"""
from __future__ import annotations

from collections.abc import Iterable

from node.share_coordinator.state import StateBatch


def merge_batches(stored: Iterable[StateBatch], written: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    merged = list(stored)
    for batch in written:
        if batch.last_offset >= batch.first_offset:
            merged = _overlay(merged, batch)
    return _join_neighbours(_from_start(merged, start_offset))


def _overlay(batches: list[StateBatch], top: StateBatch) -> list[StateBatch]:
    """batches with top in place of whatever they held for its offsets."""
    out = []
    for batch in batches:
        if batch.last_offset < top.first_offset or batch.first_offset > top.last_offset:
            out.append(batch)
            continue
        if batch.first_offset < top.first_offset:
            out.append(StateBatch(batch.first_offset, top.first_offset - 1, batch.delivery_state, batch.delivery_count))
        if batch.last_offset > top.last_offset:
            out.append(StateBatch(top.last_offset + 1, batch.last_offset, batch.delivery_state, batch.delivery_count))
    out.append(top)
    out.sort(key=lambda b: b.first_offset)
    return out


def _from_start(batches: list[StateBatch], start_offset: int) -> list[StateBatch]:
    if start_offset < 0:
        return batches
    out = []
    for batch in batches:
        if batch.last_offset < start_offset:
            continue
        if batch.first_offset < start_offset:
            batch = StateBatch(start_offset, batch.last_offset, batch.delivery_state, batch.delivery_count)
        out.append(batch)
    return out


def _join_neighbours(batches: list[StateBatch]) -> list[StateBatch]:
    out: list[StateBatch] = []
    for batch in batches:
        last = out[-1] if out else None
        if (last is not None and last.last_offset + 1 == batch.first_offset
                and (last.delivery_state, last.delivery_count) == (batch.delivery_state, batch.delivery_count)):
            out[-1] = StateBatch(last.first_offset, batch.last_offset, last.delivery_state, last.delivery_count)
        else:
            out.append(batch)
    return out
