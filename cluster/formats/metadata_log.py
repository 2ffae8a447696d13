"""Log-dir level metadata: `meta.properties` and replaying `__cluster_metadata` into an image."""
from __future__ import annotations

import os
import time
from pathlib import Path

from cluster.formats.config import parse_properties
from cluster.formats.image import MetadataImage
from cluster.formats.records import iter_batch_headers

METADATA_PARTITION_DIR = "__cluster_metadata-0"


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


def replay_partition_log(log, image: MetadataImage, chunk_bytes: int = 8 << 20) -> None:
    """Apply every record of an open metadata PartitionLog to image, in offset order."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, chunk_bytes, max_offset=log.log_end_offset)
        if not chunk.records:
            break
        image.replay(chunk.records)
        offset = image.offset + 1


def load_metadata_image(log_dir) -> MetadataImage:
    """Replay a log dir's metadata log (ours or Kafka's) into a fresh image; a torn tail is ignored."""
    log_dir = Path(log_dir)
    image = MetadataImage(cluster_id=read_meta_properties(log_dir).get("cluster.id"))
    segments = sorted((log_dir / METADATA_PARTITION_DIR).glob("*.log"), key=lambda p: int(p.stem))
    for segment in segments:
        data = segment.read_bytes()
        end = 0
        for position, header in iter_batch_headers(data):
            end = position + header.size
        image.replay(memoryview(data)[:end])
    return image
