"""Converting groups between the classic and the consumer protocol (node.groups.migration), and the
consumer protocol's embedded Subscription and Assignment, checked against kafka-python's encoder."""
import struct
import uuid

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from node.groups.classic import STABLE, ClassicGroup, ClassicMember
from node.groups.consumer import MEMBER_STABLE, ClassicMemberMetadata, ConsumerGroup, ConsumerMember
from node.groups.migration import (
    CustomAssignorData, MalformedProtocol, NotUpgraded, all_classic_except, can_downgrade_without, check_upgrade,
    classic_group_from_consumer, consumer_group_from_classic, downgrade_enabled, upgrade_enabled,
)
from node.groups.records import decode_assignment, decode_subscription, encode_assignment

TOPIC_A, TOPIC_B = uuid.UUID(int=1), uuid.UUID(int=2)
IDS = {"a": TOPIC_A, "b": TOPIC_B}
NAMES = {v: k for k, v in IDS.items()}


def subscription(version: int, topics, owned=(), rack=None) -> bytes:
    tps = [ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=list(ps)) for t, ps in owned]
    return ConsumerProtocolSubscription(version=version, topics=list(topics), user_data=None, owned_partitions=tps,
                                        generation_id=7, rack_id=rack).encode(version=version)


def assignment(version: int, partitions: dict) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in partitions.items()]
    return ConsumerProtocolAssignment(version=version, assigned_partitions=tps, user_data=b"").encode(version=version)


def test_subscription_versions_decode():
    assert decode_subscription(subscription(0, ["a", "b"])).topics == ["a", "b"]
    v1 = decode_subscription(subscription(1, ["a"], owned=[("a", [0, 2])]))
    assert (v1.version, v1.owned_partitions, v1.generation, v1.rack_id) == (1, {"a": [0, 2]}, -1, None)
    v3 = decode_subscription(subscription(3, ["a"], owned=[("a", [1])], rack="rack-1"))
    assert (v3.owned_partitions, v3.generation, v3.rack_id) == ({"a": [1]}, 7, "rack-1")


def test_assignment_round_trips_with_kafka_python():
    data = assignment(1, {"a": [0, 1], "b": [3]})
    assert decode_assignment(data) == {"a": [0, 1], "b": [3]}
    ours = encode_assignment({"b": [3], "a": [1, 0]}, 3)
    decoded = ConsumerProtocolAssignment.decode(ours, version=3)
    assert [(tp.topic, tp.partitions) for tp in decoded.assigned_partitions] == [("a", [0, 1]), ("b", [3])]
    assert decoded.user_data is None
    assert ours[:2] == b"\x00\x03" and encode_assignment({}, 9)[:2] == b"\x00\x03"
    assert decode_assignment(b"") == {}


def test_truncated_protocol_bytes_raise():
    with pytest.raises(struct.error):
        decode_subscription(subscription(1, ["a"], owned=[("a", [0])])[:-3])


def classic_group(generation=5) -> ClassicGroup:
    group = ClassicGroup("g", 3, state=STABLE, generation=generation, protocol_type="consumer", protocol="range",
                         leader="m1")
    group.members["m1"] = ClassicMember("m1", None, "c1", "/10.0.0.1", 10_000, 30_000, "consumer",
                                        [("range", subscription(3, ["a", "b"], rack="r1")),
                                         ("roundrobin", subscription(3, ["a", "b"], rack="r1"))],
                                        assignment(3, {"a": [0, 1], "gone": [0]}))
    group.members["m2"] = ClassicMember("m2", "static-2", "c2", "/10.0.0.2", 12_000, 40_000, "consumer",
                                        [("range", subscription(1, ["a"]))], assignment(1, {"a": [2, 3]}))
    return group


def test_classic_group_becomes_consumer_group_as_from_classic_group():
    group = consumer_group_from_classic(classic_group(), IDS.get)
    assert (group.group_id, group.partition, group.group_epoch, group.assignment_epoch) == ("g", 3, 5, 5)
    m1, m2 = group.members["m1"], group.members["m2"]
    assert (m1.member_epoch, m1.previous_member_epoch, m1.state) == (5, 5, MEMBER_STABLE)
    assert (m1.rack_id, m1.client_id, m1.client_host, m1.rebalance_timeout_ms) == ("r1", "c1", "/10.0.0.1", 30_000)
    assert m1.subscribed_topic_names == ["a", "b"]
    assert m1.assigned == {TOPIC_A: {0, 1}}  # a topic the cluster no longer has is left out
    assert group.target == {"m1": {TOPIC_A: {0, 1}}, "m2": {TOPIC_A: {2, 3}}}
    assert m1.classic == ClassicMemberMetadata(10_000, classic_group().members["m1"].protocols)
    assert (m2.instance_id, m2.classic.session_timeout_ms) == ("static-2", 12_000)
    assert group.static_members == {"static-2": "m2"}
    assert group.state == "Stable"


def test_malformed_subscription_refuses_the_upgrade():
    classic = classic_group()
    classic.members["m2"].protocols = [("range", b"\x00\x01\x00")]
    with pytest.raises(MalformedProtocol):
        consumer_group_from_classic(classic, IDS.get)


def test_a_custom_assignors_user_data_refuses_the_upgrade():
    classic = classic_group()
    tps = [ConsumerProtocolAssignment.TopicPartition(topic="a", partitions=[2, 3])]
    classic.members["m2"].assignment = ConsumerProtocolAssignment(
        version=1, assigned_partitions=tps, user_data=b"custom").encode(version=1)
    with pytest.raises(CustomAssignorData):
        consumer_group_from_classic(classic, IDS.get)


def refusal(classic: ClassicGroup, policy: str, max_size: int) -> str | None:
    try:
        check_upgrade(classic, policy, max_size)
    except NotUpgraded as exc:
        return str(exc)
    return None


def test_upgrade_policy_protocol_type_and_size():
    classic = classic_group()
    assert refusal(classic, "bidirectional", 10) is None and refusal(classic, "UPGRADE", 10) is None
    disabled = "Cannot upgrade classic group g to consumer group because online upgrade is disabled."
    assert refusal(classic, "downgrade", 10) == refusal(classic, "disabled", 10) == disabled
    assert refusal(classic, "bidirectional", 1) == ("Cannot upgrade classic group g to consumer group because the "
                                                    "group size exceeds the consumer group maximum size.")
    classic.protocol_type = "connect"
    assert refusal(classic, "bidirectional", 10) == ("Cannot upgrade classic group g to consumer group because the "
                                                     "group does not use the consumer embedded protocol.")
    assert upgrade_enabled("bidirectional") and not downgrade_enabled("upgrade")


def consumer_group_with_one_modern_member() -> ConsumerGroup:
    group = consumer_group_from_classic(classic_group(), IDS.get)
    group.group_epoch = group.assignment_epoch = 8
    group.members["m3"] = ConsumerMember("m3", member_epoch=8, subscribed_topic_names=["a"])
    group.target = {"m1": {TOPIC_A: {0}}, "m2": {TOPIC_A: {1, 2}}, "m3": {TOPIC_A: {3}, TOPIC_B: set()}}
    return group


def test_downgrade_needs_the_last_consumer_protocol_member_to_leave():
    group = consumer_group_with_one_modern_member()
    assert all_classic_except(group, {"m3"}) and not all_classic_except(group, {"m1"})
    assert can_downgrade_without(group, {"m3"}, "bidirectional", 10)
    assert can_downgrade_without(group, {"m3"}, "downgrade", 10)
    assert not can_downgrade_without(group, {"m3"}, "upgrade", 10)
    assert not can_downgrade_without(group, {"m3"}, "bidirectional", 1)  # classic group max size
    assert not can_downgrade_without(group, {"m1"}, "bidirectional", 10)
    assert not can_downgrade_without(group, {"m1", "m2", "m3"}, "bidirectional", 10)  # nobody would remain
    alone = ConsumerGroup("g", 3, members={"m3": ConsumerMember("m3")})
    assert not can_downgrade_without(alone, {"m3"}, "bidirectional", 10)


def test_consumer_group_becomes_classic_group_as_from_consumer_group():
    classic = classic_group_from_consumer(consumer_group_with_one_modern_member(), {"m3"}, NAMES.get)
    assert (classic.group_id, classic.partition, classic.state, classic.generation) == ("g", 3, STABLE, 8)
    assert (classic.protocol_type, classic.protocol, classic.leader) == ("consumer", "range", None)
    assert list(classic.members) == ["m1", "m2"]
    m1, m2 = classic.members["m1"], classic.members["m2"]
    assert (m1.session_timeout_ms, m1.rebalance_timeout_ms, m1.client_id) == (10_000, 30_000, "c1")
    assert m2.group_instance_id == "static-2"
    # Each member's target assignment, in the version of its own subscription.
    assert m1.assignment == encode_assignment({"a": [0]}, 3)
    assert m2.assignment == encode_assignment({"a": [1, 2]}, 1) and m2.assignment[:2] == b"\x00\x01"
