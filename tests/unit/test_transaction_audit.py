"""The failover checker's audit of its transactions against what a read_committed reader saw."""
from cluster.tools.transaction_writers import ABORTED, COMMITTED, UNKNOWN, Transaction, audit_transactions

A, B = "t-txn-a", "t-txn-b"


def transaction(number: int, outcome: str, partitions, writer: str = "w0", on_purpose: bool = False) -> Transaction:
    return Transaction(writer, number, list(partitions), begun_s=float(number), ended_s=number + 0.5,
                       outcome=outcome, on_purpose=on_purpose)


def audit(transactions, log):
    return audit_transactions(transactions, log, writers=1, topics=[A, B])


def problems(result) -> list[tuple[str, str]]:
    return [(p.transaction, p.problem) for p in result.problems]


def test_committed_transactions_whole_and_aborted_ones_absent_pass():
    transactions = [transaction(0, COMMITTED, [(A, 0), (B, 1), (B, 1)]),
                    transaction(1, ABORTED, [(A, 0), (B, 0)], on_purpose=True),
                    transaction(2, UNKNOWN, [(A, 0), (B, 0)]),  # present whole: allowed
                    transaction(3, UNKNOWN, [(A, 1), (B, 1)]),  # absent: allowed too
                    transaction(4, ABORTED, [(A, 1)])]  # the client said to abort: absent
    log = {(A, 0): [(0, "w0:0:0"), (4, "w0:2:0")], (A, 1): [],
           (B, 0): [(2, "w0:2:1")], (B, 1): [(0, "w0:0:1"), (1, "w0:0:2")]}
    result = audit(transactions, log)
    assert result.ok, result.problems
    assert (result.committed, result.aborted_on_purpose, result.aborted_after_error) == (1, 1, 1)
    assert (result.unknown, result.unknown_present, result.records_read) == (2, 1, 5)


def test_lost_split_visible_after_an_abort_duplicated_and_misplaced_fail():
    transactions = [transaction(0, COMMITTED, [(A, 0), (B, 0)]),  # lost
                    transaction(1, UNKNOWN, [(A, 0), (B, 0)]),  # only one partition of it
                    transaction(2, ABORTED, [(A, 1)], on_purpose=True),  # visible
                    transaction(3, COMMITTED, [(A, 1), (B, 1)])]  # one record twice, one elsewhere
    log = {(A, 0): [(0, "w0:1:0")], (A, 1): [(0, "w0:2:0"), (1, "w0:3:0"), (2, "w0:3:0")],
           (B, 0): [(0, "w0:3:1")], (B, 1): []}
    result = audit(transactions, log)
    assert problems(result) == [("w0:0", "lost"), ("w0:1", "partly visible"), ("w0:2", "aborted but visible"),
                                ("w0:3", "duplicated"), ("w0:3", "misplaced")]
    assert not result.ok


def test_a_writers_records_out_of_order_in_a_partition_and_strangers_fail():
    transactions = [transaction(0, COMMITTED, [(A, 0)]), transaction(1, COMMITTED, [(A, 0)])]
    log = {(A, 0): [(0, "w0:1:0"), (1, "w0:0:0"), (2, "someone:else:0")], (A, 1): [], (B, 0): [], (B, 1): []}
    result = audit(transactions, log)
    assert problems(result) == [("w0:0", "out of order")]
    assert result.strangers == ["someone:else:0"]


def test_partitions_left_undecided_or_unread_fail():
    assert not audit_transactions([], {}, 1, [A, B], undecided=[(A, 0)]).ok
    assert not audit_transactions([], {}, 1, [A, B], unread={(A, 0): (3, 5)}).ok


def test_the_longest_stretch_without_an_ended_transaction():
    transactions = [transaction(0, COMMITTED, [(A, 0)]), transaction(1, COMMITTED, [(A, 0)]),
                    Transaction("w0", 2, [(A, 0)], begun_s=1.5, ended_s=9.0, outcome=COMMITTED)]
    assert audit(transactions, {}).longest_stall == ("w0", 1.5, 9.0)
