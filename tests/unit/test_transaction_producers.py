"""A partition's open and decided transactions (node/producer_state.py): the last stable offset, and
what a replica remembers of transactions its markers ended."""
import struct

from cluster.formats import control_records
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch, read_header
from node.partition import Partition
from node.producer_state import PartitionProducers
from node.replica_fetcher import ReplicaFetchers

PRODUCER, EPOCH, COORDINATOR_EPOCH = 7, 0, 3


def at(offset: int, data: bytes) -> bytes:
    """The batch with its base offset assigned (outside the CRC), as a log writes it."""
    return struct.pack(">q", offset) + data[8:]


def transactional_batch(offset: int, sequence: int) -> bytes:
    return at(offset, encode_batch([(None, b"v")], timestamp=1, attributes=ATTR_TRANSACTIONAL, producer_id=PRODUCER,
                                   producer_epoch=EPOCH, base_sequence=sequence))


def marker_batch(offset: int, commit: bool = True) -> bytes:
    return at(offset, control_records.end_txn_marker(PRODUCER, EPOCH, commit, COORDINATOR_EPOCH, 1))


def transactional(producers: PartitionProducers, offset: int, sequence: int) -> None:
    data = transactional_batch(offset, sequence)
    producers.track(data, 0, read_header(data))


def marker(producers: PartitionProducers, offset: int, commit: bool = True):
    data = marker_batch(offset, commit)
    return producers.track(data, 0, read_header(data))


def test_the_last_stable_offset_waits_for_a_marker_to_reach_the_high_watermark():
    producers = PartitionProducers()
    transactional(producers, 0, 0)
    transactional(producers, 1, 1)
    assert producers.stable_below(2) == 0  # open
    assert marker(producers, 2) is None  # a commit makes no aborted-transaction entry
    assert producers.stable_below(2) == 0  # decided, but the marker is not on every in-sync replica yet
    assert producers.stable_below(3) == 3
    transactional(producers, 3, 2)
    assert marker(producers, 4, commit=False) == (PRODUCER, 3, 4, 5)
    assert producers.stable_below(5) == 5


def test_a_follower_forgets_decided_transactions_as_its_high_watermark_moves(tmp_path):
    """A follower never answers read_committed fetches, so nothing asks it for the LSO: what the
    markers it copies decided must still go once its high watermark passes them, or it piles up for
    as long as it follows (and its first LSO as a leader walks over all of it)."""
    partition = Partition(("t", 0), PartitionLog(tmp_path / "t-0"), PartitionProducers(), broker=None)
    for sequence in range(200):
        offset = 2 * sequence
        fetched = (0, 0, offset + 2, 0, None, transactional_batch(offset, sequence) + marker_batch(offset + 1))
        assert ReplicaFetchers._apply(None, 2, ("t", 0), fetched, partition)
    assert partition.producers._undecided == []  # (the state itself: there is no public view of it)
    assert partition.last_stable_offset() == 400
