from node.groups.placement import java_string_hash, partition_for_group
from node.groups.records import (
    CommittedOffset, StoredGroup, StoredMember, decode_group_value, decode_key, decode_offset_value, group_key,
    group_value, offset_key, offset_value, subscription_topics,
)


def test_java_string_hash_matches_java():
    # Values of String.hashCode() in Java.
    assert java_string_hash("abc") == 96354
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("héllo") == 103094734
    assert java_string_hash("my-group") == -1906497762
    assert partition_for_group("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert partition_for_group("abc", 50) == 96354 % 50


def test_offset_commit_records_in_kafkas_layout():
    key = offset_key("g", "t", 3)
    assert key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert decode_key(key) == ("offset", "g", "t", 3)
    committed = CommittedOffset(42, 7, "meta", 1_700_000_000_000)
    value = offset_value(committed)
    assert value[:2] == b"\x00\x03" and len(value) == 2 + 8 + 4 + 2 + 4 + 8
    assert decode_offset_value(value) == committed


def test_group_metadata_records_round_trip():
    stored = StoredGroup("consumer", 5, "range", "m1", 123, [
        StoredMember("m1", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
        StoredMember("m2", "static-2", "client", "/127.0.0.1", 30000, 10000, b"", b""),
    ])
    assert decode_key(group_key("g")) == ("group", "g")
    assert decode_group_value(group_value(stored)) == stored


def test_subscription_topics():
    # ConsumerProtocolSubscription v0: version, [topics], user data
    subscription = b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert subscription_topics(subscription) == ["a", "bc"]
