"""The pure parts of the transaction admin APIs and tools: ListTransactions' filters, Kafka's rule for
a hanging transaction, and the table layout of kafka-transactions.sh."""
from __future__ import annotations

import pytest

from cluster.cli.transactions import kafka_table
from cluster.tools.transaction_tools import OpenTransaction, candidates, hanging
from node.transactions.listing import BadPattern, ListFilter, listed
from node.transactions.state import COMPLETE_COMMIT, DEAD, EMPTY, ONGOING, TransactionMetadata

NOW = 1_000_000


def metadata(transactional_id: str, producer_id: int, state: int, start_ms: int = -1) -> TransactionMetadata:
    return TransactionMetadata(transactional_id, 0, producer_id, 0, 60_000, state=state, start_ms=start_ms)


IDS = [metadata("app-1", 10, ONGOING, NOW - 5_000), metadata("app-2", 11, COMPLETE_COMMIT, NOW - 90_000),
       metadata("other", 12, EMPTY), metadata("gone", 13, DEAD, NOW - 90_000)]


def names(wanted: ListFilter) -> list[str]:
    return [m.transactional_id for m in listed(reversed(IDS), wanted, NOW)]


def test_no_filter_lists_every_id_but_dead_ones_by_id():
    assert names(ListFilter.of()) == ["app-1", "app-2", "other"]


def test_state_filters_by_kafka_names_and_unknown_names_match_nothing():
    assert names(ListFilter.of(["Ongoing", "Empty"])) == ["app-1", "other"]
    only_unknown = ListFilter.of(["Bogus"])
    assert only_unknown.unknown_states == ("Bogus",) and names(only_unknown) == []
    assert ListFilter.of(["ongoing"]).unknown_states == ("ongoing",)  # names are case-sensitive, as in Kafka
    assert names(ListFilter.of(["Dead"])) == []


def test_producer_id_filter():
    assert names(ListFilter.of(producer_ids=[11, 12, 99])) == ["app-2", "other"]


def test_duration_compares_the_start_of_the_last_transaction_as_kafka_does():
    # Longer than 60 s: the completed transaction that started 90 s ago, and the id that never
    # started one (start -1), as Kafka's listTransactionStates counts them.
    assert names(ListFilter.of(duration_ms=60_000)) == ["app-2", "other"]
    assert names(ListFilter.of(duration_ms=5_000)) == ["app-2", "other"]  # exactly 5 s is not longer
    assert names(ListFilter.of(duration_ms=4_999)) == ["app-1", "app-2", "other"]


def test_pattern_must_match_the_whole_id():
    assert names(ListFilter.of(pattern="app-.*")) == ["app-1", "app-2"]
    assert names(ListFilter.of(pattern="app")) == []
    assert names(ListFilter.of(pattern="")) == ["app-1", "app-2", "other"]  # empty: no filter
    with pytest.raises(BadPattern):
        ListFilter.of(pattern="(")


def test_filters_combine():
    assert names(ListFilter.of(["Ongoing", "CompleteCommit"], [11], 60_000, "app-\\d")) == ["app-2"]


def producer(producer_id: int, start_offset: int | None, last_timestamp: int) -> dict:
    return {"producer_id": producer_id, "producer_epoch": 0, "coordinator_epoch": None, "last_sequence": 0,
            "last_timestamp": last_timestamp, "current_transaction_start_offset": start_offset}


def test_candidates_are_open_transactions_older_than_the_timeout():
    by_partition = {("t", 1): [producer(1, 5, NOW - 61_000), producer(2, None, NOW - 99_000)],
                    ("t", 0): [producer(3, 0, NOW - 60_000), producer(4, 7, NOW - 60_001)]}
    assert candidates(by_partition, NOW, 60_000) == [OpenTransaction("t", 0, by_partition[("t", 0)][1]),
                                                     OpenTransaction("t", 1, by_partition[("t", 1)][0])]


def test_hanging_by_kafkas_rule():
    def open_on(partition: int, producer_id: int) -> OpenTransaction:
        return OpenTransaction("t", partition, producer(producer_id, 0, 0))

    unlisted, unknown, elsewhere, ongoing, prepared = open_on(0, 1), open_on(0, 2), open_on(1, 3), open_on(0, 4), \
        open_on(2, 4)
    found = hanging([unlisted, unknown, elsewhere, ongoing, prepared],
                    {2: "unknown-id", 3: "elsewhere-id", 4: "ongoing-id"},
                    {"unknown-id": None, "elsewhere-id": {("t", 0)}, "ongoing-id": {("t", 0), ("t", 2)}})
    # Not listed by any coordinator, unknown to its coordinator, or its transaction lacks the partition.
    assert found == [unlisted, unknown, elsewhere]


def test_tables_are_laid_out_as_kafkas_tools_print_them():
    assert kafka_table(["TransactionalId", "Coordinator"], [["a-much-longer-id", "1"], ["b", "22"]]) == (
        "TransactionalId \tCoordinator\t\n"
        "a-much-longer-id\t1          \t\n"
        "b               \t22         \t\n")
    assert kafka_table(["Topic", "Partition"], []) == "Topic\tPartition\t\n"
