"""Legacy message sets (magic 0 and 1): up-conversion to one magic-2 batch for Produce v0-2 and
down-conversion for Fetch v0-3, checked against kafka-python's independent readers and writers."""
from __future__ import annotations

import struct

import lz4.frame
import pytest
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from cluster.formats import compression, message_sets
from cluster.formats.compression import DecompressedTooLargeError
from cluster.formats.message_sets import (
    InvalidRecordError, InvalidTimestampError, UnsupportedCompressionError, decode_message, down_convert,
    encode_message, frame_messages, up_convert,
)
from cluster.formats.records import (
    ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, CorruptRecordError, compute_crc, encode_records, read_header, validate_batch,
)

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4]


def legacy_set(magic: int, codec: int, entries: list[tuple[int, bytes | None, bytes]]) -> bytes:
    """A message set as kafka-python's producer builds it for old brokers."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for offset, (timestamp, key, value) in enumerate(entries):
        builder.append(offset, timestamp, key, value)
    return bytes(builder.build())


def wrapper(magic: int, codec: int, inner: list[bytes], *, offset: int, timestamp: int = 0, attributes: int = 0,
            compressed: bytes | None = None) -> bytes:
    value = compressed if compressed is not None else compression.compress(codec, b"".join(inner), magic=magic)
    return encode_message(offset, magic, codec | attributes, timestamp, None, value)


def records_of(batch: bytes) -> list[tuple]:
    batches = MemoryRecords(batch)
    found = []
    while batches.has_next():
        found += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batches.next_batch()]
    return found


def legacy_records_of(message_set: bytes) -> list[tuple]:
    """What an old consumer (kafka-python's legacy reader) makes of a down-converted set."""
    batches = MemoryRecords(message_set)
    found = []
    while batches.has_next():
        batch = batches.next_batch()
        assert batch.magic in (0, 1)
        found += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return found


ENTRIES = [(1000, b"k0", b"v0"), (1005, None, b"v1"), (1003, b"k2", b"")]


# --- up-conversion ---

@pytest.mark.parametrize("codec", [0] + CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_up_convert_keeps_keys_values_and_timestamps(magic, codec):
    if magic == 0 and codec == compression.LZ4:
        inner = [encode_message(i, 0, 0, -1, k, v) for i, (_, k, v) in enumerate(ENTRIES)]
        data = wrapper(0, codec, inner, offset=2)
    else:
        data = legacy_set(magic, codec, ENTRIES)
    converted = up_convert(data, log_append_time_topic=False)
    header = validate_batch(converted.batch)
    assert (header.magic, header.compression, header.record_count, header.producer_id) == (2, codec, 3, -1)
    timestamps = [t for t, _, _ in ENTRIES] if magic == 1 else [-1, -1, -1]
    assert records_of(converted.batch) == [(i, timestamps[i], k, v, []) for i, (_, k, v) in enumerate(ENTRIES)]
    assert header.max_timestamp == max(timestamps)


def test_magic_0_lz4_uses_kafkas_old_frame_checksum():
    frame = compression.compress(compression.LZ4, b"payload" * 10, magic=0)
    standard = lz4.frame.compress(b"payload" * 10, block_linked=False, store_size=False)
    assert frame[6] == (compression.xxh32(frame[:6]) >> 8) & 0xFF  # the checksum over magic number too
    assert standard[6] == (compression.xxh32(standard[4:6]) >> 8) & 0xFF
    assert compression.decompress(compression.LZ4, frame, magic=0) == b"payload" * 10


def test_magic_1_wrappers_carry_relative_inner_offsets():
    inner = [encode_message(i, 1, 0, 500 + i, None, b"v%d" % i) for i in range(3)]
    for wrapper_offset in (2, 41, 0):  # 0: what some librdkafka versions send
        converted = up_convert(wrapper(1, compression.GZIP, inner, offset=wrapper_offset), log_append_time_topic=False)
        assert [(o, t, v) for o, t, _, v, _ in records_of(converted.batch)] == [(0, 500, b"v0"), (1, 501, b"v1"),
                                                                               (2, 502, b"v2")]
    with pytest.raises(InvalidRecordError, match="below its last inner offset"):
        up_convert(wrapper(1, compression.GZIP, inner, offset=1), log_append_time_topic=False)


def test_log_append_time_wrapper_gives_its_timestamp_and_is_refused_where_kafka_refuses_it():
    inner = [encode_message(i, 1, 0, 500 + i, None, b"v") for i in range(2)]
    data = wrapper(1, compression.GZIP, inner, offset=1, timestamp=777, attributes=ATTR_TIMESTAMP_TYPE)
    converted = up_convert(data, log_append_time_topic=False)
    assert [t for _, t, _, _, _ in records_of(converted.batch)] == [777, 777]
    with pytest.raises(InvalidTimestampError):
        up_convert(data, log_append_time_topic=True)
    unstamped = wrapper(1, compression.GZIP, inner, offset=1, timestamp=-1, attributes=ATTR_TIMESTAMP_TYPE)
    with pytest.raises(InvalidTimestampError):
        up_convert(unstamped, log_append_time_topic=False)


def test_crc_mismatch_is_corrupt_in_plain_and_compressed_messages():
    data = bytearray(legacy_set(1, 0, ENTRIES))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        up_convert(bytes(data), log_append_time_topic=False)
    inner = bytearray(encode_message(0, 1, 0, 5, None, b"value"))
    inner[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        up_convert(wrapper(1, compression.SNAPPY, [bytes(inner)], offset=0), log_append_time_topic=False)


def test_truncated_sets():
    data = legacy_set(0, 0, ENTRIES)
    whole = frame_messages(data)
    cut = data[:whole[-1][0] + 20]  # the last message loses its tail: it is dropped, as Kafka trims it
    assert len(records_of(up_convert(cut, log_append_time_topic=False).batch)) == 2
    assert up_convert(data[:10], log_append_time_topic=False) is None
    assert up_convert(b"", log_append_time_topic=False) is None
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        up_convert(struct.pack(">qi", 0, 3) + b"\0" * 20, log_append_time_topic=False)
    short_v1 = bytearray(encode_message(0, 0, 0, -1, None, b""))
    short_v1[16] = 1  # magic 1 claims 8 timestamp bytes the message does not have
    with pytest.raises(CorruptRecordError):
        decode_message(bytes(short_v1), 0, len(short_v1))


def test_sets_kafka_refuses_as_invalid_records():
    v0 = encode_message(0, 0, 0, -1, None, b"a")
    v1 = encode_message(1, 1, 0, 9, None, b"b")
    gz = wrapper(1, compression.GZIP, [v1], offset=0)
    cases = {
        "different magic": v0 + v1,
        "only message": gz + gz,
        "zstd": encode_message(0, 1, compression.ZSTD, 0, None, b"whatever"),
        "null value": encode_message(0, 1, compression.GZIP, 0, None, None),
        "inside a compressed": wrapper(1, compression.GZIP, [gz], offset=0),
        "holds no messages": wrapper(1, compression.GZIP, [], offset=0),
    }
    for reason, data in cases.items():
        with pytest.raises(InvalidRecordError, match=reason):
            up_convert(data, log_append_time_topic=False)
    with pytest.raises(CorruptRecordError, match="cannot decompress"):
        up_convert(wrapper(1, compression.GZIP, [], offset=0, compressed=b"not gzip"), log_append_time_topic=False)


# --- down-conversion ---

def stored(first_offset: int, entries, *, codec: int = 0, attributes: int = 0, headers=()) -> bytes:
    return encode_records([(t, k, v, list(headers)) for t, k, v in entries], compression=codec,
                          base_offset=first_offset, attributes=attributes)


@pytest.mark.parametrize("codec", [0] + CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_down_convert_keeps_offsets_and_drops_headers(magic, codec):
    last = (2000, b"k", b"last")
    batches = [stored(10, ENTRIES, codec=codec, headers=[("h", b"x")]), stored(13, [last], codec=codec)]
    converted = b"".join(down_convert(batch, magic, 10) for batch in batches)
    expected = [(10 + i, t if magic else None, k, v) for i, (t, k, v) in enumerate(ENTRIES + [last])]
    if magic == 0 and codec == compression.LZ4:  # kafka-python reads magic-0 lz4 only with xxhash installed
        outer = [decode_message(converted, pos, size) for pos, size, _ in frame_messages(converted)]
        assert [m.offset for m in outer] == [12, 13] and all(m.codec == codec for m in outer)
        return
    assert legacy_records_of(converted) == expected
    outer = [decode_message(converted, pos, size) for pos, size, _ in frame_messages(converted)]
    assert all(m.magic == magic and m.codec == codec for m in outer)
    if codec:
        assert [m.offset for m in outer] == [12, 13]  # a wrapper carries its last offset
        assert outer[0].timestamp == (1005 if magic else -1)  # and the largest timestamp


def test_compressed_magic_1_inner_offsets_are_relative_and_magic_0_absolute():
    data = stored(40, ENTRIES, codec=compression.GZIP)
    for magic, inner_offsets in ((1, [0, 1, 2]), (0, [40, 41, 42])):
        converted = down_convert(data, magic, 40)
        outer = decode_message(converted, 0, len(converted))
        inner = compression.decompress(compression.GZIP, outer.value)
        assert [decode_message(inner, pos, size).offset for pos, size, _ in frame_messages(inner)] == inner_offsets


def test_records_before_the_fetch_offset_are_left_out_of_uncompressed_batches_only():
    assert [r[0] for r in legacy_records_of(down_convert(stored(10, ENTRIES), 1, 11))] == [11, 12]
    assert [r[0] for r in legacy_records_of(down_convert(stored(10, ENTRIES, codec=compression.GZIP), 1, 11))] == [
        10, 11, 12]


def test_log_append_time_batches_keep_their_type_and_time():
    batch = bytearray(stored(0, ENTRIES, attributes=ATTR_TIMESTAMP_TYPE))
    struct.pack_into(">q", batch, 35, 4242)  # the log's append time is the batch's max timestamp
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    converted = down_convert(bytes(batch), 1, 0)
    assert [r[1] for r in legacy_records_of(converted)] == [4242] * 3
    assert all(decode_message(converted, p, s).log_append_time for p, s, _ in frame_messages(converted))


def test_control_batches_are_skipped_and_zstd_cannot_be_converted():
    control = stored(0, [(1, b"\0\0\0\0", b"")], attributes=ATTR_CONTROL)
    assert down_convert(control + stored(1, ENTRIES), 1, 0)[:8] == struct.pack(">q", 1)
    zstd = bytearray(stored(4, ENTRIES))
    struct.pack_into(">h", zstd, 21, compression.ZSTD)  # only the attribute matters before conversion
    with pytest.raises(UnsupportedCompressionError):
        down_convert(bytes(zstd), 1, 4)
    assert [r[0] for r in legacy_records_of(down_convert(stored(1, ENTRIES) + bytes(zstd), 1, 1))] == [1, 2, 3]


def test_down_converted_size_follows_the_bytes_read_with_at_least_one_whole_batch():
    big = [(5, None, b"x" * 50) for _ in range(4)]
    first = stored(0, big)
    converted = down_convert(first, 0, 0)  # magic 0 messages are larger than magic-2 records
    assert len(converted) > len(first) and len(legacy_records_of(converted)) == 4
    two = first + stored(4, big)
    converted = down_convert(two, 0, 0)
    # as many whole messages as fit in what was read; never a partial one
    assert [r[0] for r in legacy_records_of(converted)] == list(range(len(converted) // 76))
    assert len(converted) <= len(two) and len(converted) % 76 == 0


def test_up_and_down_conversion_round_trip():
    data = legacy_set(1, compression.SNAPPY, ENTRIES)
    batch = bytearray(up_convert(data, log_append_time_topic=False).batch)
    struct.pack_into(">q", batch, 0, 7)
    assert read_header(batch).compression == compression.SNAPPY
    assert legacy_records_of(down_convert(bytes(batch), 1, 7)) == [(7 + i, t, k, v) for i, (t, k, v) in
                                                                    enumerate(ENTRIES)]


def test_compressed_payloads_may_not_inflate_past_the_bound(monkeypatch):
    monkeypatch.setattr(message_sets, "MAX_DECOMPRESSED_BYTES", 1000)
    inner = [encode_message(i, 1, 0, 5, None, b"v" * 100) for i in range(10)]  # 1300 bytes
    for codec in CODECS:
        with pytest.raises(DecompressedTooLargeError):
            up_convert(wrapper(1, codec, inner, offset=9), log_append_time_topic=False)
        bomb = stored(3, [(5, None, b"v" * 2000)], codec=codec)
        with pytest.raises(DecompressedTooLargeError):
            down_convert(bomb, 1, 3)
        # after a batch that converts, it ends the set instead
        assert [r[0] for r in legacy_records_of(down_convert(stored(0, ENTRIES) + bomb, 1, 0))] == [0, 1, 2]


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_compressed_payloads_are_corrupt(codec):
    payload = compression.compress(codec, b"abc" * 1000)
    with pytest.raises(CorruptRecordError, match="cannot decompress"):
        compression.decompress(codec, payload[:-5])
