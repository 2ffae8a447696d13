"""Compaction of a real partition log: the latest value per key survives at its offset."""
from __future__ import annotations

import os
import time

from cluster.formats.cleaned_segments import cleaning_job, swap_cleaned
from cluster.formats.compression import GZIP, decompress
from cluster.formats.log_cleaner import CLEANED, SWAP, ProducerLastRecord, clean
from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import (
    ATTR_DELETE_HORIZON, HEADER_SIZE, decode_records, encode_records, iter_batch_headers, read_header,
)

DAY_MS = 86_400_000
SETTINGS = dict(segment_bytes=1 << 20, index_interval_bytes=64, delete_retention_ms=DAY_MS, max_map_keys=1000,
                io_bytes_per_s=float("inf"))


def write(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], *, compression: int = 0,
          producer: tuple[int, int, int] | None = None) -> None:
    now = int(time.time() * 1000)
    pid, epoch, sequence = producer or (-1, -1, -1)
    log.append(encode_records([(now, k, v, ()) for k, v in records], compression=compression, producer_id=pid,
                              producer_epoch=epoch, base_sequence=sequence), leader_epoch=0)


def everything(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 30).records
    found = []
    for position, header in iter_batch_headers(bytes(data)):
        body = bytes(data[position + HEADER_SIZE:position + header.size])
        body = decompress(header.compression, body) if header.compression else body
        found += [(r.offset, r.key, r.value) for r in decode_records(header, body)]
    return found


def cleaned(log: PartitionLog, first_dirty: int = 0, producers: dict | None = None, at_ms: int | None = None) -> int:
    job = cleaning_job(log, first_dirty, 0, producers=producers or {}, **SETTINGS)
    if at_ms is not None:
        job.now_ms = at_ms
    result = clean(job)
    assert all(swap_cleaned(log, group) for group in result.groups)
    return result.cleaned_up_to


def test_the_latest_value_of_each_key_survives_at_its_offset(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    write(log, [(b"a", b"a1"), (b"b", b"b1")])
    write(log, [(b"a", b"a2"), (b"c", b"c1")], compression=GZIP)
    log.roll()
    write(log, [(b"b", b"b2"), (b"c", None)])  # c's tombstone, recent: it stays
    log.roll()
    write(log, [(b"d", b"d1")])  # the active segment is never cleaned
    assert cleaned(log) == 6
    assert everything(log) == [(2, b"a", b"a2"), (4, b"b", b"b2"), (5, b"c", None), (6, b"d", b"d1")]
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert everything(reopened) == [(2, b"a", b"a2"), (4, b"b", b"b2"), (5, b"c", None), (6, b"d", b"d1")]
    assert reopened.read(1, 1 << 20).records  # an offset in a gap reads from the next batch
    reopened.close()


def test_tombstones_go_after_their_delete_horizon_and_a_producers_last_batch_stays_empty(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    write(log, [(b"k", b"v1")], producer=(7, 0, 0))
    write(log, [(b"gone", b"x"), (b"gone", None)])
    log.roll()
    old = (time.time() - 2 * DAY_MS / 1000)
    os.utime(log.segments[0].path(".log"), (old, old))  # (a segment's age is not a tombstone's)
    write(log, [(b"k", b"v2")])
    log.roll()
    write(log, [(b"tail", b"t")])
    producers = {7: ProducerLastRecord(data_offset=0, epoch=0)}
    cleaning_ms = int(time.time() * 1000)
    cleaned(log, producers=producers, at_ms=cleaning_ms)
    # Producer 7's only batch lost its record to a later one, but stays as an empty batch at offset 0.
    data = bytes(log.read(0, 1 << 20).records)
    first = read_header(data)
    assert (first.base_offset, first.record_count, first.producer_id, first.base_sequence) == (0, 0, 7, 0)
    # The tombstone's first cleaning kept it, and stamped its batch with when it may go (KIP-534).
    assert everything(log) == [(2, b"gone", None), (3, b"k", b"v2"), (4, b"tail", b"t")]
    stamped = read_header(bytes(log.read(2, 1 << 20).records))
    assert (stamped.delete_horizon_ms, stamped.record_count, stamped.last_offset) == (cleaning_ms + DAY_MS, 1, 2)
    assert stamped.attributes & ATTR_DELETE_HORIZON
    (tombstone,) = decode_records(stamped, bytes(log.read(2, 1 << 20).records)[HEADER_SIZE:stamped.size])
    assert tombstone.timestamp == stamped.max_timestamp  # its own timestamp, kept through its delta
    cleaned(log, producers=producers, at_ms=cleaning_ms + DAY_MS - 1)
    assert everything(log)[0] == (2, b"gone", None)
    cleaned(log, producers=producers, at_ms=cleaning_ms + DAY_MS)
    assert everything(log) == [(3, b"k", b"v2"), (4, b"tail", b"t")]
    log.close()


def test_a_swap_a_crash_interrupted_is_finished_and_a_cleaning_discarded(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    for round_ in range(3):
        write(log, [(b"k", b"v%d" % round_)])
        log.roll()
    write(log, [(b"tail", b"t")])
    job = cleaning_job(log, 0, 0, producers={}, **dict(SETTINGS, segment_bytes=1 << 20))
    (group,) = clean(job).groups
    # The crash came after the cleaned files became .swap, before the old segments went.
    for suffix in (".log", ".index", ".timeindex"):
        os.replace(group.path(suffix), group.path(suffix, SWAP))
    stray = tmp_path / "t-0" / ("00000000000000000003.log" + CLEANED)
    stray.write_bytes(b"half a cleaning")
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(cleanup_policy="compact"))
    assert everything(reopened) == [(2, b"k", b"v2"), (3, b"tail", b"t")]
    assert not stray.exists() and not list((tmp_path / "t-0").glob(f"*{SWAP}"))
    reopened.close()
