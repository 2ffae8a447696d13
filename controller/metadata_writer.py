"""The controller's metadata log: the only writer of `__cluster_metadata`.

Every change is one record batch appended at the log end, fsynced before the caller is
answered, then applied to the in-memory image. Long-polling node fetches are woken as soon
as the batch is durable, through a condition of their own: nodes decode and apply a batch
while the controller applies it too, instead of after it (a 1,000-topic creation is 4,000
records, a second of decoding on each side). Other waiters, whose predicates read the image,
are woken once it is applied.

Like Kafka's controller event queue, one operation at a time decides on the image and
writes: whoever calls `append` holds `exclusive` from reading the image to writing its
records, so that an operation built over several slices of the event loop never sees
another's half-applied batch. Encoding and applying a batch give way to the event loop
every few milliseconds; the fsync runs in a thread.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

from cluster.formats.image import MetadataImage
from cluster.formats.metadata_log import METADATA_PARTITION_DIR, replay_partition_log
from cluster.formats.metadata_records import encode_record, iter_metadata_records
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import frame_records, seal_batch
from cluster.runtime.time_slices import FREEZE_AFTER_RECORDS, TimeSlice, freeze_long_lived, gently

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)
CONTROLLER_EPOCH = 1
# Records encoded between two chances for the event loop to run something else.
ENCODE_SLICE = 100


class MetadataWriter:
    def __init__(self, data_dir: Path, cluster_id: str):
        self.log = PartitionLog(Path(data_dir) / METADATA_PARTITION_DIR, topic_id=METADATA_TOPIC_ID)
        self.image = MetadataImage(cluster_id=cluster_id)
        self.changed = asyncio.Condition()
        self.appended = asyncio.Condition()
        self.exclusive = asyncio.Lock()
        replay_partition_log(self.log, self.image)
        log.info("replayed the metadata log up to offset %d", self.image.offset)

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_offset(self) -> int:
        return self.log.log_end_offset - 1

    async def append(self, records: list[tuple[str, dict]]) -> int:
        """Write records as one batch, durably; returns the offset of the last one.

        The caller holds `exclusive` since it read the image it decided on.
        """
        assert self.exclusive.locked(), "metadata writes are made under MetadataWriter.exclusive"
        if not records:
            return self.last_offset
        batch = await self._encode(records)
        self.log.append_as_follower(batch)
        await asyncio.to_thread(self.log.flush)
        async with self.appended:
            self.appended.notify_all()
        async for offset, name, fields in gently(iter_metadata_records(batch)):
            self.image.apply(offset, name, fields)
        if len(records) >= FREEZE_AFTER_RECORDS:
            freeze_long_lived()
        async with self.changed:
            self.changed.notify_all()
        return self.last_offset

    async def _encode(self, records: list[tuple[str, dict]]) -> bytes:
        body = bytearray()
        time_slice = TimeSlice()
        for start in range(0, len(records), ENCODE_SLICE):
            chunk = records[start:start + ENCODE_SLICE]
            frame_records([(None, encode_record(name, fields)) for name, fields in chunk], start, body)
            await time_slice.give_way()
        return seal_batch(body, len(records), base_offset=self.log.log_end_offset, leader_epoch=CONTROLLER_EPOCH,
                          timestamp=int(time.time() * 1000))

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
        return self.log.read(offset, max_bytes, max_offset=self.log.log_end_offset).records

    def close(self) -> None:
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
