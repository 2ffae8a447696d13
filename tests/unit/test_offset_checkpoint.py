"""Kafka's offset checkpoint files, as a Kafka 3.7 broker writes them and as we write them."""
import shutil

from cluster.formats.offset_checkpoint import HIGH_WATERMARK_CHECKPOINT, read_offset_checkpoint, write_offset_checkpoint


def test_reads_the_high_watermarks_kafka_checkpointed(shared_dir, tmp_path):
    shutil.copy(shared_dir / "fixtures" / "kafka-3.7-kraft-logdir" / HIGH_WATERMARK_CHECKPOINT, tmp_path)
    offsets = read_offset_checkpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT)
    assert len(offsets) == 54
    assert offsets[("TestTopicPatient", 0)] == 3
    assert offsets[("__consumer_offsets", 6)] == 13
    assert offsets[("Retry.TestTopicPatient", 0)] == 0


def test_writes_what_it_reads_and_refuses_other_formats(tmp_path):
    path = tmp_path / HIGH_WATERMARK_CHECKPOINT
    offsets = {("orders", 0): 42, ("orders", 1): 0, ("a topic.with-dots", 7): 1 << 40}
    write_offset_checkpoint(path, offsets)
    assert read_offset_checkpoint(path) == offsets
    assert path.read_text().splitlines()[:2] == ["0", "3"]
    for broken in ("1\n1\norders 0 4\n", "0\n2\norders 0 4\n", "0\n1\norders zero 4\n", ""):
        path.write_text(broken)
        assert read_offset_checkpoint(path) == {}
    assert read_offset_checkpoint(tmp_path / "absent") == {}
