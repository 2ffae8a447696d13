"""The controller's checks of GROUP config resources, as Kafka's GroupConfig validates them."""
import asyncio

import pytest

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.group_configs import duration_to_ms
from cluster.formats.image import CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC, MetadataImage
from controller import topics

SET, DELETE, APPEND = 0, 1, 2
BOUNDS = BrokerConfig()  # group.consumer.heartbeat.interval.ms 100..15000, session 1000..60000, ...


def incremental(image: MetadataImage, group: str, *changes: tuple[str, int, str | None]) -> topics.Outcome:
    resource = {"resource_type": CONFIG_RESOURCE_GROUP, "resource_name": group,
                "configs": [{"name": name, "op": op, "value": value} for name, op, value in changes]}
    return asyncio.run(topics.alter_configs(image, [resource], BOUNDS))


def applied(image: MetadataImage, outcome: topics.Outcome) -> MetadataImage:
    for name, fields in outcome.records:
        image.apply(len(image.configs) + 1, name, fields)
    return image


def answer(outcome: topics.Outcome) -> tuple[int, str | None]:
    [result] = outcome.results
    return result["error_code"], result["error_message"]


def test_a_group_config_within_its_bounds_is_written_as_a_group_config_record():
    outcome = incremental(MetadataImage(), "g", ("consumer.heartbeat.interval.ms", SET, "2000"),
                          ("share.auto.offset.reset", SET, "by_duration:PT1H30M"))
    assert answer(outcome) == (0, None)
    assert outcome.records == [
        ("ConfigRecord", {"resource_type": 32, "resource_name": "g", "name": "consumer.heartbeat.interval.ms",
                          "value": "2000"}),
        ("ConfigRecord", {"resource_type": 32, "resource_name": "g", "name": "share.auto.offset.reset",
                          "value": "by_duration:PT1H30M"})]


def test_deleting_a_group_config_writes_a_null_value_and_the_rest_stays():
    image = applied(MetadataImage(), incremental(MetadataImage(), "g", ("consumer.heartbeat.interval.ms", SET, "2000"),
                                                 ("share.isolation.level", SET, "read_committed")))
    assert image.configs[(CONFIG_RESOURCE_GROUP, "g")] == {"consumer.heartbeat.interval.ms": "2000",
                                                           "share.isolation.level": "read_committed"}
    outcome = incremental(image, "g", ("consumer.heartbeat.interval.ms", DELETE, None))
    assert answer(outcome) == (0, None)
    assert outcome.records == [("ConfigRecord", {"resource_type": 32, "resource_name": "g",
                                                 "name": "consumer.heartbeat.interval.ms", "value": None})]


@pytest.mark.parametrize("name, value, message", [
    ("consumer.heartbeat.interval.ms", "99",
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ("consumer.heartbeat.interval.ms", "15001",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "999",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("consumer.session.timeout.ms", "60001",
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "20000",
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "500",
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ("share.record.lock.duration.ms", "999",
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.record.lock.duration.ms", "3600001",
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ("consumer.session.timeout.ms", "ten",
     "Invalid value ten for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", "0",
     "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1"),
    ("share.isolation.level", "read_some",
     "Invalid value read_some for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ("share.auto.offset.reset", "by_duration:-PT1H",
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value "
     "`by_duration:-PT1H` for configuration share.auto.offset.reset. The value must be either 'earliest', "
     "'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."),
    ("session.timeout.ms", "10000", "Unknown group config name: session.timeout.ms"),
])
def test_a_group_config_out_of_bounds_or_unknown_is_invalid_config(name, value, message):
    outcome = incremental(MetadataImage(), "g", (name, SET, value))
    assert answer(outcome) == (ErrorCode.INVALID_CONFIG, message)
    assert outcome.records == []


def test_a_session_timeout_must_outlast_the_heartbeat_interval_as_the_group_would_have_them():
    image = applied(MetadataImage(), incremental(MetadataImage(), "g", ("consumer.session.timeout.ms", SET, "3000")))
    assert answer(incremental(image, "g", ("consumer.heartbeat.interval.ms", SET, "3000"))) == (
        ErrorCode.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert answer(incremental(image, "g", ("consumer.heartbeat.interval.ms", SET, "2999"))) == (0, None)


def test_no_group_config_is_a_list_and_an_empty_group_name_is_refused():
    assert answer(incremental(MetadataImage(), "g", ("consumer.session.timeout.ms", APPEND, "1"))) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")
    assert answer(incremental(MetadataImage(), "", ("consumer.session.timeout.ms", SET, "5000"))) == (
        ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")


def test_legacy_alter_configs_replaces_a_groups_configs_and_checks_them():
    image = applied(MetadataImage(), incremental(MetadataImage(), "g", ("share.isolation.level", SET, "read_committed")))
    resource = {"resource_type": CONFIG_RESOURCE_GROUP, "resource_name": "g",
                "configs": {"consumer.heartbeat.interval.ms": "1000"}}
    outcome = asyncio.run(topics.replace_configs(image, [resource], BOUNDS))
    assert answer(outcome) == (0, None)
    assert [(r[1]["name"], r[1]["value"]) for r in outcome.records] == [
        ("consumer.heartbeat.interval.ms", "1000"), ("share.isolation.level", None)]
    resource["configs"] = {"consumer.heartbeat.interval.ms": "1"}
    assert answer(asyncio.run(topics.replace_configs(image, [resource], BOUNDS)))[0] == ErrorCode.INVALID_CONFIG


def test_a_topic_and_a_group_of_one_name_are_told_apart():
    resource = {"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": "g",
                "configs": [{"name": "consumer.heartbeat.interval.ms", "op": SET, "value": "2000"}]}
    outcome = asyncio.run(topics.alter_configs(MetadataImage(), [resource], BOUNDS))
    assert answer(outcome) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic g does not exist")


@pytest.mark.parametrize("text, ms", [("PT1H", 3_600_000), ("P1DT30M", 88_200_000), ("pt1.5s", 1500),
                                      ("PT1,5S", 1500), ("PT0.0019S", 1), ("P2D", 172_800_000),
                                      ("P", None), ("PT", None), ("P1DT", None), ("1h", None),
                                      ("-PT1H", None), ("PT1.5H", None)])
def test_by_duration_is_read_as_it_is_validated(text, ms):
    assert duration_to_ms(text) == ms
    outcome = incremental(MetadataImage(), "g", ("share.auto.offset.reset", SET, f"by_duration:{text}"))
    assert answer(outcome)[0] == (ErrorCode.NONE if ms is not None else ErrorCode.INVALID_CONFIG)
