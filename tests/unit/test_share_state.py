"""The share coordinator's records and state: Kafka's layouts, how writes merge, and replay."""
from __future__ import annotations

import asyncio
import types
import uuid

from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import encode_batch
from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from node.apis import alter_share_group_offsets, delete_groups, delete_share_group_offsets, describe_share_group_offsets
from node.coordinator_log import CoordinatorError
from node.groups.placement import java_string_hash
from node.share_coordinator.batches import merge_batches
from node.share_coordinator.coordinator import ShareCoordinator, StoredState
from node.share_coordinator.placement import coordinator_key, partition_for_key
from node.share_coordinator.records import (
    SNAPSHOT_TYPE, UPDATE_TYPE, Snapshot, StateKey, Update, decode_key, decode_snapshot, decode_update, encode_key,
    encode_snapshot, encode_update,
)
from node.share_coordinator.state import ACKNOWLEDGED, ARCHIVED, AVAILABLE, ShareState, StateBatch
from tests.unit.headers import request_header

TOPIC_ID = uuid.UUID("8a3f0e6e-1c4b-4d4e-9a57-0d6f2b1c9e11")
KEY = StateKey("readers", TOPIC_ID, 3)


def test_keys_are_kafkas_layout():
    key = encode_key(SNAPSHOT_TYPE, KEY)
    # type 0, then ShareSnapshotKey v0: string group, uuid, int32 partition
    assert key == b"\x00\x00" + b"\x00\x07readers" + TOPIC_ID.bytes + b"\x00\x00\x00\x03"
    assert decode_key(key) == (SNAPSHOT_TYPE, KEY)
    assert decode_key(encode_key(UPDATE_TYPE, KEY)) == (UPDATE_TYPE, KEY)
    assert decode_key(b"\x00\x05junk") is None
    assert decode_key(b"\x00") is None


def test_snapshot_value_round_trips_in_the_flexible_layout():
    snapshot = Snapshot(4, 2, 7, 100, 1_700_000_000_000, 1_700_000_000_500,
                        (StateBatch(100, 109, ACKNOWLEDGED, 1), StateBatch(110, 110, AVAILABLE, 3)))
    value = encode_snapshot(snapshot)
    assert value[:2] == b"\x00\x00"  # value version 0
    assert value[38] == 3  # compact array: two batches + 1
    assert value.endswith(b"\x00")  # no tagged fields
    assert decode_snapshot(value) == snapshot


def test_update_value_round_trips_and_reads_tagged_fields_it_does_not_know():
    update = Update(4, 8, -1, (StateBatch(5, 9, ARCHIVED, 5),))
    value = encode_update(update)
    assert decode_update(value) == update
    # A later writer's tagged field (Kafka 4.2's DeliveryCompleteCount, tag 0) is skipped.
    tagged = value[:-1] + b"\x01\x00\x04\x00\x00\x00\x05"
    assert decode_update(tagged) == update


def test_a_write_replaces_the_batches_it_covers():
    stored = [StateBatch(0, 9, AVAILABLE, 1), StateBatch(10, 19, ACKNOWLEDGED, 1)]
    merged = merge_batches(stored, [StateBatch(5, 12, ARCHIVED, 2)], 0)
    assert merged == [StateBatch(0, 4, AVAILABLE, 1), StateBatch(5, 12, ARCHIVED, 2),
                      StateBatch(13, 19, ACKNOWLEDGED, 1)]


def test_a_later_batch_of_one_write_wins_and_neighbours_alike_join():
    merged = merge_batches([], [StateBatch(0, 9, AVAILABLE, 1), StateBatch(3, 4, ACKNOWLEDGED, 1),
                                StateBatch(5, 9, ACKNOWLEDGED, 1)], 0)
    assert merged == [StateBatch(0, 2, AVAILABLE, 1), StateBatch(3, 9, ACKNOWLEDGED, 1)]


def test_the_start_offset_drops_earlier_batches_and_cuts_the_one_it_falls_in():
    stored = [StateBatch(0, 9, ACKNOWLEDGED, 1), StateBatch(10, 19, AVAILABLE, 2), StateBatch(20, 29, ARCHIVED, 5)]
    assert merge_batches(stored, [], 15) == [StateBatch(15, 19, AVAILABLE, 2), StateBatch(20, 29, ARCHIVED, 5)]
    assert merge_batches(stored, [], 30) == []
    assert merge_batches(stored, [], -1) == stored  # -1: the start offset is not being written


def test_the_placement_is_kafkas_hash_of_the_share_partition_key():
    key = coordinator_key("readers", TOPIC_ID, 3)
    assert key.startswith("readers:ij8Obhx") and key.endswith(":3")
    hashed = java_string_hash(key)
    assert partition_for_key(key, 50) == abs(hashed) % 50


def _log_of(tmp_path, records) -> PartitionLog:
    partition_log = PartitionLog(tmp_path / "__share_group_state-0", config=LogConfig(cleanup_policy="compact"))
    for record in records:
        partition_log.append(encode_batch([record], base_offset=partition_log.log_end_offset, timestamp=1),
                             leader_epoch=0)
    return partition_log


def test_replay_of_a_snapshot_and_its_updates_gives_the_state_they_were_written_as(tmp_path):
    snapshot = Snapshot(0, 1, 3, 0, 1, 1, (StateBatch(0, 9, AVAILABLE, 1),))
    updates = [Update(0, 3, -1, (StateBatch(0, 4, ACKNOWLEDGED, 1),)),
               Update(0, 4, 5, (StateBatch(10, 14, ARCHIVED, 2),)),
               Update(0, -1, -1, (StateBatch(7, 7, ACKNOWLEDGED, 1),))]
    expected = StoredState.from_snapshot(0, snapshot)
    for update in updates:
        expected.apply(update)
    other = StateKey("others", TOPIC_ID, 0)
    records = [(encode_key(SNAPSHOT_TYPE, KEY), encode_snapshot(snapshot)),
               (encode_key(SNAPSHOT_TYPE, other), encode_snapshot(snapshot)),
               *[(encode_key(UPDATE_TYPE, KEY), encode_update(u)) for u in updates],
               (encode_key(SNAPSHOT_TYPE, other), None), (encode_key(UPDATE_TYPE, other), None)]
    coordinator = ShareCoordinator(types.SimpleNamespace())
    coordinator.load_partition(0, _log_of(tmp_path, records), leader_epoch=6)
    assert set(coordinator.states) == {KEY}  # the tombstoned share-partition is gone
    state = coordinator.states[KEY].as_share_state()
    assert state == expected.as_share_state()
    assert (state.state_epoch, state.leader_epoch, state.start_offset) == (1, 4, 5)
    assert state.batches == [StateBatch(5, 6, AVAILABLE, 1), StateBatch(7, 7, ACKNOWLEDGED, 1),
                             StateBatch(8, 9, AVAILABLE, 1), StateBatch(10, 14, ARCHIVED, 2)]
    assert coordinator.states[KEY].updates_since_snapshot == 3
    assert coordinator.loaded_epochs == {0: 6}
    coordinator.unload_partition(0)
    assert coordinator.states == {} and coordinator.loaded_epochs == {}


class GatePersister:
    """Holds every call until as many are waiting as `expected`: a handler that awaits one partition
    at a time never gets there."""

    def __init__(self, expected: int):
        self.expected = expected
        self.waiting = 0
        self.all_in = asyncio.Event()
        self.calls: list[tuple] = []

    async def _enter(self, *call):
        self.calls.append(call)
        self.waiting += 1
        if self.waiting == self.expected:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 1)

    async def read_summary(self, group_id, topic_id, partition):
        await self._enter("read_summary", partition)
        return ShareState(2, 0, 10 + partition, [])

    async def initialize(self, group_id, topic_id, partition, state_epoch, start_offset):
        self.calls.append(("initialize", partition, state_epoch, start_offset))

    async def delete(self, group_id, topic_id, partition):
        await self._enter("delete", partition)


def admin_broker(persister):
    group = types.SimpleNamespace(group_type="share", members={}, state="Empty")
    topic = types.SimpleNamespace(topic_id=TOPIC_ID, partitions={0: None, 1: None, 2: None})
    groups = types.SimpleNamespace(owns=lambda group_id: ErrorCode.NONE, group=lambda group_id: group)
    return types.SimpleNamespace(groups=groups, topic=lambda name: topic if name == "t" else None,
                                 share_persister=persister, authorizer=None)


def test_the_share_offset_admin_apis_ask_for_every_partition_at_once():
    header = request_header(0)
    wanted = types.SimpleNamespace(topic_name="t", partitions=[0, 1, 2])

    async def describe():
        request = types.SimpleNamespace(groups=[types.SimpleNamespace(group_id="g", topics=[wanted])])
        response = await describe_share_group_offsets.handle(admin_broker(GatePersister(3)), header, request)
        [group] = response.groups
        assert [(p.partition_index, p.start_offset, p.error_code) for p in group.topics[0].partitions] == \
            [(0, 10, 0), (1, 11, 0), (2, 12, 0)]

    async def alter():
        persister = GatePersister(3)
        entries = [types.SimpleNamespace(partition_index=p, start_offset=5) for p in (0, 1, 2)]
        topic = types.SimpleNamespace(topic_name="t", partitions=entries)
        request = types.SimpleNamespace(group_id="g", topics=[topic])
        response = await alter_share_group_offsets.handle(admin_broker(persister), header, request)
        assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [(0, 0), (1, 0), (2, 0)]
        assert sorted(call for call in persister.calls if call[0] == "initialize") == \
            [("initialize", p, 3, 5) for p in (0, 1, 2)]

    async def delete():
        persister = GatePersister(3)
        request = types.SimpleNamespace(group_id="g", topics=[wanted])
        response = await delete_share_group_offsets.handle(admin_broker(persister), header, request)
        assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [(0, 0), (1, 0), (2, 0)]
        assert sorted(persister.calls) == [("delete", 0), ("delete", 1), ("delete", 2)]

    for scenario in (describe, alter, delete):
        asyncio.run(scenario())


def test_a_write_of_a_share_partition_whose_state_was_deleted_is_fenced():
    led = types.SimpleNamespace(leader=1, leader_epoch=0)
    broker = types.SimpleNamespace(
        node_id=1, config=BrokerConfig(), partition=lambda topic, index: led,
        topic=lambda name: types.SimpleNamespace(partitions={0: led}),
        topic_by_id=lambda topic_id: types.SimpleNamespace(partitions={3: None}))
    coordinator = ShareCoordinator(broker)
    coordinator.loaded_epochs = {0: 0}
    # Nothing stored (DeleteGroups deleted it): the leader's write must not bring the state back.
    assert asyncio.run(coordinator.write(KEY, ShareState(0, 0, 5, [StateBatch(5, 6, ACKNOWLEDGED, 1)]))) == \
        ErrorCode.FENCED_STATE_EPOCH
    assert coordinator.states == {}


def test_delete_groups_deletes_a_share_groups_state_first():
    persister = GatePersister(3)
    broker = admin_broker(persister)
    group = broker.groups.group("g")
    group.group_id, group.state_topics = "g", {"t", "gone"}
    deleted = []
    broker.groups.delete_group = lambda group_id: deleted.append(group_id) or ErrorCode.NONE
    assert asyncio.run(delete_groups._delete(broker, "g")) == ErrorCode.NONE
    assert sorted(persister.calls) == [("delete", 0), ("delete", 1), ("delete", 2)]
    assert deleted == ["g"]

    async def refused(group_id, topic_id, partition):
        raise CoordinatorError(ErrorCode.REQUEST_TIMED_OUT)

    persister.delete = refused
    assert asyncio.run(delete_groups._delete(broker, "g")) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert deleted == ["g"]  # the group stays while its state could not be deleted
