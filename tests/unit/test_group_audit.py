"""The failover checker's audit of its consumer group: what it read and committed against the log."""
from confluent_kafka import KafkaError, TopicPartition

from cluster.tools.group_readers import GroupReaders, Read, _Member

LOG = {0: [(0, "p0:0:0"), (1, "p0:0:2")], 1: [(0, "p0:1:1")]}
ENDS = {0: 2, 1: 1}


def readers(reads: list[Read], commits: list[tuple[int, int]] = ()) -> GroupReaders:
    group = GroupReaders({"bootstrap.servers": "127.0.0.1:9"}, "t", "g", members=2, strategy="range", elapsed=lambda: 1.5)
    group.reads, group.commits = list(reads), list(commits)
    return group


def test_a_group_that_read_everything_once_or_twice_passes():
    reads = [Read("m0", 0, 0, "p0:0:0"), Read("m0", 0, 1, "p0:0:2"), Read("m1", 1, 0, "p0:1:1"),
             Read("m1", 0, 1, "p0:0:2")]  # read again after a rebalance: at-least-once allows it
    audit = readers(reads, [(0, 2), (1, 1)]).audit({"p0:0:0", "p0:0:2", "p0:1:1"}, LOG, ENDS, True, {0: 2, 1: 1})
    assert audit.ok and audit.reads == 4


def test_missed_messages_phantom_reads_and_commits_past_the_end_fail():
    reads = [Read("m0", 0, 0, "p0:0:0"), Read("m1", 1, 0, "p0:1:9")]  # the log holds p0:1:1 there
    audit = readers(reads, [(0, 1), (1, 3)]).audit({"p0:0:0", "p0:0:2", "p0:1:1"}, LOG, ENDS, True, {0: 1, 1: 1})
    assert audit.undelivered == ["p0:0:2", "p0:1:1"]
    assert audit.phantom == [Read("m1", 1, 0, "p0:1:9")]
    assert audit.committed_past_end == [(1, 3, 1)]
    assert not audit.ok


def test_a_group_that_did_not_read_to_the_end_fails():
    reads = [Read("m0", 0, 0, "p0:0:0"), Read("m0", 0, 1, "p0:0:2"), Read("m1", 1, 0, "p0:1:1")]
    assert not readers(reads).audit({"p0:0:0"}, LOG, ENDS, False, {}).ok


def test_errors_failover_explains_are_expected_and_others_are_not():
    group = readers([])
    member = _Member("m0")
    group._error(member, KafkaError(KafkaError.NOT_COORDINATOR))
    group._error(member, KafkaError(KafkaError._TRANSPORT))
    group._error(member, KafkaError(KafkaError.INCONSISTENT_GROUP_PROTOCOL))
    group._error(member, KafkaError(KafkaError._NO_OFFSET))  # nothing new to commit: not an error
    assert [(e.client, e.error, e.expected, e.at_s) for e in group.errors] == [
        ("m0", "NOT_COORDINATOR", True, 1.5), ("m0", "_TRANSPORT", True, 1.5),
        ("m0", "INCONSISTENT_GROUP_PROTOCOL", False, 1.5)]


def test_a_commit_refused_as_a_whole_counts_once():
    group = readers([])
    group._committed(_Member("m1"), KafkaError(KafkaError.REBALANCE_IN_PROGRESS),
                     [TopicPartition("t", 0, 5), TopicPartition("t", 1, 3)])
    group._committed(_Member("m1"), None, [TopicPartition("t", 0, 4)])
    assert group.commits == [(0, 4)]
    assert [(e.error, e.expected) for e in group.errors] == [("REBALANCE_IN_PROGRESS", True)]
