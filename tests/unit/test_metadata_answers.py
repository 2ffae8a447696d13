"""Metadata answers kept encoded per image state are byte for byte what kafka-python encodes
for the image as it is, at every version, before and after changes."""
import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from cluster.formats.config import BrokerConfig
from cluster.formats.metadata_records import encode_metadata_batch
from node.apis import metadata
from cluster.formats.listeners import ListenerSpec
from node.broker import Broker

TOPIC_IDS = {name: uuid.uuid4() for name in ("a", "b", "__consumer_offsets")}


def _register(node_id: int, fenced: bool = False) -> list[tuple[str, dict]]:
    endpoint = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9090 + node_id, "security_protocol": 0}
    records = [("RegisterBrokerRecord", {"broker_id": node_id, "incarnation_id": uuid.uuid4(), "broker_epoch": node_id,
                                         "end_points": [endpoint], "features": [], "rack": None, "fenced": True})]
    return records if fenced else records + [("UnfenceBrokerRecord", {"id": node_id, "epoch": node_id})]


def _topic(name: str, partitions: int) -> list[tuple[str, dict]]:
    topic_id = TOPIC_IDS[name]
    return [("TopicRecord", {"name": name, "topic_id": topic_id})] + [
        ("PartitionRecord", {"partition_id": index, "topic_id": topic_id, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                             "leader": 1 + index % 3, "leader_epoch": 0, "partition_epoch": 0})
        for index in range(partitions)]


class Node:
    """A node's broker state fed with records, as its metadata sync feeds it."""

    def __init__(self, tmp_path):
        self.broker = Broker(BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)}))
        self.broker.listeners = {"PLAINTEXT": ListenerSpec("PLAINTEXT", "127.0.0.1", 9091, "PLAINTEXT")}
        self.broker.image.cluster_id = "test-cluster"
        self.offset = 0

    def apply(self, records: list[tuple[str, dict]]) -> None:
        self.broker.image.replay(encode_metadata_batch(records, base_offset=self.offset, leader_epoch=1, timestamp=0))
        self.offset += len(records)

    def answer(self, version: int, names=None, unknown_ids=()) -> bytes:
        return metadata.answers_of(self.broker, "PLAINTEXT").body(version, names, tuple(unknown_ids))

    def encoded_afresh(self, version: int, names=None, unknown_ids=()) -> bytes:
        broker = self.broker
        names = sorted(broker.image.topics) if names is None else names
        topics = [metadata._describe_topic(broker, name, version) for name in names]
        topics += [metadata._unknown_topic_id(topic_id) for topic_id in unknown_ids]
        return metadata._response(broker, "PLAINTEXT", version, topics).encode(version=version)


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path)
    node.apply(_register(1) + _register(2) + _register(3) + _topic("a", 3) + _topic("b", 2)
               + _topic("__consumer_offsets", 1))
    return node


@pytest.mark.parametrize("version", range(metadata.VERSIONS[0], metadata.VERSIONS[1] + 1))
def test_kept_answers_are_what_kafka_python_encodes(node, version):
    unknown = [uuid.uuid4()] if version >= 10 else []
    for names, ids in ((None, []), (("b", "missing", "a"), unknown), ((), [])):
        assert node.answer(version, names, ids) == node.encoded_afresh(version, names, ids)
        assert node.answer(version, names, ids) == node.encoded_afresh(version, names, ids)  # from the cache


@pytest.mark.parametrize("version", [0, 1, 9, 12, 13])
def test_an_answer_follows_a_leader_change_a_new_partition_a_deletion_and_a_fence_at_once(node, version):
    before = MetadataResponse.decode(node.answer(version), version=version)
    assert [t.name for t in before.topics] == ["__consumer_offsets", "a", "b"]
    node.apply([
        ("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_IDS["a"], "leader": 3, "isr": [3, 2]}),
        ("PartitionRecord", {"partition_id": 3, "topic_id": TOPIC_IDS["a"], "replicas": [2, 3, 1],
                             "isr": [2, 3, 1], "leader": 2, "leader_epoch": 0, "partition_epoch": 0}),
        ("RemoveTopicRecord", {"topic_id": TOPIC_IDS["b"]}),
        ("FenceBrokerRecord", {"id": 2, "epoch": 2}),
    ])
    answer = node.answer(version)
    assert answer == node.encoded_afresh(version)
    after = MetadataResponse.decode(answer, version=version)
    assert sorted(b.node_id for b in after.brokers) == [1, 3]
    assert [t.name for t in after.topics] == ["__consumer_offsets", "a"]
    partitions = {p.partition_index: p for p in after.topics[1].partitions}
    assert (partitions[0].leader_id, partitions[0].isr_nodes) == (3, [3, 2])
    if version >= 7:
        assert partitions[0].leader_epoch == 1
    assert (partitions[3].error_code, partitions[3].leader_id) == (5, -1)  # LEADER_NOT_AVAILABLE: node 2 is fenced
    if version >= 5:
        assert partitions[1].offline_replicas == [2]


def test_topics_created_later_are_answered_and_unchanged_entries_kept(node):
    first = node.answer(12)
    kept = dict(metadata.answers_of(node.broker, "PLAINTEXT")._entries)
    TOPIC_IDS["c"] = uuid.uuid4()
    node.apply(_topic("c", 1))
    answer = node.answer(12)
    assert answer != first and answer == node.encoded_afresh(12)
    assert [t.name for t in MetadataResponse.decode(answer, version=12).topics] == ["__consumer_offsets", "a", "b", "c"]
    for key, entry in kept.items():
        assert metadata.answers_of(node.broker, "PLAINTEXT")._entries[key][1] is entry[1]
