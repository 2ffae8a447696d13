"""The log's side of a cleaning (cluster.formats.log_cleaner): what may be cleaned, swapping the
cleaned segments in, and finishing or discarding a swap that a crash interrupted.

A swap is crash-safe as Kafka's: the cleaned files are renamed from `.cleaned` to `.swap` first;
then the segments they replace are deleted and the `.swap` files renamed to their final names.
A log opened with `.cleaned` files left deletes them (the cleaning is done again); with `.swap`
files left, it deletes what is left of the segments they replace and completes the renames. The
`.log` is renamed after its indexes each time, so a `.log.swap` means every index is `.swap` or
final: none is lost, the `.txnindex` above all, which the log cannot rebuild.
"""
from __future__ import annotations

import os
from pathlib import Path

from cluster.formats.log_cleaner import CLEANED, SEGMENT_SUFFIXES, SWAP, CleanedGroup, CleaningJob, SegmentFile
from cluster.formats.producer_snapshot import snapshot_path
from cluster.formats.records import iter_batch_headers
from cluster.formats.segment import Segment, segment_file_name, wall_clock_ms
from cluster.formats.transaction_index import TXN_INDEX_SUFFIX


def recover_interrupted_cleaning(directory: Path) -> None:
    """Before a log's segments are loaded."""
    for leftover in directory.glob(f"*{CLEANED}"):
        leftover.unlink(missing_ok=True)
    swaps = list(directory.glob(f"*{SWAP}"))
    log_swaps = sorted(swap for swap in swaps if swap.name.endswith(f".log{SWAP}"))
    begun = {swap.name.split(".")[0] for swap in log_swaps}
    for swap in swaps:
        if swap.name.split(".")[0] not in begun:  # an index renamed before a crash caught its .log: not begun
            swap.unlink(missing_ok=True)
    for swap in log_swaps:
        base = int(swap.name.split(".")[0])
        end = _next_offset(swap.read_bytes(), base)
        # The files of the segments it replaces. At its own base, only until its renames begin (with
        # its .index, which it always has): after that, files there are its own. Before, they are the
        # replaced segment's, a .txnindex above all, whose entries a cleaned segment may have dropped.
        renames_begun = not (directory / (segment_file_name(base, ".index") + SWAP)).exists()
        for suffix in SEGMENT_SUFFIXES:
            for leftover in directory.glob(f"*{suffix}"):
                offset = int(leftover.stem) if leftover.stem.isdigit() else -1
                if base < offset < end or (offset == base and not renames_begun):
                    leftover.unlink(missing_ok=True)
        for suffix in SEGMENT_SUFFIXES:
            finished = directory / segment_file_name(base, suffix)
            if (directory / (finished.name + SWAP)).exists():
                os.replace(directory / (finished.name + SWAP), finished)


def _next_offset(data: bytes, base: int) -> int:
    end = base + 1
    for _, header in iter_batch_headers(data):
        end = header.next_offset
    return end


def first_uncleanable_offset(log, min_compaction_lag_ms: int, last_stable_offset: int | None = None,
                             now_ms: int | None = None) -> int:
    """Where a cleaning must stop (Kafka's cleanableOffsets): the base of the segment holding the
    first offset it may not clean, the lowest of the active segment's base, the last stable offset
    (the high watermark when no transaction is open: a transaction still undecided is never
    cleaned) and the first segment newer than min.compaction.lag.ms."""
    now = wall_clock_ms() if now_ms is None else now_ms
    uncleanable = min(log.active.base_offset, log.high_watermark)
    if last_stable_offset is not None:
        uncleanable = min(uncleanable, last_stable_offset)
    for segment in log.segments[:-1]:
        if min_compaction_lag_ms > 0 and segment.max_timestamp > now - min_compaction_lag_ms:
            uncleanable = min(uncleanable, segment.base_offset)
            break
    base = log.segments[0].base_offset
    for segment in log.segments:
        if segment.base_offset > uncleanable:
            break
        base = segment.base_offset
    return base


def cleaning_job(log, first_dirty_offset: int, min_compaction_lag_ms: int, last_stable_offset: int | None = None,
                 **settings) -> CleaningJob | None:
    """The segments a cleaning may rewrite, those below the first uncleanable offset; None when
    nothing there is dirty. last_stable_offset: the partition's (None: no transaction is open)."""
    now = wall_clock_ms()
    first_uncleanable = first_uncleanable_offset(log, min_compaction_lag_ms, last_stable_offset, now)
    first_dirty = max(first_dirty_offset, log.log_start_offset)
    segments = [SegmentFile(s.base_offset, s.path(".log"), s.size, _modified_ms(s)) for s in log.segments
                if s.base_offset < first_uncleanable]
    if first_dirty >= first_uncleanable or not segments:
        return None
    later = [s.path(TXN_INDEX_SUFFIX) for s in log.segments[len(segments):]]
    return CleaningJob(segments, first_dirty, first_uncleanable, later_txn_indexes=later, now_ms=now, **settings)


def dirty_ratio(log, first_dirty_offset: int, first_uncleanable: int | None = None) -> float:
    """Cleanable dirty bytes (segments at or past the first dirty offset and below the first
    uncleanable one) over those and the clean bytes, as Kafka's cleanableRatio."""
    first_uncleanable = log.active.base_offset if first_uncleanable is None else first_uncleanable
    clean = dirty = 0
    for segment in log.segments[:-1]:
        if segment.next_offset <= first_dirty_offset:
            clean += segment.size
        elif segment.base_offset < first_uncleanable:
            dirty += segment.size
    return dirty / (clean + dirty) if clean + dirty else 0.0


def swap_cleaned(log, cleaned: CleanedGroup) -> bool:
    """Put a cleaned segment in place of those it replaces, if they are still the log's (retention,
    DeleteRecords or a truncation may have removed them meanwhile); False, and its files deleted,
    if not."""
    bases = [s.base_offset for s in log.segments]
    first = bases.index(cleaned.source_bases[0]) if cleaned.source_bases[0] in bases else -1
    replaced = log.segments[first:first + len(cleaned.source_bases)] if first >= 0 else []
    if [s.base_offset for s in replaced] != cleaned.source_bases or first + len(replaced) >= len(log.segments):
        discard_cleaned(cleaned)
        return False
    for suffix in SEGMENT_SUFFIXES:
        _rename(cleaned.path(suffix), cleaned.path(suffix, SWAP), suffix)
    for segment in replaced:
        segment.delete_files()
    for suffix in SEGMENT_SUFFIXES:
        _rename(cleaned.path(suffix, SWAP), cleaned.directory / segment_file_name(cleaned.source_bases[0], suffix),
                suffix)
    # As Kafka's replaceSegments: the snapshots of the segments that are gone, not of the one replaced in place.
    for base in cleaned.source_bases[1:]:
        snapshot_path(cleaned.directory, base).unlink(missing_ok=True)
    swapped = Segment(cleaned.directory, cleaned.source_bases[0])
    swapped.open()
    swapped.size = os.fstat(swapped.fd).st_size
    next_base = log.segments[first + len(replaced)].base_offset
    if not swapped.load_indexes(next_base):
        swapped.rebuild_indexes(log.config.index_interval_bytes, validate=False)
        swapped.next_offset = next_base
    os.utime(swapped.path(".log"), ns=(cleaned.modified_ms * 1_000_000, cleaned.modified_ms * 1_000_000))
    log.segments[first:first + len(replaced)] = [swapped]
    return True


def _rename(source: Path, target: Path, suffix: str) -> None:
    # A cleaned segment has a .txnindex only when a segment it replaces had an aborted transaction.
    if suffix == TXN_INDEX_SUFFIX and not source.exists():
        return
    os.replace(source, target)


def discard_cleaned(cleaned: CleanedGroup) -> None:
    for suffix in SEGMENT_SUFFIXES:
        cleaned.path(suffix).unlink(missing_ok=True)


def _modified_ms(segment: Segment) -> int:
    return int(os.fstat(segment.fd).st_mtime * 1000) if segment.fd >= 0 else wall_clock_ms()
