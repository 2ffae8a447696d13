"""The log cleaner: compaction of the `cleanup.policy=compact` logs this node hosts, leaders' and
followers' alike, each replica cleaning its own copy as Kafka's do.

Every log.cleaner.backoff.ms each of log.cleaner.threads picks the dirtiest compacted log whose
dirty ratio reaches min.cleanable.dirty.ratio (or whose oldest dirty data is older than
max.compaction.lag.ms), and cleans it in a worker process of its own (`python -m
cluster.formats.log_cleaner`), so that neither the work nor the GIL is taken from produce and
fetch; reads and writes there are capped at log.cleaner.io.max.bytes.per.second. The cleaned
segments are swapped in on the event loop (cluster.formats.cleaned_segments), and where each
log's next cleaning starts is kept in Kafka's `cleaner-offset-checkpoint`.
"""
from __future__ import annotations

import asyncio
import logging
import pickle
import sys
import time
from pathlib import Path

from cluster.formats.cleaned_segments import (
    cleaning_job, dirty_ratio, discard_cleaned, first_uncleanable_offset, swap_cleaned,
)
from cluster.formats.log_cleaner import (
    OFFSET_MAP_ENTRY_BYTES, OFFSET_MAP_LOAD_FACTOR, CleaningResult, ProducerLastRecord,
)
from node.log_checkpoints import CheckpointFile

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
Key = tuple[str, int]


class LogCleaner:
    def __init__(self, broker):
        self.broker = broker
        config = broker.config
        self.enabled = config.get("log.cleaner.enable") == "true"
        self.threads = max(1, config.get_int("log.cleaner.threads"))
        self.backoff_s = config.get_int("log.cleaner.backoff.ms") / 1000
        self.max_map_keys = int(config.get_int("log.cleaner.dedupe.buffer.size") / self.threads
                                / OFFSET_MAP_ENTRY_BYTES * OFFSET_MAP_LOAD_FACTOR)
        self.io_bytes_per_s = float(config.get("log.cleaner.io.max.bytes.per.second"))
        self.checkpoint = CheckpointFile(Path(broker.log_dir) / CLEANER_CHECKPOINT)
        self.in_progress: set[Key] = set()
        self.uncleanable: set[Key] = set()  # a cleaning failed unexpectedly: left alone until a restart

    async def run(self) -> None:
        if self.enabled:
            await asyncio.gather(*(self._thread() for _ in range(self.threads)))

    async def _thread(self) -> None:
        while True:
            if not await self.clean_dirtiest():
                await asyncio.sleep(self.backoff_s)

    # --- choosing ---

    def first_dirty_offset(self, key: Key, partition_log) -> int:
        return max(self.checkpoint.offsets.get(key, 0), partition_log.log_start_offset)

    def _dirtiest(self) -> tuple[Key, object] | None:
        best, best_ratio = None, -1.0
        now = time.time() * 1000
        # Per topic, for this pass (a node may host thousands of partitions): its configs if compacted.
        compacted: dict[str, dict | None] = {}
        for key, partition in self.broker.replicas.partitions.items():
            if key in self.in_progress or key in self.uncleanable:
                continue
            if key[0] not in compacted:
                compacted[key[0]] = (self.broker.topic_configs(key[0]) if "compact" in
                                     self.broker.topic_config(key[0], "cleanup.policy") else None)
            configs = compacted[key[0]]
            if configs is None:
                continue
            partition_log = partition.log
            first_dirty = self.first_dirty_offset(key, partition_log)
            uncleanable = first_uncleanable_offset(partition_log, int(configs["min.compaction.lag.ms"]),
                                                   partition.last_stable_offset(), int(now))
            ratio = dirty_ratio(partition_log, first_dirty, uncleanable)
            overdue = _oldest_dirty_ms(partition_log, first_dirty) < now - int(configs["max.compaction.lag.ms"])
            if (ratio >= float(configs["min.cleanable.dirty.ratio"]) or overdue) and ratio > 0 and ratio > best_ratio:
                best, best_ratio = (key, partition), ratio
        return best

    # --- cleaning ---

    async def clean_dirtiest(self) -> bool:
        """Clean the dirtiest log that is due; False when none is."""
        chosen = self._dirtiest()
        if chosen is None:
            return False
        key, partition = chosen
        self.in_progress.add(key)
        try:
            return await self._clean(key, partition)
        except Exception:  # a bug, or a log it cannot read: Kafka marks such a partition uncleanable too
            log.exception("cleaning %s-%d failed: it is not cleaned again until the node restarts", *key)
            self.uncleanable.add(key)
            return False
        finally:
            self.in_progress.discard(key)

    async def _clean(self, key: Key, partition) -> bool:
        """One cleaning of one log; False when there was nothing it could clean yet."""
        partition_log = partition.log
        configs = self.broker.topic_configs(key[0])
        job = cleaning_job(partition_log, self.first_dirty_offset(key, partition_log),
                           int(configs["min.compaction.lag.ms"]), partition.last_stable_offset(),
                           segment_bytes=partition_log.config.segment_bytes,
                           index_interval_bytes=partition_log.config.index_interval_bytes,
                           delete_retention_ms=int(configs["delete.retention.ms"]),
                           producers=producers_last_records(partition.producers),
                           max_map_keys=self.max_map_keys, io_bytes_per_s=self.io_bytes_per_s)
        if job is None:
            return False  # dirty data, but none cleanable yet (min.compaction.lag.ms, the LSO)
        started = time.monotonic()
        result = await _run_worker(job)
        if result is None:
            return False
        hosted = self.broker.replicas.partitions.get(key)
        if hosted is not partition or hosted.log is not partition_log:
            for group in result.groups:
                discard_cleaned(group)
            return True
        # (Each group whose segments changed meanwhile is discarded by swap_cleaned.)
        if not all([swap_cleaned(partition_log, group) for group in result.groups]):
            log.info("cleaning of %s-%d was overtaken by changes to its log; it will be done again", *key)
            return True
        self.checkpoint.offsets = {**self.checkpoint.offsets, key: result.cleaned_up_to}
        await asyncio.to_thread(self.checkpoint.write, self.checkpoint.offsets)
        log.info("cleaned %s-%d up to offset %d: %d of %d records kept, %d bytes to %d, in %.2f s", *key,
                 result.cleaned_up_to, result.records_kept, result.records_read, result.bytes_read,
                 result.bytes_written, time.monotonic() - started)
        return True

    def forget(self, key: Key) -> None:
        """A partition no longer hosted here: a later copy of it starts dirty (Kafka drops its
        checkpoint entry too)."""
        if key in self.checkpoint.offsets:
            self.checkpoint.offsets = {k: v for k, v in self.checkpoint.offsets.items() if k != key}
            try:
                self.checkpoint.write(self.checkpoint.offsets)
            except OSError as exc:
                log.error("cannot write %s: %s", CLEANER_CHECKPOINT, exc)


async def _run_worker(job) -> CleaningResult | None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cluster.formats.log_cleaner", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await process.communicate(pickle.dumps(job))
    except asyncio.CancelledError:
        process.kill()  # the node stops: the cleaning is done again after its restart
        raise
    if process.returncode != 0:
        log.warning("the log cleaner's worker failed (status %s): %s", process.returncode,
                    err.decode(errors="replace").strip().splitlines()[-1:] or "")
        return None
    return pickle.loads(out)


def producers_last_records(producers) -> dict[int, ProducerLastRecord]:
    """Each producer's last data offset (-1: none since its epoch began) and epoch, which the
    cleaner keeps the batches of (Kafka's lastRecordsOfActiveProducers)."""
    return {pid: ProducerLastRecord(entry.recent[-1][3] if entry.recent else -1, entry.epoch)
            for pid, entry in producers.producers.items()}


def _oldest_dirty_ms(partition_log, first_dirty: int) -> float:
    """The max timestamp of the first non-active segment holding dirty records (Kafka measures
    max.compaction.lag.ms from the earliest dirty segment)."""
    for segment in partition_log.segments[:-1]:
        if segment.next_offset > first_dirty and segment.max_timestamp >= 0:
            return segment.max_timestamp
    return float("inf")
