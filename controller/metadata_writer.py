"""The controller's metadata log: `__cluster_metadata`, written by the quorum's leader.

Every change is one record batch that the active controller appends through the quorum
(controller/quorum.py): it is fsynced, replicated to the other controllers, and committed once a
majority holds it; only then is it applied to the in-memory image and the caller answered. Every
controller, leading or not, applies what is committed in log order (`catch_up`), so a standby's
image is current when it takes over. Nodes fetch only what is committed. Long-polling node fetches
are woken as soon as a batch is committed, through a condition of their own: nodes decode and
apply a batch while the controller applies it too, instead of after it (a 1,000-topic creation is
4,000 records, a second of decoding on each side). Other waiters, whose predicates read the image,
are woken once it is applied.

Like Kafka's controller event queue, one operation at a time decides on the image and
writes: whoever calls `append` holds `exclusive` from reading the image to writing its
records, so that an operation built over several slices of the event loop never sees
another's half-applied batch. Encoding and applying a batch give way to the event loop
every few milliseconds; the fsync runs in a thread.

Snapshots (KIP-630): once the batches written since the last snapshot pass
`metadata.log.max.record.bytes.between.snapshots` (or some were written and
`metadata.log.max.snapshot.interval.ms` passed), the image is written as a `.checkpoint` file and
the log segments before it are deleted, so the log starts at the latest snapshot as Kafka keeps
it (a controller of a quorum of several keeps its log whole: the voters do not send each other
snapshots yet). The records are encoded under `exclusive` (no write changes the image
meanwhile), a slice at a time; the file is written and fsynced in a thread. At start-up the image
is rebuilt from the latest valid snapshot and the log after it, as far as it is known to be
committed (a lone voter leads at once and commits its whole log; a voter of several learns the
high watermark from the leader first).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from pathlib import Path

from cluster.formats.image import MetadataImage
from cluster.formats.config import BrokerConfig
from cluster.formats.metadata_log import (
    METADATA_PARTITION_DIR, MetadataLogGap, load_snapshot_and_log, replay_partition_log,
)
from cluster.formats.metadata_records import encode_record
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import frame_records, seal_batch
from cluster.formats.snapshots import (
    POSITION_OUT_OF_RANGE, SNAPSHOT_NOT_FOUND, SnapshotId, encode_image_gently, keep_snapshot, snapshot_path,
    snapshot_settings,
)
from cluster.runtime.time_slices import FREEZE_AFTER_RECORDS, TimeSlice, freeze_long_lived
from controller.quorum import Quorum
from controller.raft.config import RaftConfig

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)
# Records encoded between two chances for the event loop to run something else.
ENCODE_SLICE = 100
FETCH_MAX_BYTES = 1 << 20
# The most a fetch_snapshot answer carries (a node asks for the rest, position by position).
FETCH_SNAPSHOT_MAX_BYTES = 4 << 20


class MetadataWriter:
    def __init__(self, data_dir: Path, cluster_id: str, node_id: int = 0,
                 voters: dict[int, tuple[str, int]] | None = None, raft_config: RaftConfig = RaftConfig(), tls=None):
        """`voters`: every controller of the quorum by id, with its control address; None for a
        quorum of this controller alone."""
        self.log = PartitionLog(Path(data_dir) / METADATA_PARTITION_DIR, topic_id=METADATA_TOPIC_ID)
        self.image = MetadataImage(cluster_id=cluster_id)
        self.changed = asyncio.Condition()
        self.appended = asyncio.Condition()
        self.exclusive = asyncio.Lock()
        self._catching_up = asyncio.Lock()
        try:
            self.snapshot_id = load_snapshot_and_log(self.log.directory, self.log, self.image, replay=False)
        except MetadataLogGap as exc:
            raise SystemExit(f"cannot start: {exc}") from None
        # Everything before this offset is in the image.
        self.applied_end = self.snapshot_id.end_offset if self.snapshot_id else self.log.log_start_offset
        voters = voters or {node_id: ("", 0)}
        self.quorum = Quorum(node_id, voters, cluster_id, self.log, raft_config, tls)
        self.quorum.on_commit = self._committed
        self.quorum.on_role_change = lambda: asyncio.get_running_loop().create_task(self.notify())
        self.keeps_whole_log = len(voters) > 1
        replay_partition_log(self.log, self.image, start=self.applied_end, end=self.quorum.high_watermark)
        self.applied_end = max(self.applied_end, self.quorum.high_watermark)
        if self.snapshot_id:
            log.info("loaded metadata snapshot %s, then the log up to offset %d", self.snapshot_id, self.image.offset)
        else:
            log.info("replayed the metadata log up to offset %d", self.image.offset)
        self.snapshot_bytes, self.snapshot_interval_s = snapshot_settings(BrokerConfig())
        self.bytes_since_snapshot = self.log.size_bytes()
        self._last_append_ms = 0
        self._snapshot_task: asyncio.Task | None = None
        self._snapshot_timer: asyncio.TimerHandle | None = None
        self._catch_up_task: asyncio.Task | None = None

    async def start(self) -> None:
        """Run the quorum: from here on, what it commits is applied."""
        self.quorum.start()
        await self.catch_up()

    def configure_snapshots(self, config: BrokerConfig) -> None:
        """Take the snapshot settings from the controller's broker config (`--set`)."""
        self.snapshot_bytes, self.snapshot_interval_s = snapshot_settings(config)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        """The end of what the quorum has committed: what nodes may fetch."""
        return min(self.quorum.high_watermark, self.log.log_end_offset)

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1

    @property
    def is_active(self) -> bool:
        """This controller leads the quorum and its image holds everything committed, its own
        epoch's first entry included: it may decide (Kafka's active controller)."""
        return self.quorum.is_leader and self.applied_end > self.quorum.epoch_start_offset >= 0

    async def append(self, records: list[tuple[str, dict]]) -> int:
        """Write records as one batch through the quorum; returns the offset of the last one once it
        is committed and applied. NotController when this controller does not lead (then or by the
        time a majority would have had it).

        The caller holds `exclusive` since it read the image it decided on.
        """
        assert self.exclusive.locked(), "metadata writes are made under MetadataWriter.exclusive"
        if not records:
            return self.last_offset
        if not self.quorum.is_leader:
            raise self.quorum.not_controller()
        batch = await self._encode(records)
        offset = self.quorum.append(batch)
        self._last_append_ms = int(time.time() * 1000)
        await self.quorum.wait_committed(offset)
        await self.catch_up()
        if len(records) >= FREEZE_AFTER_RECORDS:
            freeze_long_lived()
        return offset

    def _committed(self, high_watermark: int) -> None:
        """The quorum's high watermark moved: wake node fetches now, apply in a task of its own."""
        asyncio.get_running_loop().create_task(self._wake_fetches())
        if self._catch_up_task is None or self._catch_up_task.done():
            self._catch_up_task = asyncio.create_task(self.catch_up())

    async def _wake_fetches(self) -> None:
        async with self.appended:
            self.appended.notify_all()

    async def catch_up(self) -> None:
        """Apply what the quorum committed beyond what the image holds, in log order, a slice at a time."""
        async with self._catching_up:
            while self.applied_end < self.end_offset:
                end = self.end_offset
                data = self.log.read(self.applied_end, 8 << 20, max_offset=end).records
                if not data:
                    break
                await self.image.replay_gently(data)
                self.applied_end = self.image.offset + 1
                self.bytes_since_snapshot += len(data)  # the standbys' too: each snapshots its own log
                async with self.changed:
                    self.changed.notify_all()
            self._maybe_snapshot()

    # --- snapshots ---

    def _maybe_snapshot(self) -> None:
        """Start a snapshot when enough bytes were written since the last one; otherwise make sure
        the interval timer runs while some were."""
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        if self.bytes_since_snapshot >= self.snapshot_bytes:
            self._snapshot_task = asyncio.create_task(self.take_snapshot())
        elif self.bytes_since_snapshot and self._snapshot_timer is None and self.snapshot_interval_s > 0:
            self._snapshot_timer = asyncio.get_running_loop().call_later(self.snapshot_interval_s, self._on_interval)

    def _on_interval(self) -> None:
        self._snapshot_timer = None
        if self.bytes_since_snapshot and (self._snapshot_task is None or self._snapshot_task.done()):
            self._snapshot_task = asyncio.create_task(self.take_snapshot())

    async def take_snapshot(self) -> SnapshotId | None:
        """Write the image as a snapshot at the log end, then delete the log and the snapshots before it."""
        try:
            async with self.exclusive:
                await self.catch_up()
                snapshot_id = SnapshotId(self.applied_end, self._epoch_before(self.applied_end))
                if self.snapshot_id is not None and snapshot_id <= self.snapshot_id:
                    return None
                data = await encode_image_gently(self.image, snapshot_id, self._last_append_ms, ENCODE_SLICE)
                # The next record starts a segment of its own: the ones before can go as a whole.
                self.log.roll()
                self.bytes_since_snapshot = 0
            await keep_snapshot(self.log, snapshot_id, data, trim_log=not self.keeps_whole_log)
            self.snapshot_id = snapshot_id
            log.info("metadata snapshot %s written (%d bytes); the log now starts at offset %d",
                     snapshot_id, len(data), self.log.log_start_offset)
            return snapshot_id
        except Exception as exc:  # the log stays whole; the next append tries again
            log.error("writing a metadata snapshot failed: %s", exc)
            return None

    def _epoch_before(self, offset: int) -> int:
        """The leader epoch of the entry before offset (a snapshot id's epoch)."""
        return max((epoch for epoch, start in self.log.epochs if start < offset), default=0)

    async def fetch(self, offset: int, max_wait_ms: float | None) -> dict:
        """The `fetch_metadata` op: committed record batches from offset, waiting up to max_wait_ms for
        some; below the log start (the log before the latest snapshot is deleted), the id of that
        snapshot instead, which the node fetches with fetch_snapshot."""
        if offset < self.log_start_offset and self.snapshot_id is not None:
            return {"data": b"", "high_watermark": self.end_offset, "snapshot_id": list(self.snapshot_id)}
        if offset >= self.end_offset:
            await self.wait_for_records_from(offset, (max_wait_ms or 0) / 1000)
        data = self.read(offset, FETCH_MAX_BYTES) if offset < self.end_offset else b""
        return {"data": data, "high_watermark": self.end_offset}

    async def fetch_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int | None) -> dict:
        """The `fetch_snapshot` op (Kafka's FetchSnapshot over the control channel): a chunk of the
        snapshot from position; SNAPSHOT_NOT_FOUND once a newer snapshot replaced it."""
        max_bytes = max(1, min(max_bytes or FETCH_SNAPSHOT_MAX_BYTES, FETCH_SNAPSHOT_MAX_BYTES))
        return await asyncio.to_thread(self.read_snapshot, snapshot_id, position, max_bytes)

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> dict:
        """A chunk of a snapshot file, as Kafka's FetchSnapshot answers: its size and the bytes from position."""
        if snapshot_id != self.snapshot_id:
            return {"error_code": SNAPSHOT_NOT_FOUND}
        try:
            with open(snapshot_path(self.log.directory, snapshot_id), "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if not 0 <= position <= size:
                    return {"error_code": POSITION_OUT_OF_RANGE, "size": size}
                file.seek(position)
                return {"error_code": 0, "size": size, "position": position, "data": file.read(max_bytes)}
        except FileNotFoundError:
            return {"error_code": SNAPSHOT_NOT_FOUND}

    async def _encode(self, records: list[tuple[str, dict]]) -> bytes:
        body = bytearray()
        time_slice = TimeSlice()
        for start in range(0, len(records), ENCODE_SLICE):
            chunk = records[start:start + ENCODE_SLICE]
            frame_records([(None, encode_record(name, fields)) for name, fields in chunk], start, body)
            await time_slice.give_way()
        # The log gives the batch its offsets and the leader's epoch as it appends it.
        return seal_batch(body, len(records), base_offset=0, leader_epoch=0, timestamp=int(time.time() * 1000))

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate, timeout_s: float) -> bool:
        """Wait until predicate() holds, re-checked on every change; False on timeout."""
        return await _wait_on(self.changed, predicate, timeout_s)

    async def wait_for_records_from(self, offset: int, timeout_s: float) -> None:
        """Until the log holds a durable record at offset, or timeout_s passes."""
        await _wait_on(self.appended, lambda: self.end_offset > offset, timeout_s)

    def read(self, offset: int, max_bytes: int) -> bytes:
        return self.log.read(offset, max_bytes, max_offset=self.end_offset).records

    async def stop(self) -> None:
        await self.quorum.close()
        self.close()

    def close(self) -> None:
        if self._snapshot_timer is not None:
            self._snapshot_timer.cancel()
        self.log.flush()
        self.log.close()


async def _wait_on(condition: asyncio.Condition, predicate, timeout_s: float) -> bool:
    """Until predicate() holds, re-checked whenever condition is notified; False on timeout."""
    async with condition:
        try:
            await asyncio.wait_for(condition.wait_for(predicate), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
