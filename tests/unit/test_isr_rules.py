"""The ISR and high-watermark rules of node.isr_rules, on their own."""
from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo
from node import isr_rules
from node.isr_rules import FollowerProgress


def led(isr: list[int], replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionInfo:
    return PartitionInfo(partition=0, replicas=list(replicas), isr=isr, leader=1)


def test_the_high_watermark_is_the_least_any_in_sync_replica_holds():
    assert isr_rules.isr_high_watermark([1, 2, 3], 1, 10, {2: 7, 3: 9}) == 7
    assert isr_rules.isr_high_watermark([1, 3], 1, 10, {2: 7, 3: 9}) == 9
    assert isr_rules.isr_high_watermark([1, 2], 1, 10, {}) == 0  # a member not heard from holds nothing yet
    assert isr_rules.isr_high_watermark([1], 1, 10, {2: 7}) == 10


def test_an_asked_for_isr_counts_with_the_image_one_until_it_lands():
    assert set(isr_rules.maximal_isr(led([1, 2]), [1, 2, 3])) == {1, 2, 3}
    assert set(isr_rules.maximal_isr(led([1, 2, 3]), [1, 2])) == {1, 2, 3}
    assert isr_rules.maximal_isr(led([1, 2]), None) == [1, 2]
    assert isr_rules.maximal_isr(None, None) == ()


def test_the_high_watermark_holds_only_under_min_insync_replicas():
    asked = []

    def min_isr_of(info):
        asked.append(info)
        return 2

    assert not isr_rules.holds_high_watermark(led([1, 2, 3]), min_isr_of)
    assert asked == []  # a full ISR is never under it: the configs are not read
    assert not isr_rules.holds_high_watermark(led([1, 2]), min_isr_of)
    assert isr_rules.holds_high_watermark(led([1]), min_isr_of)


def test_min_insync_replicas_is_never_more_than_the_replicas():
    assert isr_rules.effective_min_isr(2, led([1], replicas=(1,))) == 1
    assert isr_rules.effective_min_isr(2, led([1, 2, 3])) == 2
    assert isr_rules.effective_min_isr(2, None) == 2


def test_a_committed_write_names_too_few_copies():
    assert isr_rules.enough_replicas_error([1, 2], 2) == ErrorCode.NONE
    assert isr_rules.enough_replicas_error([1], 2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_follower_joins_once_it_has_the_high_watermark_and_the_terms_start():
    assert isr_rules.follower_in_sync(10, high_watermark=10, epoch_start_offset=8)
    assert not isr_rules.follower_in_sync(9, high_watermark=10, epoch_start_offset=8)
    assert not isr_rules.follower_in_sync(10, high_watermark=8, epoch_start_offset=12)


def test_a_follower_lags_once_not_caught_up_for_longer_than_the_lag_time():
    assert not isr_rules.lagging(caught_up_ms=1000, now_ms=1500, lag_ms=500)
    assert isr_rules.lagging(caught_up_ms=1000, now_ms=1501, lag_ms=500)


def test_a_follower_is_caught_up_as_of_its_previous_fetch_if_it_had_what_the_leader_had_then():
    progress = FollowerProgress(caught_up_ms=0)
    progress.fetched(fetch_offset=5, leader_end=5, now_ms=100)
    assert progress.caught_up_ms == 100
    progress.fetched(fetch_offset=5, leader_end=8, now_ms=200)  # it had all of 5 at 100
    assert progress.caught_up_ms == 100
    progress.fetched(fetch_offset=8, leader_end=12, now_ms=300)  # it had all of 8 at 200
    assert progress.caught_up_ms == 200
    progress.fetched(fetch_offset=9, leader_end=12, now_ms=400)  # short of the 12 it had at 300
    assert progress.caught_up_ms == 200
