from pathlib import Path

import pytest

from cluster.formats.records import (
    CorruptRecordError, HEADER_SIZE, UnsupportedMagicError, encode_batch, iter_batch_headers, iter_records,
    read_header, set_base_offset, validate_batch, validate_batches,
)

FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kafka-3.7-kraft-logdir"


def test_encoded_batch_validates_and_decodes():
    batch = encode_batch([(b"k1", b"v1"), (None, b"v2")], base_offset=5, timestamp=1234, headers=[("h", b"x")])
    header = validate_batch(batch)
    assert (header.base_offset, header.record_count, header.last_offset, header.base_timestamp) == (5, 2, 6, 1234)
    records = list(iter_records(batch))
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (5, b"k1", b"v1", 1234, [("h", b"x")]), (6, None, b"v2", 1234, [("h", b"x")])]


def test_base_offset_is_outside_the_crc():
    batch = bytearray(encode_batch([(None, b"v")], timestamp=1))
    set_base_offset(batch, 0, 99)
    assert validate_batch(batch).base_offset == 99


@pytest.mark.parametrize("damage", ["crc", "length", "magic", "short"])
def test_damaged_batches_are_rejected(damage):
    batch = bytearray(encode_batch([(None, b"value")], timestamp=1))
    if damage == "crc":
        batch[-1] ^= 1
    elif damage == "length":
        batch[11] += 5
    elif damage == "magic":
        batch[16] = 1
    else:
        batch = batch[:HEADER_SIZE - 1]
    with pytest.raises(UnsupportedMagicError if damage == "magic" else CorruptRecordError):
        validate_batches(bytes(batch))


def test_several_batches_and_trailing_garbage():
    one = encode_batch([(None, b"a")], timestamp=1)
    two = encode_batch([(None, b"b"), (None, b"c")], base_offset=1, timestamp=2)
    assert [h.record_count for _, h in validate_batches(one + two)] == [1, 2]
    with pytest.raises(CorruptRecordError):
        validate_batches(one + b"\x00\x01")
    # a partial batch at the end of a buffer (a torn write) is simply not yielded
    assert [p for p, _ in iter_batch_headers(one + two[:-4])] == [0]


def test_reads_kafka_written_batches():
    log = FIXTURE / "TestTopicPatient-0" / "00000000000000000000.log"
    if not log.exists():
        pytest.skip(f"Kafka 3.7 fixture not beside this checkout ({FIXTURE})")
    data = log.read_bytes()
    headers = [validate_batch(data, pos, pos + h.size) for pos, h in iter_batch_headers(data)]
    assert [h.base_offset for h in headers] == [0, 1, 2]
    assert read_header(data).max_timestamp == 1769792698283
