import shutil
import struct
import uuid
from pathlib import Path

import pytest

from cluster.formats.partition_dirs import parse_partition_dir_name
from cluster.formats.partition_log import LogConfig, OffsetOutOfRangeError, PartitionLog
from cluster.formats.records import CorruptRecordError, encode_batch, iter_batch_headers, iter_records, validate_batches
from cluster.formats.topic_ids import topic_id_from_kafka_string, topic_id_to_kafka_string

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kafka-3.7-kraft-logdir"


def batch(values, timestamp=1_000):
    return encode_batch([(None, v) for v in values], timestamp=timestamp)


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batch_headers(data)]


def fill(log: PartitionLog, batches: int, per_batch: int = 2) -> None:
    for i in range(batches):
        log.append(batch([b"value-%d-%d" % (i, j) for j in range(per_batch)], timestamp=1_000 + i), leader_epoch=0)


def test_offsets_are_assigned_and_every_offset_reads_its_batch(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 50)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 100, 100)
    for offset in range(100):
        first = offsets_of(log.read(offset, 1).records)
        assert first == [(offset - offset % 2, offset - offset % 2 + 1)]
    assert log.read(100, 1000).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(101, 1000)


def test_reads_respect_max_bytes_and_max_offset(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 10)
    one = len(log.read(0, 1).records)
    assert offsets_of(log.read(0, one * 3).records) == [(0, 1), (2, 3), (4, 5)]
    assert offsets_of(log.read(0, 10_000, max_offset=4).records) == [(0, 1), (2, 3)]


def test_segments_roll_by_size_and_reads_cross_them(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, index_interval_bytes=100))
    fill(log, 30)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert len(names) > 3 and names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    data = log.read(0, 1 << 20).records
    assert [o for o, _ in offsets_of(data)] == list(range(0, 60, 2))
    assert (tmp_path / "t-0" / names[1].replace(".log", ".index")).stat().st_size > 0


def test_reopen_gives_the_same_state_and_torn_tails_are_truncated(tmp_path):
    log = PartitionLog(tmp_path / "t-0", topic_id=uuid.UUID(int=7), config=LogConfig(segment_bytes=400))
    fill(log, 20)
    before = log.read(0, 1 << 20).records
    log.close()
    active = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    intact_size = active.stat().st_size
    with open(active, "ab") as handle:  # a batch cut off in the middle of its write
        handle.write(batch([b"torn"])[:30])
    reopened = PartitionLog(tmp_path / "t-0")
    assert reopened.topic_id == uuid.UUID(int=7)
    assert reopened.log_end_offset == 40
    assert reopened.read(0, 1 << 20).records == before
    assert active.stat().st_size == intact_size
    assert reopened.append(batch([b"next"]), leader_epoch=0).first_offset == 40


def test_corrupt_tail_batch_is_truncated(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 3)
    log.close()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert PartitionLog(tmp_path / "t-0").log_end_offset == 4


def test_missing_indexes_are_rebuilt(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, index_interval_bytes=100))
    fill(log, 30)
    log.close()
    for index in (tmp_path / "t-0").glob("*index"):
        index.unlink()
    reopened = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, index_interval_bytes=100))
    assert reopened.log_end_offset == 60
    assert offsets_of(reopened.read(37, 1).records) == [(36, 37)]
    assert all((tmp_path / "t-0" / f"{p.stem}.index").exists() for p in (tmp_path / "t-0").glob("*.log"))


def test_retention_deletes_old_segments(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, retention_ms=1_000))
    for i in range(20):
        log.append(batch([b"x" * 50], timestamp=1_000 + i), leader_epoch=0)
    segments = len(log.segments)
    deleted = log.enforce_retention(now_ms=10_000)
    assert deleted == segments - 1
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_leader_epoch_checkpoint(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 2)
    log.append(batch([b"a"]), leader_epoch=3)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 4\n"
    assert log.end_offset_for_epoch(0) == (0, 4)
    assert log.end_offset_for_epoch(2) == (0, 4)
    assert log.end_offset_for_epoch(3) == (3, 5)
    assert PartitionLog(tmp_path / "t-0").epochs == [(0, 0), (3, 4)]


def test_log_append_time_rewrites_timestamps_and_the_crc(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append(batch([b"a", b"b"], timestamp=5), leader_epoch=0, now_ms=1_234_567)
    assert info.log_append_time == 1_234_567
    data = log.read(0, 1000).records
    (_, header), = validate_batches(data)
    assert header.uses_log_append_time and header.max_timestamp == 1_234_567


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    for i in range(5):
        log.append(encode_batch([(None, b"v")], timestamp=100 * i), leader_epoch=0)
    assert log.offset_for_timestamp(150) == (2, 200)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(401) is None
    assert log.max_timestamp_and_offset() == (400, 4)


def test_truncate_to(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400))
    fill(log, 20)
    log.truncate_to(10)
    assert log.log_end_offset == 10
    assert offsets_of(log.read(0, 1 << 20).records)[-1] == (8, 9)
    assert log.append(batch([b"after"]), leader_epoch=0).first_offset == 10


def test_truncating_into_the_last_batch_keeps_every_batch_before_it(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 2)
    log.append(batch([b"tail"]), leader_epoch=1)
    log.truncate_to(4)  # the offset of the last batch written: only that batch goes
    assert log.log_end_offset == 4
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 1), (2, 3)]
    log.truncate_to(3)  # inside the last batch left: all of it goes
    assert log.log_end_offset == 2
    assert offsets_of(read_from_disk(tmp_path / "t-0", 0)) == [(0, 1)]


def test_names_and_topic_ids():
    assert parse_partition_dir_name("my-topic-3") == ("my-topic", 3)
    assert parse_partition_dir_name("__cluster_metadata-0") == ("__cluster_metadata", 0)
    assert parse_partition_dir_name("meta.properties") is None
    topic_id = uuid.uuid4()
    assert topic_id_from_kafka_string(topic_id_to_kafka_string(topic_id)) == topic_id
    assert topic_id_to_kafka_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_reads_a_partition_written_by_kafka(tmp_path):
    source = FIXTURE / "TestTopicPatient-0"
    if not source.is_dir():
        pytest.skip(f"Kafka 3.7 fixture not beside this checkout ({FIXTURE})")
    shutil.copytree(source, tmp_path / "TestTopicPatient-0")
    for path in (tmp_path / "TestTopicPatient-0").iterdir():
        path.chmod(0o644)
    log = PartitionLog(tmp_path / "TestTopicPatient-0")
    assert log.log_end_offset == 3
    assert topic_id_to_kafka_string(log.topic_id) == "B3_HiNPgSQ6oxG9ZZ6ED5A"
    assert log.read(0, 1 << 20).records == (source / "00000000000000000000.log").read_bytes()
    assert [r.offset for r in iter_records(log.read(2, 1).records)] == [2]


def test_reads_around_batches_larger_than_the_read_window(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    for i in range(5):
        log.append(batch([b"%d" % i * 100_000]), leader_epoch=0)
    assert offsets_of(log.read(3, 1000).records) == [(3, 3)]
    assert offsets_of(log.read(1, 250_000).records) == [(1, 1), (2, 2)]


def test_a_read_that_runs_out_of_budget_does_not_skip_into_the_next_segment(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=700))
    for value in (b"a", b"b" * 500, b"c"):
        log.append(batch([value]), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert offsets_of(log.read(0, 300).records) == [(0, 0)]
    assert offsets_of(log.read(1, 300).records) == [(1, 1)]
    assert offsets_of(log.read(1, 10_000).records) == [(1, 1), (2, 2)]


def test_index_files_hold_kafka_entries(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(index_interval_bytes=100))
    one = batch([b"x" * 20])
    for i in range(6):
        log.append(batch([b"x" * 20], timestamp=10 + i), leader_epoch=0)
    size = len(one)
    assert 50 < size <= 100  # entries go to the batch after more than 100 unindexed bytes
    expected = b"".join(struct.pack(">ii", o, o * size) for o in (2, 4))
    assert (tmp_path / "t-0" / "00000000000000000000.index").read_bytes() == expected
    assert (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes() == \
        struct.pack(">qi", 12, 2) + struct.pack(">qi", 14, 4)


def test_reopen_keeps_every_segment_fact(tmp_path):
    config = LogConfig(segment_bytes=400, index_interval_bytes=100)
    log = PartitionLog(tmp_path / "t-0", topic_id=uuid.UUID(int=5), config=config)
    for i in range(30):
        log.append(batch([b"v%d" % i] * 3, timestamp=[50, 10, 90][i % 3] + i), leader_epoch=i // 10)
    state = lambda l: ([(s.base_offset, s.next_offset, s.size, s.max_timestamp, s.max_timestamp_offset,
                         s.index_offsets, s.index_positions, s.time_index) for s in l.segments],
                       l.log_start_offset, l.log_end_offset, l.high_watermark, l.epochs,
                       l.max_timestamp_and_offset(), l.offset_for_timestamp(60), l.read(0, 1 << 20).records)
    before = state(log)
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", config=config)
    assert state(reopened) == before
    assert before[1:4] == (0, 90, 90) and before[4] == [(0, 0), (1, 30), (2, 60)]
    assert before[5:7] == ((119, 87), (6, 92))
    assert (tmp_path / "t-0" / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAABQ\n"


def test_garbage_after_the_last_batch_is_truncated(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 3)
    log.close()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    intact = segment.read_bytes()
    with open(segment, "ab") as handle:
        handle.write(b"\xff" * 100)
    reopened = PartitionLog(tmp_path / "t-0")
    assert reopened.log_end_offset == 6
    assert segment.read_bytes() == intact


def test_a_corrupt_index_is_rebuilt(tmp_path):
    config = LogConfig(segment_bytes=400, index_interval_bytes=100)
    log = PartitionLog(tmp_path / "t-0", config=config)
    fill(log, 30)
    expected = [(s.index_offsets, s.index_positions) for s in log.segments]
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.write_bytes(index.read_bytes() + struct.pack(">ii", 0, 0))  # a preallocated-looking tail
    reopened = PartitionLog(tmp_path / "t-0", config=config)
    assert [(s.index_offsets, s.index_positions) for s in reopened.segments] == expected
    assert index.stat().st_size == 8 * len(expected[0][0])


def test_retention_by_bytes_keeps_the_newest_segments(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, retention_ms=-1))
    for i in range(20):
        log.append(batch([b"x" * 50]), leader_epoch=0)
    sizes = [s.size for s in log.segments]
    log.config = LogConfig(segment_bytes=400, retention_ms=-1, retention_bytes=sum(sizes[-2:]))
    assert log.enforce_retention(now_ms=0) == len(sizes) - 2
    assert [s.size for s in log.segments] == sizes[-2:]
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_never_deletes_above_the_high_watermark(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, retention_ms=1_000))
    log.auto_high_watermark = False
    for i in range(20):
        log.append(batch([b"x" * 50], timestamp=1_000), leader_epoch=0)
    log.high_watermark = log.segments[2].base_offset
    assert log.enforce_retention(now_ms=10_000) == 2
    assert log.log_start_offset == log.high_watermark


def test_retention_moves_the_first_epoch_to_the_new_log_start(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400, retention_ms=1_000))
    for i in range(20):
        log.append(batch([b"x" * 50], timestamp=1_000), leader_epoch=i // 5)
    log.enforce_retention(now_ms=10_000)
    start = log.log_start_offset
    assert log.epochs[0] == ((start // 5), start)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text().split("\n")[2] == f"{start // 5} {start}"


def test_segments_roll_by_time_from_the_first_batch_timestamp(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_ms=1_000))
    log.append(batch([b"a"], timestamp=5_000), leader_epoch=0)
    log.append(batch([b"b"], timestamp=6_000), leader_epoch=0)
    log.append(batch([b"c"], timestamp=6_001), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert (tmp_path / "t-0" / "00000000000000000002.log").exists()


def test_end_offset_for_epoch_answers_as_kafka(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.append(batch([b"a", b"b"]), leader_epoch=2)
    log.append(batch([b"c"]), leader_epoch=4)
    log.append(batch([b"d"]), leader_epoch=7)
    assert log.epochs == [(2, 0), (4, 2), (7, 3)]
    assert log.end_offset_for_epoch(7) == (7, 4)
    assert log.end_offset_for_epoch(5) == (4, 3)
    assert log.end_offset_for_epoch(4) == (4, 3)
    assert log.end_offset_for_epoch(1) == (1, 0)
    assert log.end_offset_for_epoch(8) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_truncate_drops_the_batch_holding_the_offset_and_its_epochs(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 3)
    log.append(batch([b"x", b"y"]), leader_epoch=1)
    log.truncate_to(5)
    assert (log.log_end_offset, log.high_watermark, log.epochs) == (4, 4, [(0, 0)])
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 1), (2, 3)]
    log.truncate_to(0)
    assert (log.log_end_offset, log.read(0, 100).records) == (0, b"")


def test_follower_appends_keep_their_offsets(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    first = encode_batch([(None, b"a"), (None, b"b")], base_offset=0, timestamp=1, leader_epoch=3)
    second = encode_batch([(None, b"c")], base_offset=2, timestamp=2, leader_epoch=4)
    assert log.append_as_follower(first + second) == 3
    assert log.read(0, 1 << 20).records == first + second
    assert log.epochs == [(3, 0), (4, 2)]
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(first)
    third = encode_batch([(None, b"d")], base_offset=3, timestamp=3, leader_epoch=4)
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(third + third)
    assert log.log_end_offset == 3


def test_topic_configs_use_kafka_names():
    config = LogConfig.from_topic_configs({"segment.bytes": "1024", "retention.ms": "-1",
                                           "message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"})
    assert config == LogConfig(segment_bytes=1024, retention_ms=-1, message_timestamp_type="LogAppendTime",
                               cleanup_policy="compact")


def test_a_new_log_creates_its_index_files_only_when_it_needs_them(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, topic_id=uuid.UUID(int=7), config=LogConfig(index_interval_bytes=100))
    log.assign_epoch(3, 0)
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000000.log", "leader-epoch-checkpoint", "partition.metadata"]
    fill(log, 2)
    assert not (directory / "00000000000000000000.index").exists()
    fill(log, 10)  # past index.interval.bytes: the first entries create both files
    assert (directory / "00000000000000000000.index").stat().st_size > 0
    assert (directory / "00000000000000000000.timeindex").stat().st_size > 0


def test_a_log_without_index_files_reads_as_empty_indexes_and_a_clean_close_writes_them(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, topic_id=uuid.UUID(int=7))
    fill(log, 3)
    assert offsets_of(log.read(2, 1).records) == [(2, 3)]
    reopened_while_running = PartitionLog(directory)
    assert reopened_while_running.log_end_offset == 6 and reopened_while_running.topic_id == uuid.UUID(int=7)
    reopened_while_running.close()
    log.close()
    log.close()
    assert (directory / "00000000000000000000.index").read_bytes() == b""
    assert (directory / "00000000000000000000.timeindex").exists()
    assert PartitionLog(directory).log_end_offset == 6


def test_a_rolled_segment_keeps_both_index_files(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=10_000))
    fill(log, 1)
    log.roll()
    fill(log, 1)
    assert (tmp_path / "t-0" / "00000000000000000000.index").exists()
    assert (tmp_path / "t-0" / "00000000000000000000.timeindex").stat().st_size == 12
    assert not (tmp_path / "t-0" / "00000000000000000002.index").exists()


def read_from_disk(directory, offset: int, max_bytes: int = 1 << 20) -> bytes:
    """What a read finds in the files alone (a log just opened holds nothing in memory)."""
    reopened = PartitionLog(directory)
    try:
        return bytes(reopened.read(offset, max_bytes, max_offset=reopened.log_end_offset).records)
    finally:
        reopened.close()


def test_a_read_of_what_was_just_written_is_what_the_files_hold(tmp_path):
    leader, follower = PartitionLog(tmp_path / "t-0"), PartitionLog(tmp_path / "f-0")
    fill(leader, 3)
    leader.append(batch([b"a", b"b"]) + batch([b"c"]), leader_epoch=4)
    just_written = bytes(leader.read(6, 1 << 20).records)
    assert offsets_of(just_written) == [(6, 7), (8, 8)]
    assert just_written == read_from_disk(tmp_path / "t-0", 6)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).records))
    assert bytes(follower.read(0, 1 << 20).records) == read_from_disk(tmp_path / "f-0", 0)


def test_a_read_after_just_written_data_is_cut_back_and_rewritten_gets_the_new_batches(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    fill(log, 2)
    log.append(batch([b"old"]), leader_epoch=0)
    assert list(iter_records(log.read(4, 1 << 20).records))[0].value == b"old"
    log.truncate_to(4)
    log.append(batch([b"new"]), leader_epoch=1)
    assert [r.value for r in iter_records(log.read(4, 1 << 20).records)] == [b"new"]
    log.truncate_to(4)
    log.append(batch([b"large" * 4_000]), leader_epoch=2)  # larger than what is kept in memory
    assert [r.value for r in iter_records(log.read(4, 1 << 20).records)] == [b"large" * 4_000]
    log.truncate_fully_and_start_at(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1 << 20)


def test_a_read_of_just_written_data_keeps_to_the_high_watermark_and_max_bytes(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.auto_high_watermark = False  # a replicated partition's leader: followers move it
    first, second = batch([b"x" * 100]), batch([b"y" * 100])
    log.append(first + second, leader_epoch=0)
    assert log.read(0, 1 << 20).records == b""  # nothing committed yet
    log.high_watermark = 1
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 0)]
    log.high_watermark = 2
    assert offsets_of(log.read(0, len(first)).records) == [(0, 0)]
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 0), (1, 1)]


def test_batch_headers_walk_the_whole_log_in_chunks_above_the_high_watermark_too(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=400))
    fill(log, 20)
    log.high_watermark = 10  # a replica's log: what is above the high watermark is rebuilt from too
    walked = [(header.base_offset, [record.value for record in iter_records(data[position:position + header.size])])
              for data, position, header in log.batch_headers(chunk_bytes=150)]
    assert walked == [(2 * i, [b"value-%d-0" % i, b"value-%d-1" % i]) for i in range(20)]
    assert len(log.segments) > 1
