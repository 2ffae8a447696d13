"""`__transaction_state` records in Kafka's TransactionLogKey v0 / TransactionLogValue v0 layouts."""
from __future__ import annotations

import struct

from node.transactions.records import StoredTransaction, decode_key, decode_value, transaction_key, transaction_value
from node.transactions.state import ONGOING, PREPARE_COMMIT, TransactionMetadata


def test_the_key_is_a_version_and_the_transactional_id():
    assert transaction_key("orders-app") == struct.pack(">hh", 0, 10) + b"orders-app"
    assert decode_key(transaction_key("orders-app")) == "orders-app"
    assert decode_key(struct.pack(">hh", 1, 1) + b"g") is None  # another kind of key


def test_the_value_is_laid_out_field_by_field_as_kafka_writes_it():
    stored = StoredTransaction(producer_id=4000, producer_epoch=3, timeout_ms=60_000, status=ONGOING,
                               partitions={"orders": [0, 2]}, last_update_ms=1_700_000_000_123,
                               start_ms=1_700_000_000_000)
    expected = (struct.pack(">hqhib", 0, 4000, 3, 60_000, ONGOING) + struct.pack(">i", 1)
                + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000))
    assert transaction_value(stored, empty=False) == expected
    assert decode_value(expected) == stored


def test_an_empty_transaction_writes_its_partitions_as_null():
    stored = StoredTransaction(producer_id=1, producer_epoch=0, timeout_ms=10_000, status=0)
    value = transaction_value(stored, empty=True)
    assert value[17:21] == struct.pack(">i", -1)
    assert decode_value(value).partitions == {}


def test_a_flexible_v1_value_is_read_with_its_tagged_fields_skipped():
    value = (struct.pack(">hqhib", 1, 9, 2, 5_000, PREPARE_COMMIT)
             + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 7) + bytes([0])  # [("t", [7])]
             + struct.pack(">qq", 11, 10)
             + bytes([1, 2, 2]) + struct.pack(">h", 2))  # tagged: ClientTransactionVersion 2
    assert decode_value(value) == StoredTransaction(9, 2, 5_000, PREPARE_COMMIT, {"t": [7]}, 11, 10)


def test_metadata_takes_a_written_change_and_remembers_the_epoch_before_a_bump():
    metadata = TransactionMetadata("app", 0, producer_id=5, producer_epoch=1, timeout_ms=1_000)
    metadata.apply(metadata.record(ONGOING, 100, partitions={("t", 1)}, producer_epoch=2, start_ms=100))
    assert (metadata.state, metadata.partitions, metadata.producer_epoch, metadata.last_producer_epoch) == (
        ONGOING, {("t", 1)}, 2, 1)
