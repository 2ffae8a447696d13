"""Where a diverged follower cuts its log (Kafka's AbstractFetcherThread rules)."""
from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import encode_batch
from node.replica_fetcher import _truncation_offset


def follower(tmp_path, epochs_and_counts) -> PartitionLog:
    """A follower log with `count` one-record batches in each (epoch, count)."""
    log = PartitionLog(tmp_path / "t-0")
    offset = 0
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            log.append_as_follower(encode_batch([(None, b"v")], base_offset=offset, timestamp=1, leader_epoch=epoch))
            offset += 1
    return log


def test_an_epoch_the_leader_never_had_is_cut_where_it_began(tmp_path):
    log = follower(tmp_path, [(0, 5), (2, 3)])  # epoch 2 (offsets 5-7) never reached the leader
    log.high_watermark = 4
    # The leader's largest epoch <= 2 is 0, which it ended at 6: we keep epoch 0 only.
    assert _truncation_offset(log, 0, 6) == 5
    # A leader that shares our epoch 2 but ended it at 6 keeps us to 6.
    assert _truncation_offset(log, 2, 6) == 6
    # A leader that knows none of our epochs leaves us the high watermark.
    assert _truncation_offset(log, -1, -1) == 4


def test_an_epoch_begun_without_writes_is_forgotten_on_truncation(tmp_path):
    log = follower(tmp_path, [(0, 3)])
    log.assign_epoch(4, log.log_end_offset)  # became leader at epoch 4, wrote nothing, lost leadership
    assert log.latest_epoch == 4
    log.truncate_to(_truncation_offset(log, 0, 3))
    assert (log.log_end_offset, log.epochs) == (3, [(0, 0)])
