"""The controller's side of the legacy AlterConfigs: a topic's dynamic configs become the given set."""
import asyncio

from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage
from controller import topics

DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1}


def image_with_topic(configs: dict) -> MetadataImage:
    image = MetadataImage()
    outcome = asyncio.run(topics.create_topics(image, [1], [{"name": "orders", "num_partitions": 1, "replication_factor": 1,
                                                             "assignments": None, "configs": configs}], DEFAULTS))
    for offset, (name, fields) in enumerate(outcome.records):
        image.apply(offset, name, fields)
    return image


def replace(image: MetadataImage, configs: dict, name: str = "orders", kind: int = 2):
    outcome = asyncio.run(topics.replace_configs(image, [{"resource_type": kind, "resource_name": name,
                                                           "configs": configs}]))
    return [r["error_code"] for r in outcome.results], [(f["name"], f["value"]) for _, f in outcome.records]


def test_configs_not_named_are_reset_and_unchanged_ones_not_rewritten():
    image = image_with_topic({"retention.ms": "1000", "cleanup.policy": "compact"})
    codes, records = replace(image, {"retention.ms": "1000", "segment.ms": "60000"})
    assert codes == [ErrorCode.NONE]
    assert records == [("segment.ms", "60000"), ("cleanup.policy", None)]


def test_replacing_with_nothing_resets_every_config():
    codes, records = replace(image_with_topic({"retention.ms": "1000"}), {})
    assert (codes, records) == ([ErrorCode.NONE], [("retention.ms", None)])


def test_errors_write_nothing():
    image = image_with_topic({})
    assert replace(image, {"retention.ms": "1"}, name="missing") == ([ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], [])
    assert replace(image, {"retention.ms": "soon"}) == ([ErrorCode.INVALID_CONFIG], [])
    assert replace(image, {"no.such.config": "1"}) == ([ErrorCode.INVALID_CONFIG], [])
    assert replace(image, {}, name="") == ([ErrorCode.INVALID_REQUEST], [])
    assert replace(image, {}, kind=4, name="1") == ([ErrorCode.INVALID_REQUEST], [])
