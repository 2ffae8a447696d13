"""The Spark source's option parsing and offset arithmetic, which follow Spark's Kafka source; how a
transactional write task tells its last row from Spark cutting its rows short."""
from __future__ import annotations

import io
import os

import pytest

from spark_jobs.options import OffsetSpec, OptionError, consumer_config, sink_options, source_options
from tests.integration.spark_support import require_spark

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.fixture(scope="module", autouse=True)
def spark_installed():
    require_spark()


def test_options_arrive_lower_cased_and_keep_spark_meanings():
    options = source_options({**BOOTSTRAP, "subscribe": "a, b", "startingoffsets": '{"a": {"0": 5, "1": -2}}',
                              "maxoffsetspertrigger": "100", "kafka.fetch.min.bytes": "1"}, batch=False)
    assert options.topics == ("a", "b")
    assert options.starting == OffsetSpec("offsets", {"a": {0: 5, 1: -2}}, option="startingOffsets")
    assert options.max_offsets_per_trigger == 100
    assert options.client_config == {"bootstrap.servers": "127.0.0.1:9092", "fetch.min.bytes": "1"}


def test_a_global_timestamp_wins_over_per_partition_ones_and_offsets():
    options = source_options({**BOOTSTRAP, "assign": '{"a": [0]}', "startingoffsets": "earliest",
                              "startingoffsetsbytimestamp": '{"a": {"0": 7}}', "startingtimestamp": "9"}, batch=True)
    assert options.starting == OffsetSpec("timestamp", timestamp=9, option="startingTimestamp")
    assert options.assigned == (("a", 0),)


@pytest.mark.parametrize("options, batch, message", [
    ({"subscribe": "a", "kafka.bootstrap.servers": ""}, True, "'kafka.bootstrap.servers' must be specified"),
    ({**BOOTSTRAP, "subscribe": "a", "startingoffsets": "latest"}, True, "cannot be latest for batch"),
    ({**BOOTSTRAP, "subscribe": "a", "startingoffsets": '{"a": {"0": -1}}'}, True, "offset -1 for a-0"),
    ({**BOOTSTRAP, "subscribe": "a", "endingoffsets": "latest"}, False, "not supported for streaming"),
    ({**BOOTSTRAP, "subscribe": "a", "maxoffsetspertrigger": "0"}, False, "'maxoffsetspertrigger' must be a positive"),
    ({**BOOTSTRAP, "subscribepattern": "("}, True, "'subscribePattern' is not a valid pattern"),
    ({**BOOTSTRAP, "assign": '{"a": ["0"]}'}, True, "Option 'assign' expects JSON"),
    ({**BOOTSTRAP, "subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "'enable.auto.commit' is not"),
])
def test_bad_options_name_the_option(options, batch, message):
    with pytest.raises(OptionError, match=message):
        source_options(options, batch=batch)


def test_max_offsets_per_trigger_is_shared_by_lag_and_never_starves_a_partition():
    from spark_jobs.source import rate_limit

    starts = {("t", 0): 0, ("t", 1): 0}
    assert rate_limit(starts, {("t", 0): 100, ("t", 1): 300}, 100) == {("t", 0): 25, ("t", 1): 75}
    assert rate_limit(starts, {("t", 0): 1, ("t", 1): 1000}, 10) == {("t", 0): 1, ("t", 1): 9}
    assert rate_limit(starts, {("t", 0): 0, ("t", 1): 0}, 10) == {("t", 0): 0, ("t", 1): 0}


def test_min_partitions_splits_partitions_in_proportion_to_their_size():
    from spark_jobs.planning import OffsetRange, offset_ranges

    starts, ends = {("t", 0): 0, ("t", 1): 0, ("t", 2): 4}, {("t", 0): 90, ("t", 1): 10, ("t", 2): 4}
    assert offset_ranges(starts, ends, None) == [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)]
    split = offset_ranges(starts, ends, 10)
    assert [(r.partition, r.start, r.end) for r in split] == [(0, 10 * i, 10 * i + 10) for i in range(9)] + [(1, 0, 10)]


def test_lost_offsets_fail_or_move_to_the_log_start():
    from spark_jobs.planning import DataLossError, check_data_loss

    with pytest.raises(DataLossError, match="Offsets 3-9 of t-0 are no longer in the topic"):
        check_data_loss({("t", 0): 3}, {("t", 0): 10}, {("t", 0): 20}, fail=True)
    assert check_data_loss({("t", 0): 3}, {("t", 0): 10}, {("t", 0): 20}, fail=False) == {("t", 0): 10}


def test_isolation_level_defaults_to_javas_read_uncommitted_and_is_checked():
    default = source_options({**BOOTSTRAP, "subscribe": "a"}, batch=True)
    assert not default.read_committed and consumer_config(default)["isolation.level"] == "read_uncommitted"
    committed = source_options({**BOOTSTRAP, "subscribe": "a", "kafka.isolation.level": "READ_COMMITTED"}, batch=True)
    assert committed.read_committed and consumer_config(committed)["isolation.level"] == "read_committed"
    with pytest.raises(OptionError, match="'isolation.level' must be read_uncommitted or read_committed"):
        source_options({**BOOTSTRAP, "subscribe": "a", "kafka.isolation.level": "committed"}, batch=True)


@pytest.mark.parametrize("options, message", [
    ({"kafka.transactional.id": "x"}, "set the sink option 'transactionalIdPrefix' instead"),
    ({"transactionalidprefix": " "}, "'transactionalIdPrefix' must not be empty"),
    ({"transactionalidprefix": "p", "kafka.acks": "1"}, "'acks' must be all with 'transactionalIdPrefix'"),
    ({"transactionalidprefix": "p", "kafka.enable.idempotence": "false"}, "cannot be false"),
])
def test_transactional_sink_options_are_checked(options, message):
    with pytest.raises(OptionError, match=message):
        sink_options({**BOOTSTRAP, "topic": "t", **options})
    assert sink_options({**BOOTSTRAP, "transactionalidprefix": "job-7"}).transactional_id_prefix == "job-7"


def test_a_write_task_tells_its_last_row_from_spark_cutting_its_input():
    from spark_jobs.task_input import END_OF_STREAM, UnknownTaskInput, input_ended_cleanly

    # What pyspark.worker.main looks like from up the stack: a function `main` of pyspark/worker.py with `infile`.
    namespace = {"check": input_ended_cleanly}
    exec(compile("def main(infile, outfile):\n    return check()\n", os.path.join("site", "pyspark", "worker.py"),
                 "exec"), namespace)
    worker_input = io.BufferedReader(io.BytesIO(END_OF_STREAM + b"more"))
    assert namespace["main"](worker_input, None) is True
    assert worker_input.read() == END_OF_STREAM + b"more"  # peeked at, not consumed
    assert namespace["main"](io.BufferedReader(io.BytesIO(b"")), None) is False  # Spark closed it: rows cut short
    with pytest.raises(UnknownTaskInput):
        input_ended_cleanly()
