"""Log-dir level metadata: `meta.properties` and rebuilding an image from `__cluster_metadata`
(its latest valid snapshot, then the log after it)."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from cluster.formats.config import parse_properties
from cluster.formats.image import MetadataImage
from cluster.formats.metadata_records import iter_metadata_records
from cluster.formats.records import iter_batch_headers
from cluster.formats.snapshots import SnapshotId, load_latest_snapshot

log = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"


class MetadataLogGap(Exception):
    """The metadata log starts after every valid snapshot ends: no image can be rebuilt from this directory."""


def read_meta_properties(log_dir) -> dict[str, str]:
    path = Path(log_dir) / "meta.properties"
    return parse_properties(path.read_text()) if path.exists() else {}


def write_meta_properties(log_dir, props: dict[str, str]) -> None:
    path = Path(log_dir) / "meta.properties"
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    body = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    temp = path.with_name("meta.properties.tmp")
    temp.write_text(body)
    os.replace(temp, path)


def replay_partition_log(log, image: MetadataImage, chunk_bytes: int = 8 << 20, start: int | None = None,
                         end: int | None = None) -> None:
    """Apply every record of an open metadata PartitionLog from offset start (its log start offset
    by default) up to offset end (its end by default) to image, in offset order. The image's offset
    counts control batches too: it is the last offset replayed."""
    offset = log.log_start_offset if start is None else max(start, log.log_start_offset)
    end = log.log_end_offset if end is None else min(end, log.log_end_offset)
    first = offset
    while offset < end:
        chunk = log.read(offset, chunk_bytes, max_offset=end)
        if not chunk.records:
            break
        for record_offset, name, fields in iter_metadata_records(chunk.records):
            if record_offset >= first:  # the first batch read may begin before `start`
                image.apply(record_offset, name, fields)
        offset = max(header.next_offset for _, header in iter_batch_headers(chunk.records))
        image.offset = max(image.offset, offset - 1)


def _refused(error: Exception) -> None:
    log.warning("metadata snapshot refused, falling back to an older snapshot or the log: %s", error)


def load_snapshot_and_log(directory, metadata_log, image: MetadataImage, replay: bool = True) -> SnapshotId | None:
    """Rebuild image from a metadata log directory: the latest valid snapshot the log continues from,
    then (with `replay`) the log after it. A snapshot that is cut short or damaged is skipped with one
    WARNING line (an older one or the log from its start serves instead); when nothing can,
    MetadataLogGap. A log that ends before the snapshot (a crash between writing a fetched snapshot
    and resetting the log) restarts at the snapshot's end."""
    loaded = load_latest_snapshot(directory, metadata_log.log_start_offset, _refused)
    if loaded is None:
        if metadata_log.log_start_offset > 0:
            raise MetadataLogGap(f"the metadata log in {directory} starts at offset {metadata_log.log_start_offset} "
                                 f"and no valid snapshot reaches it: the metadata image cannot be rebuilt")
        if replay:
            replay_partition_log(metadata_log, image)
        return None
    snapshot_id, snapshot_image = loaded
    image.replace_with(snapshot_image)
    if metadata_log.log_end_offset < snapshot_id.end_offset:
        metadata_log.truncate_fully_and_start_at(snapshot_id.end_offset)
    if replay:
        replay_partition_log(metadata_log, image, start=snapshot_id.end_offset)
    return snapshot_id


def load_metadata_image(log_dir) -> MetadataImage:
    """Replay a log dir's metadata log (ours or Kafka's) into a fresh image, from its latest valid
    snapshot if it has one; a torn tail is ignored."""
    log_dir = Path(log_dir)
    image = MetadataImage(cluster_id=read_meta_properties(log_dir).get("cluster.id"))
    directory = log_dir / METADATA_PARTITION_DIR
    loaded = load_latest_snapshot(directory, on_refused=_refused)
    start = 0
    if loaded is not None:
        image.replace_with(loaded[1])
        start = loaded[0].end_offset
    segments = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
    for segment in segments:
        data = segment.read_bytes()
        end = 0
        for position, header in iter_batch_headers(data):
            end = position + header.size
        for offset, name, fields in iter_metadata_records(memoryview(data)[:end]):
            if offset >= start:
                image.apply(offset, name, fields)
    return image
