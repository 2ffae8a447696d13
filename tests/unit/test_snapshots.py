"""Metadata snapshots: Kafka's `.checkpoint` layout, refusing damaged files, the image round trip,
and the controller's snapshot-then-trim cycle."""
import asyncio
import logging
import shutil
import struct
import uuid
from pathlib import Path

import crc32c
import pytest

from cluster.formats.image import CONFIG_RESOURCE_GROUP, MetadataImage
from cluster.formats.metadata_log import (
    METADATA_PARTITION_DIR, MetadataLogGap, load_metadata_image, load_snapshot_and_log,
)
from cluster.formats.metadata_records import encode_metadata_batch, encode_record, iter_metadata_records
from cluster.formats.records import iter_batch_headers, iter_records
from cluster.formats.partition_log import PartitionLog
from cluster.formats.snapshots import (
    CorruptSnapshotError, SnapshotBuilder, SnapshotId, delete_snapshots_before, footer_batch, header_batch,
    image_records, list_snapshots, parse_snapshot, parse_snapshot_name, read_snapshot_file, replay_snapshot,
    snapshot_file_name, snapshot_of, snapshot_path, write_snapshot_file,
)
from cluster.formats.varints import write_varint
from controller.metadata_writer import MetadataWriter

# Beside the checkout (or beside the directory of its worktrees).
FIXTURE_CANDIDATES = [parent / "shared" / "fixtures" / "kafka-3.7-kraft-logdir"
                      for parent in Path(__file__).resolve().parents]
FIXTURE = next((path for path in FIXTURE_CANDIDATES if path.is_dir()), FIXTURE_CANDIDATES[0])
NOW = 1_700_000_000_123


def comparable(image: MetadataImage) -> dict:
    """The image's content, without the counters that only say how often it changed."""
    fields = dict(vars(image))
    del fields["changes"], fields["acl_changes"]
    return fields


def round_trip(image: MetadataImage) -> MetadataImage:
    snapshot_id, data = snapshot_of(image, epoch=1, now_ms=NOW)
    rebuilt = MetadataImage(cluster_id=image.cluster_id)
    replay_snapshot(parse_snapshot(data, snapshot_id), rebuilt)
    return rebuilt


# --- Kafka's layout ---

def test_file_names_are_kafkas():
    snapshot_id = SnapshotId(12345, 7)
    assert snapshot_file_name(snapshot_id) == "00000000000000012345-0000000007.checkpoint"
    assert parse_snapshot_name("00000000000000012345-0000000007.checkpoint") == snapshot_id
    assert parse_snapshot_name("00000000000000012345-0000000007-99.checkpoint.part") is None
    assert parse_snapshot_name("00000000000000012345-0000000007.checkpoint.deleted") is None
    assert parse_snapshot_name("00000000000000000000.log") is None


def kafka_control_batch(control_type: int, value: bytes, base_offset: int, epoch: int, timestamp: int) -> bytes:
    """A one-record control batch laid out by hand from Kafka's DefaultRecordBatch and DefaultRecord."""
    key = struct.pack(">hh", 0, control_type)
    body = bytearray(b"\x00")  # attributes
    write_varint(0, body)  # timestamp delta
    write_varint(0, body)  # offset delta
    write_varint(len(key), body)
    body += key
    write_varint(len(value), body)
    body += value
    write_varint(0, body)  # headers
    record = bytearray()
    write_varint(len(body), record)
    record += body
    after_crc = struct.pack(">hiqqqhii", 0x20, 0, timestamp, timestamp, -1, -1, -1, 1) + record
    length = 4 + 1 + 4 + len(after_crc)  # partition leader epoch, magic, crc, the rest
    return (struct.pack(">qiib", base_offset, length, epoch, 2) + struct.pack(">I", crc32c.crc32c(after_crc))
            + after_crc)


def test_header_and_footer_control_batches_are_byte_for_byte_kafkas():
    header_value = struct.pack(">hq", 0, 1_699_999_999_000) + b"\x00"  # version, timestamp, no tagged fields
    assert header_batch(5, 1_699_999_999_000, NOW) == kafka_control_batch(3, header_value, 0, 5, NOW)
    assert footer_batch(42, 5, NOW) == kafka_control_batch(4, b"\x00\x00\x00", 42, 5, NOW)


def test_a_snapshot_is_header_records_footer_at_offsets_from_zero(tmp_path):
    builder = SnapshotBuilder(SnapshotId(2500, 3), last_contained_log_timestamp=NOW - 5, now_ms=NOW)
    records = [("FeatureLevelRecord", {"name": f"feature-{i}", "feature_level": i % 7}) for i in range(2100)]
    builder.add(records[:150])
    builder.add(records[150:])
    path = write_snapshot_file(tmp_path, builder.snapshot_id, builder.finish())
    assert path.name == "00000000000000002500-0000000003.checkpoint"
    assert list(tmp_path.iterdir()) == [path]  # the .part file was renamed
    snapshot = read_snapshot_file(path)
    assert snapshot.last_contained_log_timestamp == NOW - 5
    assert [(offset, fields["name"]) for offset, _, fields in snapshot.records()] == [
        (i + 1, f"feature-{i}") for i in range(2100)]
    data = path.read_bytes()
    assert data.startswith(header_batch(3, NOW - 5, NOW))
    assert data.endswith(footer_batch(2101, 3, NOW))


# --- refusing damaged snapshots ---

@pytest.fixture
def snapshot_bytes():
    image = MetadataImage(offset=9)
    image.features["metadata.version"] = 19
    image.next_producer_id = 3000
    return snapshot_of(image, epoch=1, now_ms=NOW)


def test_a_snapshot_cut_short_is_refused(snapshot_bytes):
    snapshot_id, data = snapshot_bytes
    with pytest.raises(CorruptSnapshotError, match=r"^cut is cut short: the batch at byte \d+ needs \d+ bytes"):
        parse_snapshot(data[:-5], snapshot_id, "cut")
    footer = len(footer_batch(0, 1, NOW))
    with pytest.raises(CorruptSnapshotError, match=r"^cut is cut short: no snapshot footer$"):
        parse_snapshot(data[:-footer], snapshot_id, "cut")
    with pytest.raises(CorruptSnapshotError, match=r"^cut is empty$"):
        parse_snapshot(b"", snapshot_id, "cut")


def test_a_damaged_snapshot_is_refused(snapshot_bytes):
    snapshot_id, data = snapshot_bytes
    damaged = bytearray(data)
    first_records = len(header_batch(1, 0, NOW))
    assert first_records == 83
    damaged[first_records + 70] ^= 0xFF
    with pytest.raises(CorruptSnapshotError,
                       match=r"^bad: the batch at byte 83 is corrupt: record batch CRC mismatch$"):
        parse_snapshot(bytes(damaged), snapshot_id, "bad")
    without_header = data[len(header_batch(1, 0, NOW)):]
    with pytest.raises(CorruptSnapshotError, match=r"starts at offset 1, expected 0$"):
        parse_snapshot(without_header, snapshot_id, "bad")
    with pytest.raises(CorruptSnapshotError, match=r"^bad: \d+ bytes after the snapshot footer$"):
        parse_snapshot(data + data, snapshot_id, "bad")


def metadata_log_with(directory: Path, batches: list[list[tuple[str, dict]]]) -> PartitionLog:
    log = PartitionLog(directory, topic_id=uuid.UUID(int=1))
    for records in batches:
        log.append_as_follower(encode_metadata_batch(records, base_offset=log.log_end_offset, leader_epoch=1,
                                                     timestamp=NOW))
    return log


def feature(name: str, level: int) -> tuple[str, dict]:
    return "FeatureLevelRecord", {"name": name, "feature_level": level}


def test_start_up_falls_back_from_a_damaged_snapshot_with_one_warning(tmp_path, caplog):
    directory = tmp_path / METADATA_PARTITION_DIR
    log = metadata_log_with(directory, [[feature("a", 1)], [feature("b", 2)], [feature("a", 3)]])
    older = MetadataImage()
    older.apply(0, *feature("a", 1))
    write_snapshot_file(directory, *snapshot_of(older, epoch=1, now_ms=NOW))
    newer_id, newer = snapshot_of(MetadataImage(offset=1, features={"a": 1, "b": 2}), epoch=1, now_ms=NOW)
    write_snapshot_file(directory, newer_id, newer[:-1])
    image = MetadataImage()
    with caplog.at_level(logging.INFO):
        assert load_snapshot_and_log(directory, log, image) == SnapshotId(1, 1)
    assert image.features == {"a": 3, "b": 2} and image.offset == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["metadata snapshot refused, falling back to an older snapshot or the log: "
                        "00000000000000000002-0000000001.checkpoint is cut short: "
                        "the batch at byte 174 needs 75 bytes, 74 remain"]


def test_no_valid_snapshot_reaching_the_log_start_is_refused(tmp_path):
    directory = tmp_path / METADATA_PARTITION_DIR
    log = metadata_log_with(directory, [[feature("a", 1)], [feature("b", 2)]])
    log.roll()
    log.append_as_follower(encode_metadata_batch([feature("c", 3)], base_offset=2, leader_epoch=1, timestamp=NOW))
    snapshot_id, data = snapshot_of(MetadataImage(offset=1, features={"a": 1, "b": 2}), epoch=1, now_ms=NOW)
    write_snapshot_file(directory, snapshot_id, data[:-1])
    log.advance_log_start_offset(2)
    with pytest.raises(MetadataLogGap, match="starts at offset 2 and no valid snapshot reaches it"):
        load_snapshot_and_log(directory, log, MetadataImage())


def test_listing_and_deleting_older_snapshots(tmp_path):
    for end in (5, 10, 20):
        write_snapshot_file(tmp_path, *snapshot_of(MetadataImage(offset=end - 1), epoch=1, now_ms=NOW))
    (tmp_path / "00000000000000000030-0000000001-123.checkpoint.part").write_bytes(b"partial")
    assert list_snapshots(tmp_path) == [SnapshotId(5, 1), SnapshotId(10, 1), SnapshotId(20, 1)]
    assert delete_snapshots_before(tmp_path, SnapshotId(20, 1)) == [SnapshotId(5, 1), SnapshotId(10, 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000020-0000000001.checkpoint"]


# --- the image round trip ---

def every_kind_of_record() -> list[tuple[str, dict]]:
    topic_a, topic_b, gone = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    endpoint = {"name": "PLAINTEXT", "host": "localhost", "port": 9092, "security_protocol": 0}
    acl = {"resource_type": 2, "resource_name": "orders", "pattern_type": 3, "principal": "User:alice",
           "host": "*", "operation": 3, "permission_type": 3}
    partition = {"replicas": [1, 2], "isr": [1, 2], "removing_replicas": [], "adding_replicas": [], "leader": 1,
                 "leader_epoch": 0, "partition_epoch": 0}
    return [
        feature("metadata.version", 19), feature("group.version", 1),
        *[("RegisterBrokerRecord", {"broker_id": b, "incarnation_id": uuid.uuid4(), "broker_epoch": 10 + b,
                                    "end_points": [endpoint], "rack": "r1" if b == 1 else None, "fenced": True})
          for b in (1, 2, 3)],
        ("UnfenceBrokerRecord", {"id": 1, "epoch": 11}), ("UnfenceBrokerRecord", {"id": 2, "epoch": 12}),
        ("BrokerRegistrationChangeRecord", {"broker_id": 2, "broker_epoch": 12, "in_controlled_shutdown": 1}),
        ("TopicRecord", {"name": "orders", "topic_id": topic_a}),
        *[("PartitionRecord", {"partition_id": p, "topic_id": topic_a, **partition}) for p in range(3)],
        ("PartitionChangeRecord", {"partition_id": 1, "topic_id": topic_a, "leader": 2, "isr": [2]}),
        ("PartitionChangeRecord", {"partition_id": 2, "topic_id": topic_a, "adding_replicas": [3],
                                   "replicas": [1, 2, 3]}),
        ("TopicRecord", {"name": "payments", "topic_id": topic_b}),
        ("PartitionRecord", {"partition_id": 0, "topic_id": topic_b, **partition, "leader_recovery_state": 1}),
        ("TopicRecord", {"name": "gone", "topic_id": gone}),
        ("ConfigRecord", {"resource_type": 2, "resource_name": "gone", "name": "retention.ms", "value": "1"}),
        ("RemoveTopicRecord", {"topic_id": gone}),
        ("ConfigRecord", {"resource_type": 2, "resource_name": "orders", "name": "cleanup.policy", "value": "compact"}),
        ("ConfigRecord", {"resource_type": 4, "resource_name": "", "name": "log.retention.ms", "value": "5"}),
        ("ConfigRecord", {"resource_type": CONFIG_RESOURCE_GROUP, "resource_name": "g1",
                          "name": "consumer.session.timeout.ms", "value": "50000"}),
        ("ClientQuotaRecord", {"entity": [{"entity_type": "user", "entity_name": None}], "key": "producer_byte_rate",
                               "value": 1024.0, "remove": False}),
        ("ClientQuotaRecord", {"entity": [{"entity_type": "client-id", "entity_name": "c"},
                                          {"entity_type": "user", "entity_name": "u"}],
                               "key": "request_percentage", "value": 12.5, "remove": False}),
        ("ProducerIdsRecord", {"broker_id": 1, "broker_epoch": 11, "next_producer_id": 2000}),
        ("AccessControlEntryRecord", {"id": uuid.uuid4(), **acl}),
        ("AccessControlEntryRecord", {"id": uuid.uuid4(), **acl, "operation": 4}),
        ("UserScramCredentialRecord", {"name": "alice", "mechanism": 1, "salt": b"s1", "stored_key": b"k1",
                                       "server_key": b"v1", "iterations": 4096}),
        ("UserScramCredentialRecord", {"name": "alice", "mechanism": 2, "salt": b"s2", "stored_key": b"k2",
                                       "server_key": b"v2", "iterations": 8192}),
    ]


def test_replaying_a_snapshot_recreates_the_image_it_was_taken_of():
    image = MetadataImage(cluster_id="c1")
    for offset, (name, fields) in enumerate(every_kind_of_record()):
        image.apply(offset, name, fields)
    assert image.configs and image.client_quotas and image.acls and image.scram_credentials
    assert comparable(round_trip(image)) == comparable(image)
    records = list(image_records(image))
    assert records[0] == ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 19})
    assert [name for name, _ in records].count("PartitionRecord") == 4
    assert "gone" not in {fields.get("resource_name") for _, fields in records}


def test_partition_records_sharing_a_tail_encode_and_decode_as_each_alone():
    image = MetadataImage(offset=500)
    for t in range(3):
        topic_id = uuid.uuid4()
        image.apply(0, "TopicRecord", {"name": f"t{t}", "topic_id": topic_id})
        for p in range(40):
            replicas = [(p + i) % 4 + 1 for i in range(3)]
            image.apply(0, "PartitionRecord", {
                "partition_id": p, "topic_id": topic_id, "replicas": replicas, "isr": replicas[:1 + p % 3],
                "removing_replicas": [], "adding_replicas": [], "leader": replicas[p % 2], "leader_epoch": p % 5,
                "partition_epoch": p % 7})
    snapshot_id, data = snapshot_of(image, epoch=1, now_ms=NOW)
    values = [record.value for position, header in iter_batch_headers(data) if not header.is_control
              for record in iter_records(memoryview(data)[position:position + header.size])]
    assert values == [encode_record(name, fields) for name, fields in image_records(image)]
    assert list(parse_snapshot(data, snapshot_id).records()) == list(iter_metadata_records(data))


def test_kafka_37_fixture_image_survives_a_snapshot(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"Kafka 3.7 fixture not beside this checkout ({FIXTURE})")
    log_dir = tmp_path / "logdir"
    shutil.copytree(FIXTURE, log_dir)
    image = load_metadata_image(log_dir)
    assert len(image.topics) == 5 and image.offset > 4900
    assert comparable(round_trip(image)) == comparable(image)
    # And a snapshot in Kafka's own log dir is what a later load starts from.
    directory = log_dir / METADATA_PARTITION_DIR
    write_snapshot_file(directory, *snapshot_of(image, epoch=1, now_ms=NOW))
    assert comparable(load_metadata_image(log_dir)) == comparable(image)


# --- the controller ---

async def write_topics(writer: MetadataWriter, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        topic_id = uuid.uuid4()
        async with writer.exclusive:
            await writer.append([("TopicRecord", {"name": f"t{i}", "topic_id": topic_id}),
                                 ("PartitionRecord", {"partition_id": 0, "topic_id": topic_id, "replicas": [1],
                                                      "isr": [1], "leader": 1, "leader_epoch": 0,
                                                      "partition_epoch": 0})])


def test_the_controller_snapshots_past_the_byte_limit_and_restarts_from_it(tmp_path):
    async def scenario():
        writer = MetadataWriter(tmp_path, "cluster-1")
        writer.snapshot_bytes = 2000
        await write_topics(writer, 30)
        while writer._snapshot_task is not None and not writer._snapshot_task.done():
            await asyncio.sleep(0.01)
        directory = tmp_path / METADATA_PARTITION_DIR
        snapshots = list_snapshots(directory)
        assert len(snapshots) == 1 and snapshots[0] == writer.snapshot_id
        assert writer.log_start_offset == writer.snapshot_id.end_offset
        assert sorted(int(p.stem) for p in directory.glob("*.log"))[0] == writer.snapshot_id.end_offset
        assert writer.read_snapshot(writer.snapshot_id, 0, 100)["data"] == \
            snapshot_path(directory, writer.snapshot_id).read_bytes()[:100]
        assert writer.read_snapshot(SnapshotId(1, 1), 0, 100) == {"error_code": 98}
        await write_topics(writer, 2, start=30)
        expected = comparable(writer.image)
        writer.close()
        reopened = MetadataWriter(tmp_path, "cluster-1")
        assert reopened.snapshot_id == snapshots[-1]
        # Restarted, it leads a new epoch, whose first entry is a LeaderChangeMessage one offset on.
        assert comparable(reopened.image) == {**expected, "offset": expected["offset"] + 1}
        assert len(reopened.image.topics) == 32
        reopened.close()
    asyncio.run(scenario())


def test_the_controller_snapshots_after_the_interval_and_reads_its_settings(tmp_path):
    from cluster.formats.config import BrokerConfig

    async def scenario():
        writer = MetadataWriter(tmp_path, "cluster-1")
        assert (writer.snapshot_bytes, writer.snapshot_interval_s) == (20 * 1024 * 1024, 3600.0)
        writer.configure_snapshots(BrokerConfig({"metadata.log.max.record.bytes.between.snapshots": "4096",
                                                 "metadata.log.max.snapshot.interval.ms": "50"}))
        assert (writer.snapshot_bytes, writer.snapshot_interval_s) == (4096, 0.05)
        await write_topics(writer, 1)
        assert writer.snapshot_id is None
        await asyncio.sleep(0.3)
        # Offset 0 is the LeaderChangeMessage of the controller's first epoch.
        assert writer.snapshot_id == SnapshotId(3, 1) == list_snapshots(tmp_path / METADATA_PARTITION_DIR)[-1]
        writer.close()
    asyncio.run(scenario())


def test_a_fetch_below_the_log_start_is_answered_with_the_snapshot_in_chunks(tmp_path):
    from controller.server import Controller

    async def scenario():
        writer = MetadataWriter(tmp_path, "cluster-1")
        controller = Controller(writer, {}, 2000)
        controller.take_over()
        handlers = controller.handlers()
        await write_topics(writer, 5)
        snapshot_id = await writer.take_snapshot()
        await write_topics(writer, 1, start=5)
        below = await handlers["fetch_metadata"]({"offset": 0, "max_wait_ms": 0}, None)
        assert below == {"data": b"", "high_watermark": writer.end_offset, "snapshot_id": [11, 1]}
        at_start = await handlers["fetch_metadata"]({"offset": 11, "max_wait_ms": 0}, None)
        assert [name for _, name, _ in iter_metadata_records(at_start["data"])] == ["TopicRecord", "PartitionRecord"]
        whole = snapshot_path(tmp_path / METADATA_PARTITION_DIR, snapshot_id).read_bytes()
        chunks, position = [], 0
        while position < len(whole):
            reply = await handlers["fetch_snapshot"](
                {"end_offset": 11, "epoch": 1, "position": position, "max_bytes": 100}, None)
            assert reply["size"] == len(whole) and reply["position"] == position
            chunks.append(reply["data"])
            position += len(reply["data"])
        assert b"".join(chunks) == whole and len(chunks[0]) == 100
        assert (await handlers["fetch_snapshot"]({"end_offset": 11, "epoch": 1, "position": -1, "max_bytes": -5},
                                                 None)) == {"error_code": 99, "size": len(whole)}
        assert (await handlers["fetch_snapshot"]({"end_offset": 10, "epoch": 1, "position": 0, "max_bytes": None},
                                                 None)) == {"error_code": 98}
        writer.close()
    asyncio.run(scenario())


def test_a_snapshot_with_compressed_batches_reads_as_kafka_may_write_it():
    from cluster.formats.records import encode_records

    records = [feature(f"f{i}", i) for i in range(5)]
    compressed = encode_records([(NOW, None, encode_record(name, fields), ()) for name, fields in records],
                                compression=1, base_offset=1, leader_epoch=2)
    data = header_batch(2, NOW, NOW) + compressed + footer_batch(6, 2, NOW)
    snapshot = parse_snapshot(data, SnapshotId(40, 2))
    assert [(offset, fields["name"]) for offset, _, fields in snapshot.records()] == [
        (i + 1, f"f{i}") for i in range(5)]


def test_a_record_running_past_its_batch_is_refused_not_read_beyond():
    from cluster.formats.records import CorruptRecordError, seal_batch

    body = bytearray()
    write_varint(200, body)  # a record claiming 200 bytes, with 10 behind it
    body += bytes(10)
    data = header_batch(1, NOW, NOW) + seal_batch(body, 1, base_offset=1, timestamp=NOW) + footer_batch(2, 1, NOW)
    snapshot = parse_snapshot(data, SnapshotId(3, 1))
    with pytest.raises(CorruptRecordError, match="^metadata record at offset 1 runs past its batch$"):
        list(snapshot.records())


def test_start_up_falls_back_from_a_snapshot_whose_records_do_not_decode(tmp_path, caplog):
    from cluster.formats.records import seal_batch

    directory = tmp_path / METADATA_PARTITION_DIR
    log = metadata_log_with(directory, [[feature("a", 1)], [feature("b", 2)]])
    body = bytearray()
    write_varint(200, body)
    body += bytes(10)
    bad = header_batch(1, NOW, NOW) + seal_batch(body, 1, base_offset=1, timestamp=NOW) + footer_batch(2, 1, NOW)
    write_snapshot_file(directory, SnapshotId(1, 1), bad)
    image = MetadataImage()
    assert load_snapshot_and_log(directory, log, image) is None
    assert image.features == {"a": 1, "b": 2} and image.offset == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "metadata snapshot refused, falling back to an older snapshot or the log: "
        "00000000000000000001-0000000001.checkpoint: metadata record at offset 1 runs past its batch"]
