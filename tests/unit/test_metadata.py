import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from cluster.formats.image import MetadataImage
from cluster.formats.metadata_log import load_metadata_image
from cluster.formats.metadata_records import (
    RECORD_TYPES, decode_record, encode_metadata_batch, encode_record, iter_metadata_records,
)
from cluster.formats.records import CorruptRecordError, iter_batch_headers, iter_records
from cluster.formats.topic_ids import topic_id_from_kafka_string

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kafka-3.7-kraft-logdir"


@pytest.fixture
def kafka_log_dir(tmp_path):
    if not FIXTURE.is_dir():
        pytest.skip(f"Kafka 3.7 fixture not beside this checkout ({FIXTURE})")
    target = tmp_path / "logdir"
    shutil.copytree(FIXTURE, target)
    return target


def test_every_kafka_record_we_model_reencodes_to_identical_bytes(kafka_log_dir):
    data = (kafka_log_dir / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    checked = 0
    for position, header in iter_batch_headers(data):
        if header.is_control:
            continue
        for record in iter_records(data[position:position + header.size]):
            name, version, fields = decode_record(record.value)
            if fields is not None:
                assert encode_record(name, fields, version) == record.value, name
                checked += 1
    assert checked > 4900


def test_replaying_kafkas_metadata_log_gives_kafkas_topics(kafka_log_dir):
    image = load_metadata_image(kafka_log_dir)
    assert image.cluster_id == "q1w2e3r4t5y6u7i8o9p0"
    assert len(image.topics) == 5
    assert sum(len(t.partitions) for t in image.topics.values()) == 54
    assert image.topics["TestTopicPatient"].topic_id == topic_id_from_kafka_string("B3_HiNPgSQ6oxG9ZZ6ED5A")
    assert image.brokers[1].endpoints[0].port == 9092
    assert image.features == {"metadata.version": 19}
    for metadata in kafka_log_dir.glob("*-*/partition.metadata"):
        topic = metadata.parent.name.rsplit("-", 1)[0]
        if topic != "__cluster_metadata":
            expected = metadata.read_text().split("topic_id:")[1].strip()
            assert image.topics[topic].topic_id == topic_id_from_kafka_string(expected)


def test_round_trip_and_image_semantics():
    topic_id = uuid.uuid4()
    records = [
        ("RegisterBrokerRecord", {"broker_id": 1, "incarnation_id": uuid.uuid4(), "broker_epoch": 0,
                                  "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}],
                                  "features": [], "rack": None, "fenced": True}),
        ("UnfenceBrokerRecord", {"id": 1, "epoch": 0}),
        ("TopicRecord", {"name": "t", "topic_id": topic_id}),
        ("PartitionRecord", {"partition_id": 0, "topic_id": topic_id, "replicas": [1], "isr": [1], "leader": 1,
                             "leader_epoch": 0, "partition_epoch": 0}),
        ("PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "leader": 1}),
        ("PartitionChangeRecord", {"partition_id": 0, "topic_id": topic_id, "isr": [1]}),
        ("ConfigRecord", {"resource_type": 2, "resource_name": "t", "name": "retention.ms", "value": "5"}),
    ]
    for name, fields in records:
        decoded_name, _, decoded = decode_record(encode_record(name, fields))
        assert decoded_name == name
        assert {k: decoded[k] for k in fields} == fields
    image = MetadataImage()
    image.replay(encode_metadata_batch(records, base_offset=10, leader_epoch=1, timestamp=0))
    partition = image.topics["t"].partitions[0]
    assert (image.offset, image.brokers[1].fenced) == (16, False)
    assert (partition.leader_epoch, partition.partition_epoch) == (1, 2)
    assert image.topic_configs("t") == {"retention.ms": "5"}
    image.replay(encode_metadata_batch([("RemoveTopicRecord", {"topic_id": topic_id})], base_offset=17,
                                       leader_epoch=1, timestamp=0))
    assert image.topics == {} and image.topics_by_id == {} and image.configs == {}
    assert RECORD_TYPES["PartitionChangeRecord"] == 5


@pytest.mark.parametrize("garbage", [b"", b"\x01", b"\x01\x02\x00\xff", b"\x07\x02\x00", b"\x01\x03\x01" + b"\xff" * 9])
def test_garbage_gives_a_clean_error(garbage):
    with pytest.raises((CorruptRecordError, ValueError)):
        decode_record(garbage)


def test_every_truncation_of_a_record_is_a_clean_error():
    value = encode_record("PartitionChangeRecord", {
        "partition_id": 3, "topic_id": uuid.uuid4(), "isr": [1, 2], "leader": 2, "replicas": [1, 2, 3],
        "directories": [uuid.UUID(int=0)] * 3}, version=1)
    for end in range(len(value)):
        with pytest.raises((CorruptRecordError, ValueError)):
            decode_record(value[:end])


def test_control_batches_are_skipped(kafka_log_dir):
    data = (kafka_log_dir / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    names = {name for _, name, _ in iter_metadata_records(data)}
    assert "TopicRecord" in names and all(not n.startswith("LeaderChange") for n in names)


def test_a_batch_replayed_in_slices_shows_a_new_topic_only_whole_and_says_what_changed():
    topic_id, old_id = uuid.uuid4(), uuid.uuid4()
    partitions = 3000  # enough records for several slices
    setup = [("TopicRecord", {"name": "old", "topic_id": old_id}),
             ("PartitionRecord", {"partition_id": 0, "topic_id": old_id, "replicas": [1], "isr": [1], "leader": 1,
                                  "leader_epoch": 0, "partition_epoch": 0})]
    batch = [("TopicRecord", {"name": "big", "topic_id": topic_id})] + [
        ("PartitionRecord", {"partition_id": p, "topic_id": topic_id, "replicas": [1, 2], "isr": [1, 2],
                             "leader": 1 + p % 2, "leader_epoch": 0, "partition_epoch": 0}) for p in range(partitions)
    ] + [("PartitionChangeRecord", {"partition_id": 0, "topic_id": old_id, "leader": 1}),
         ("ConfigRecord", {"resource_type": 2, "resource_name": "big", "name": "retention.ms", "value": "5"}),
         ("RemoveTopicRecord", {"topic_id": old_id}),
         ("UnfenceBrokerRecord", {"id": 1, "epoch": 0})]
    data = encode_metadata_batch(batch, base_offset=2, leader_epoch=1, timestamp=0)
    expected, image = MetadataImage(), MetadataImage()
    for target in (expected, image):
        target.replay(encode_metadata_batch(setup, base_offset=0, leader_epoch=1, timestamp=0))
    expected.replay(data)

    async def replay_while_watching():
        seen = []

        async def watch():
            while True:
                topic = image.topics.get("big")
                seen.append(len(topic.partitions) if topic else None)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        delta = await image.replay_gently(data)
        watcher.cancel()
        return delta, seen

    delta, seen = asyncio.run(replay_while_watching())
    assert image == expected and image.offset == 2 + len(batch) - 1
    assert len(seen) > 2 and set(seen) <= {None, partitions}  # it gave way, and never showed a part
    assert delta.partitions == {(topic_id, p) for p in range(partitions)} | {(old_id, 0)}
    assert (delta.removed_topics, delta.config_topics, delta.records) == ({"old"}, {"big"}, len(batch))
    assert list(delta.new_topics) == ["big"]
