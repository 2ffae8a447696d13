"""How long a metadata snapshot of many partitions takes to write and to load:
`python -m benchmarks.snapshot_load [--partitions 100000] [--topics 1000] [--rounds 3]`.

Builds an image of `--partitions` partitions (spread over `--topics` topics, three replicas on
three brokers, each partition's leader moved once so epochs differ), writes it as a `.checkpoint`
file as the controller does (image to records, encoded, fsynced), then times loading it the way
a controller or node starts: reading the file, checking every batch's CRC and the header and
footer, and replaying its records into an empty image. Prints the best of `--rounds` for each
step; KIP-630's aim for kraftwerk is a load under 2 s for 100,000 partitions.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid

from cluster.formats.image import MetadataImage
from cluster.formats.metadata_log import METADATA_PARTITION_DIR
from cluster.formats.snapshots import read_snapshot_file, replay_snapshot, snapshot_of, write_snapshot_file


def build_image(partitions: int, topics: int) -> MetadataImage:
    image = MetadataImage(cluster_id="bench")
    image.apply(0, "FeatureLevelRecord", {"name": "metadata.version", "feature_level": 19})
    per_topic = max(1, partitions // topics)
    offset = 1
    for t in range(topics):
        topic_id = uuid.uuid4()
        image.apply(offset, "TopicRecord", {"name": f"topic-{t:05d}", "topic_id": topic_id})
        offset += 1
        for p in range(per_topic):
            replicas = [(p + i) % 3 + 1 for i in range(3)]
            image.apply(offset, "PartitionRecord", {
                "partition_id": p, "topic_id": topic_id, "replicas": replicas, "isr": replicas,
                "removing_replicas": [], "adding_replicas": [], "leader": replicas[0], "leader_epoch": 0,
                "partition_epoch": 0})
            image.apply(offset + 1, "PartitionChangeRecord", {"partition_id": p, "topic_id": topic_id,
                                                              "leader": replicas[1]})
            offset += 2
    return image


def best_of(rounds: int, step) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(rounds):
        started = time.perf_counter()
        result = step()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    image = build_image(args.partitions, args.topics)
    count = sum(len(topic.partitions) for topic in image.topics.values())
    with tempfile.TemporaryDirectory(prefix="snapshot-bench-") as temp:
        directory = f"{temp}/{METADATA_PARTITION_DIR}"
        write_s, (snapshot_id, data) = best_of(args.rounds, lambda: snapshot_of(image, epoch=1))
        path = write_snapshot_file(directory, snapshot_id, data)

        def load() -> MetadataImage:
            loaded = MetadataImage()
            replay_snapshot(read_snapshot_file(path), loaded)
            return loaded

        load_s, loaded = best_of(args.rounds, load)
        assert sum(len(topic.partitions) for topic in loaded.topics.values()) == count
    print(f"{count} partitions in {len(image.topics)} topics: snapshot of {len(data) / 1e6:.1f} MB")
    print(f"  image to snapshot bytes: {write_s:.2f} s")
    print(f"  load (read, check, replay): {load_s:.2f} s")


if __name__ == "__main__":
    main()
