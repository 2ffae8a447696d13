"""Metadata snapshots with a real cluster: the controller snapshots its image once
`metadata.log.max.record.bytes.between.snapshots` bytes were written and deletes the log before
it; a node added afterwards gets the snapshot and serves every topic to a real client; the
cluster restarted on the same data dir loads its snapshots and has every topic back."""
from __future__ import annotations

import time

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from cluster.formats.image import MetadataImage
from cluster.formats.metadata_log import load_metadata_image
from cluster.formats.snapshots import list_snapshots, parse_snapshot, replay_snapshot, snapshot_of, snapshot_path
from cluster.launch import Cluster

SNAPSHOT_BYTES = 4096
TOPICS = [f"snap-{i:02d}" for i in range(24)]
LATER_TOPICS = [f"snap-later-{i:02d}" for i in range(24)]


def metadata_dir(process_dir):
    return process_dir / "__cluster_metadata-0"


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def topics_at(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {name for name in admin.list_topics() if name.startswith("snap-")}
    finally:
        admin.close()


def log_bases(directory) -> list[int]:
    return sorted(int(path.stem) for path in directory.glob("*.log"))


def test_snapshot_trims_the_log_serves_a_new_node_and_survives_a_restart(tmp_path):
    data_dir = tmp_path / "kraftwerk"
    config = {"metadata.log.max.record.bytes.between.snapshots": str(SNAPSHOT_BYTES)}
    with Cluster(nodes=1, data_dir=data_dir, node_config=config) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(name, 2, 1) for name in TOPICS])
        finally:
            admin.close()
        controller_dir = metadata_dir(data_dir / "controller")
        snapshot = wait_for(lambda: list_snapshots(controller_dir), what="a controller snapshot")[-1]
        # The log before the snapshot is gone: the first segment starts at the snapshot's end.
        assert log_bases(controller_dir)[0] == snapshot.end_offset
        assert snapshot.epoch == 1
        assert snapshot_path(controller_dir, snapshot).name == f"{snapshot.end_offset:020d}-0000000001.checkpoint"

        new_node = cluster.add_node()
        node_dir = metadata_dir(data_dir / f"node-{new_node}")
        node_log = (data_dir / "logs" / f"node-{new_node}.log").read_text()
        assert ("metadata offset 0 is below the controller's log start: loading its snapshot "
                f"SnapshotId(end_offset={snapshot.end_offset}, epoch=1)") in node_log
        # It keeps the snapshot (or a later one of its own) and its log starts after it.
        kept = list_snapshots(node_dir)[-1]
        assert kept >= snapshot and log_bases(node_dir)[0] == kept.end_offset
        assert topics_at(cluster.address(cluster.nodes[new_node])) == set(TOPICS)
        # The first node, never behind, snapshotted its own copy of the log past the same byte limit.
        first_node_dir = metadata_dir(data_dir / "node-1")
        own = wait_for(lambda: list_snapshots(first_node_dir), what="node 1's own snapshot")[-1]
        assert log_bases(first_node_dir)[0] == own.end_offset > 0
        assert "loading its snapshot" not in (data_dir / "logs" / "node-1.log").read_text()

    with Cluster(nodes=2, data_dir=data_dir, node_config=config) as restarted:
        assert sorted(restarted.nodes) == [1, new_node]
        for node in restarted.nodes.values():
            assert topics_at(restarted.address(node)) == set(TOPICS)
        controller_log = (data_dir / "logs" / "controller.log").read_text()
        assert "loaded metadata snapshot SnapshotId(end_offset=" in controller_log

        # A node down while the log was trimmed again catches up from the newer snapshot.
        restarted.stop_node(new_node)
        before = list_snapshots(controller_dir)[-1]
        admin = KafkaAdminClient(bootstrap_servers=restarted.address(restarted.nodes[1]))
        try:
            admin.create_topics([NewTopic(name, 2, 1) for name in LATER_TOPICS])
        finally:
            admin.close()
        wait_for(lambda: list_snapshots(controller_dir)[-1] > before, what="a newer controller snapshot")
        restarted.restart_node(new_node)
        assert list_snapshots(node_dir)[-1] > before
        assert topics_at(restarted.address(restarted.nodes[new_node])) == set(TOPICS + LATER_TOPICS)

    # The image the real cluster's snapshot and log make is recreated whole by a snapshot of it.
    image = load_metadata_image(data_dir / "controller")
    assert {name for name in image.topics if name.startswith("snap-")} == set(TOPICS + LATER_TOPICS)
    snapshot_id, data = snapshot_of(image, epoch=1)
    rebuilt = MetadataImage(cluster_id=image.cluster_id)
    replay_snapshot(parse_snapshot(data, snapshot_id), rebuilt)
    assert {**vars(rebuilt), "changes": 0, "acl_changes": 0} == {**vars(image), "changes": 0, "acl_changes": 0}
    for log_file in (data_dir / "logs").glob("*.log"):
        assert " WARNING " not in log_file.read_text() and " ERROR " not in log_file.read_text(), log_file.name
