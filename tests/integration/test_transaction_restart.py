"""Transactions across a full restart of the cluster (every node stopped, then started on the same data
dir, as `kraftwerk down` then `up`) and across a node killed with SIGKILL.

After the restart committed transactions are read and aborted ones hidden as before; a transaction
left open stays open, holding read_committed readers at its first offset, until a new instance of
its producer or its timeout aborts it, or its producer, still running, commits it; idempotent
producers' sequences and fenced epochs survive.
What carries this across is on disk in Kafka's formats: each partition directory's `.txnindex`
(the aborted transactions of each segment) and `.snapshot` files (each producer's state at the
log end, written as the log closes), read here with cluster/formats and checked entry by entry.
A node killed before its aborted-transaction index was complete rebuilds the missing entries
from its log as it opens it, as Kafka recovers a segment.
"""
from __future__ import annotations

import os
import time
import uuid
from types import SimpleNamespace

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from cluster.formats.producer_snapshot import SNAPSHOT_SUFFIX, read_snapshot
from cluster.formats.transaction_index import ENTRY_SIZE, TXN_INDEX_SUFFIX, AbortedTxn, read_entries
from cluster.launch import Cluster
from tests.integration import txn_wire
from tests.integration.observe import logged_errors
from tests.integration.txn_wire import (
    add_partitions, coordinator, end_txn, end_txn_when_ready, fetch, init_producer_id, last_stable_offset,
    leader_address, produce, wait_for_last_stable_offset, when_ready,
)

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
FIRST_SEGMENT = "00000000000000000000"
# Long enough to stay open through the restart, short enough to be waited for.
EXPIRING_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # A data dir of our own: it outlives stop(), which is what a restart starts again from.
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn-restart") / "kraftwerk",
                 node_config={"transaction.state.log.num.partitions": "5"}) as running:
        yield running
    logged = logged_errors(running)
    assert logged == {name: [] for name in logged}, "errors logged across restarts"


def new_topic(cluster, name: str, partitions: int) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    assert cluster.wait_in_sync(topic)
    return topic


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read(cluster, topic: str, partitions: int, isolation: str = "read_committed") -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record kafka-python reads at `isolation`, to the end offsets
    ListOffsets answers at that level."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, isolation_level=isolation,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(assigned)
        found = []
        deadline = time.monotonic() + 20
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, f"stuck before {ends}: {found}"
            for records in consumer.poll(timeout_ms=200).values():
                found += [(r.partition, r.offset, r.value) for r in records]
        return sorted(found)
    finally:
        consumer.close()


def partition_files(cluster, topic: str, partition: int) -> dict[int, dict[str, object]]:
    """node id -> what its replica directory of topic-partition holds: 'txnindex' (file name -> its
    entries) and 'snapshots' (file name -> its entries)."""
    found = {}
    for node_id in sorted(cluster.nodes):
        directory = cluster.data_dir / f"node-{node_id}" / f"{topic}-{partition}"
        found[node_id] = {
            "txnindex": {p.name: read_entries(p) for p in sorted(directory.glob(f"*{TXN_INDEX_SUFFIX}"))},
            "snapshots": {p.name: read_snapshot(p) for p in sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"))},
        }
    return found


# --- what the cluster holds when it is stopped, and what it shows once started again ---

@pytest.fixture(scope="module")
def restarted(cluster):
    """Transactions of every kind written, the cluster stopped (its partition directories read while
    it is down) and started again; what each test needs to know of it."""
    state = SimpleNamespace()
    bootstrap = cluster.bootstrap_servers

    # Committed and aborted transactions of a kafka-python producer over two partitions: in each,
    # two committed records, their marker (2), two aborted ones (3, 4), theirs (5), one committed
    # record (6) and its marker (7).
    state.kept = new_topic(cluster, "kept", partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=new_id("kept"))
    try:
        producer.init_transactions()
        state.kept_producer = producer._transaction_manager.producer_id_and_epoch.producer_id
        for commit, values in ((True, [b"c0", b"c1", b"c2", b"c3"]), (False, [b"a0", b"a1", b"a2", b"a3"]),
                               (True, [b"c4", b"c5"])):
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.send(state.kept, value, partition=i % 2)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
    finally:
        producer.close(10)
    state.kept_committed = [(0, 0, b"c0"), (0, 1, b"c2"), (0, 6, b"c4"), (1, 0, b"c1"), (1, 1, b"c3"), (1, 6, b"c5")]
    state.kept_all = sorted(state.kept_committed + [(0, 3, b"a0"), (0, 4, b"a2"), (1, 3, b"a1"), (1, 4, b"a3")])
    for partition in range(2):
        wait_for_last_stable_offset(cluster, state.kept, partition, 8)

    # An idempotent producer's batches.
    state.idem = new_topic(cluster, "idem", partitions=1)
    leader = leader_address(cluster, state.idem, 0)
    error, state.idem_producer, epoch = init_producer_id(leader, None)
    assert (error, epoch) == (NONE, 0)
    assert produce(leader, state.idem, 0, [b"i0", b"i1"], state.idem_producer, 0, 0, transactional=False) == (NONE, 0)
    assert produce(leader, state.idem, 0, [b"i2"], state.idem_producer, 0, 2, transactional=False) == (NONE, 2)

    # A transactional id whose first instance committed a transaction and was then fenced by a
    # second, which committed one too: the partition knows the second's epoch.
    state.fence = new_topic(cluster, "fence", partitions=1)
    state.fence_id = new_id("fence")
    address = coordinator(cluster, state.fence_id)
    leader = leader_address(cluster, state.fence, 0)
    error, state.fence_producer, state.old_epoch = init_producer_id(address, state.fence_id)
    assert error == NONE
    for epoch, value in ((state.old_epoch, b"old"), (state.old_epoch + 1, b"new")):
        if epoch != state.old_epoch:
            assert when_ready(lambda: init_producer_id(address, state.fence_id)) == (NONE, state.fence_producer, epoch)
        assert add_partitions(address, state.fence_id, state.fence_producer, epoch, {state.fence: [0]}) == {
            (state.fence, 0): NONE}
        assert produce(leader, state.fence, 0, [value], state.fence_producer, epoch, 0, state.fence_id)[0] == NONE
        assert end_txn(address, state.fence_id, state.fence_producer, epoch, True) == NONE
    state.new_epoch = state.old_epoch + 1
    wait_for_last_stable_offset(cluster, state.fence, 0, 4)

    # Two transactions left open, each after a record of an (idempotent) producer outside any
    # transaction and before another: one to be aborted by a new instance of its producer, one by its
    # timeout. The latter is opened last.
    state.open = new_topic(cluster, "open", partitions=2)
    plain = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    try:
        state.open_ids, state.open_producers = {}, {}
        for partition, timeout_ms in ((0, 60_000), (1, EXPIRING_TIMEOUT_MS)):
            plain.send(state.open, b"before", partition=partition).get(10)
            transactional_id = state.open_ids[partition] = new_id(f"open-{partition}")
            address = coordinator(cluster, transactional_id)
            error, producer_id, epoch = init_producer_id(address, transactional_id, timeout_ms)
            assert (error, epoch) == (NONE, 0)
            state.open_producers[partition] = producer_id
            assert add_partitions(address, transactional_id, producer_id, 0, {state.open: [partition]}) == {
                (state.open, partition): NONE}
            assert produce(leader_address(cluster, state.open, partition), state.open, partition, [b"open"],
                           producer_id, 0, 0, transactional_id) == (NONE, 1)
            plain.send(state.open, b"meanwhile", partition=partition).get(10)
        state.plain_producer = plain._transaction_manager.producer_id_and_epoch.producer_id
    finally:
        plain.close(10)

    # A transaction librdkafka keeps open across the restart, to go on with afterwards.
    state.resumed = new_topic(cluster, "resumed", partitions=2)
    state.resuming = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": new_id("resumed"),
                                               "linger.ms": 5, "log_level": 0})
    state.resuming.init_transactions(15)
    state.resuming.begin_transaction()
    state.resuming.produce(state.resumed, b"before the restart", partition=0)
    assert state.resuming.flush(10) == 0

    cluster.stop()
    state.files = {(topic, p): partition_files(cluster, topic, p)
                   for topic, partitions in ((state.kept, 2), (state.idem, 1), (state.fence, 1), (state.open, 2))
                   for p in range(partitions)}
    cluster.start()
    # Both open transactions are still open: read_committed readers stop at their first offsets.
    state.lso_after_start = {p: current_last_stable_offset(cluster, state.open, p) for p in range(2)}
    # Nodes came back one by one; once the controller has given each partition back to its preferred
    # leader, leaderships stay where they are for the tests.
    txn_wire.wait_for_preferred_leaders(cluster, [state.kept, state.idem, state.fence, state.open])
    return state


def current_last_stable_offset(cluster, topic: str, partition: int) -> int:
    deadline = time.monotonic() + 10
    while True:
        try:
            return last_stable_offset(leader_address(cluster, topic, partition), topic, partition)
        except txn_wire.NotLeader:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_partition_directories_hold_kafkas_txnindex_and_snapshot_files(restarted):
    """Every replica of a partition holds the same files, read with Kafka's layouts: an aborted
    transaction in the `.txnindex` of the segment holding its marker (producer id, first offset,
    the marker's offset, the LSO then), and the producers at the log end in `.snapshot`."""
    state = restarted
    for partition in range(2):
        for node_id, found in state.files[(state.kept, partition)].items():
            assert found["txnindex"] == {f"{FIRST_SEGMENT}{TXN_INDEX_SUFFIX}": [
                AbortedTxn(producer_id=state.kept_producer, first_offset=3, last_offset=5, last_stable_offset=6)]}
            [(name, [entry])] = found["snapshots"].items()
            assert name == f"{8:020d}{SNAPSHOT_SUFFIX}", node_id  # taken at the log end, as the log closed
            assert (entry.producer_id, entry.epoch, entry.last_sequence, entry.last_offset, entry.offset_delta,
                    entry.current_txn_first_offset) == (state.kept_producer, 0, 4, 6, 0, -1)
            assert entry.timestamp > 0 and entry.coordinator_epoch >= 0
    # The coordinator epoch of the markers is the same on every replica.
    assert len({entry.coordinator_epoch for found in state.files[(state.kept, 0)].values()
                for entries in found["snapshots"].values() for entry in entries}) == 1

    for node_id, found in state.files[(state.idem, 0)].items():
        assert found["txnindex"] == {}  # no aborted transaction: no file, as in Kafka
        assert {name: [(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
                        e.current_txn_first_offset) for e in entries] for name, entries in found["snapshots"].items()
                } == {f"{3:020d}{SNAPSHOT_SUFFIX}": [(state.idem_producer, 0, 2, 2, 0, -1)]}, node_id

    for node_id, found in state.files[(state.fence, 0)].items():
        [(name, [entry])] = found["snapshots"].items()
        assert name == f"{4:020d}{SNAPSHOT_SUFFIX}"
        assert (entry.producer_id, entry.epoch, entry.last_offset, entry.current_txn_first_offset) == (
            state.fence_producer, state.new_epoch, 2, -1)

    for partition in range(2):
        for node_id, found in state.files[(state.open, partition)].items():
            assert found["txnindex"] == {}
            # The open transaction is in the snapshot: its first offset, 1, is where it resumes.
            assert {name: sorted((e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.current_txn_first_offset)
                                 for e in entries) for name, entries in found["snapshots"].items()} == {
                f"{3:020d}{SNAPSHOT_SUFFIX}": sorted([(state.open_producers[partition], 0, 0, 1, 1),
                                                      (state.plain_producer, 0, 1, 2, -1)])}, (node_id, partition)


def test_committed_transactions_stay_visible_and_aborted_ones_hidden(cluster, restarted):
    state = restarted
    assert read(cluster, state.kept, 2) == state.kept_committed
    assert read(cluster, state.kept, 2, "read_uncommitted") == state.kept_all
    for partition in range(2):
        answer, records = fetch(leader_address(cluster, state.kept, partition), state.kept, partition)
        assert (answer.high_watermark, answer.last_stable_offset) == (8, 8)
        assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(state.kept_producer, 3)]


def test_an_open_transaction_stays_open_until_a_new_instance_aborts_it(cluster, restarted):
    state = restarted
    assert state.lso_after_start[0] == 1
    leader = leader_address(cluster, state.open, 0)
    assert last_stable_offset(leader, state.open, 0) == 1
    assert read(cluster, state.open, 1) == [(0, 0, b"before")]

    # A new instance of its producer (kafka-python, as an application restarted) aborts it.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=state.open_ids[0])
    try:
        producer.init_transactions()
    finally:
        producer.close(10)
    wait_for_last_stable_offset(cluster, state.open, 0, 4)
    answer, records = fetch(leader, state.open, 0)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(state.open_producers[0], 1)]
    assert [(offset, value) for offset, value, control in records if not control] == [
        (0, b"before"), (1, b"open"), (2, b"meanwhile")]
    assert [offset for offset, _, control in records if control] == [3]  # the ABORT marker


def test_an_open_transaction_is_aborted_by_its_timeout_after_the_restart(cluster, restarted):
    state = restarted
    assert state.lso_after_start[1] == 1  # still open when the cluster came back
    leader = leader_address(cluster, state.open, 1)
    wait_for_last_stable_offset(cluster, state.open, 1, 4, timeout_s=EXPIRING_TIMEOUT_MS / 1000 + 20)
    answer, _ = fetch(leader, state.open, 1)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(state.open_producers[1], 1)]
    # The abort fenced its producer: the instance that opened it can no longer end it.
    transactional_id = state.open_ids[1]
    assert end_txn(coordinator(cluster, transactional_id), transactional_id, state.open_producers[1], 0,
                   True) == PRODUCER_FENCED


def test_a_producer_goes_on_with_its_open_transaction_after_the_restart(cluster, restarted):
    """librdkafka's producer, its transaction open while every node restarted, writes to another
    partition and commits: the coordinator took the transaction back from __transaction_state."""
    state = restarted
    state.resuming.produce(state.resumed, b"after the restart", partition=1)
    state.resuming.commit_transaction(30)
    for partition in range(2):
        wait_for_last_stable_offset(cluster, state.resumed, partition, 2)
    assert read(cluster, state.resumed, 2) == [(0, 0, b"before the restart"), (1, 0, b"after the restart")]


def test_an_idempotent_retry_after_the_restart_is_still_deduplicated(cluster, restarted):
    state = restarted
    leader = leader_address(cluster, state.idem, 0)
    # The last batch, retried, is answered with its offset and not written again; Kafka's snapshot
    # keeps each producer's last batch only, so the one before it is out of sequence by now.
    assert produce(leader, state.idem, 0, [b"i2"], state.idem_producer, 0, 2, transactional=False) == (NONE, 2)
    assert produce(leader, state.idem, 0, [b"i0", b"i1"], state.idem_producer, 0, 0, transactional=False) == (
        OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert produce(leader, state.idem, 0, [b"i3"], state.idem_producer, 0, 3, transactional=False) == (NONE, 3)
    assert read(cluster, state.idem, 1, "read_uncommitted") == [
        (0, 0, b"i0"), (0, 1, b"i1"), (0, 2, b"i2"), (0, 3, b"i3")]


def test_a_fenced_epoch_stays_fenced_after_the_restart(cluster, restarted):
    state = restarted
    transactional_id, producer_id = state.fence_id, state.fence_producer
    address = coordinator(cluster, transactional_id)
    leader = leader_address(cluster, state.fence, 0)
    old, new = state.old_epoch, state.new_epoch
    # The coordinator (its state replayed from __transaction_state) refuses the old epoch...
    assert add_partitions(address, transactional_id, producer_id, old, {state.fence: [0]}) == {
        (state.fence, 0): PRODUCER_FENCED}
    assert end_txn(address, transactional_id, producer_id, old, True) == PRODUCER_FENCED
    assert init_producer_id(address, transactional_id, producer_id=producer_id, epoch=old) == (PRODUCER_FENCED, -1, -1)
    # ...and so does the partition (its producers from the snapshot), with or without the coordinator.
    assert produce(leader, state.fence, 0, [b"zombie"], producer_id, old, 1, transactional_id) == (
        INVALID_PRODUCER_EPOCH, -1)
    assert produce(leader, state.fence, 0, [b"zombie"], producer_id, old, 1, transactional=False) == (
        INVALID_PRODUCER_EPOCH, -1)
    # The current epoch goes on where it was.
    assert add_partitions(address, transactional_id, producer_id, new, {state.fence: [0]}) == {(state.fence, 0): NONE}
    assert produce(leader, state.fence, 0, [b"after"], producer_id, new, 1, transactional_id) == (NONE, 4)
    assert end_txn_when_ready(address, transactional_id, producer_id, new, True) == NONE
    wait_for_last_stable_offset(cluster, state.fence, 0, 6)
    assert read(cluster, state.fence, 1) == [(0, 0, b"old"), (0, 2, b"new"), (0, 4, b"after")]


# --- a node killed with SIGKILL ---

def test_a_killed_node_rebuilds_the_aborted_transaction_index_its_crash_left_short(cluster):
    topic = new_topic(cluster, "crash", partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=new_id("crash"))
    try:
        producer.init_transactions()
        producer_id = producer._transaction_manager.producer_id_and_epoch.producer_id
        # x0 (0), COMMIT (1), y0 y1 (2, 3), ABORT (4), x1 (5), COMMIT (6), z0 (7), ABORT (8), x2 (9), COMMIT (10)
        for commit, values in ((True, [b"x0"]), (False, [b"y0", b"y1"]), (True, [b"x1"]), (False, [b"z0"]),
                               (True, [b"x2"])):
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value, partition=0)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
    finally:
        producer.close(10)
    expected = [AbortedTxn(producer_id, 2, 4, 5), AbortedTxn(producer_id, 7, 8, 9)]
    wait_for_last_stable_offset(cluster, topic, 0, 11)
    assert cluster.wait_in_sync(topic)

    victim = txn_wire.leader_of(cluster, topic, 0)  # the preferred leader, so an election brings it back
    index = cluster.data_dir / f"node-{victim}" / f"{topic}-0" / f"{FIRST_SEGMENT}{TXN_INDEX_SUFFIX}"
    assert read_entries(index) == expected
    cluster.kill_node(victim)
    # No clean close, so no snapshot: the node replays this log from its start when it opens it.
    assert not list(index.parent.glob(f"*{SNAPSHOT_SUFFIX}"))
    # The crash left the index short: the second entry, and half of it for good measure, are gone.
    os.truncate(index, ENTRY_SIZE + ENTRY_SIZE // 2)
    cluster.restart_node(victim)
    assert cluster.wait_in_sync(topic)
    assert read_entries(index) == expected

    # Leading again, the node answers read_committed readers from the rebuilt index.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        deadline = time.monotonic() + 20
        while txn_wire.leader_of(cluster, topic, 0) != victim:
            assert time.monotonic() < deadline, "the preferred leader was not elected again"
            admin.elect_leaders(0, {topic: [0]}, raise_errors=False)
            time.sleep(0.2)
    finally:
        admin.close()
    leader = txn_wire.node_addresses(cluster)[victim]
    wait_for_last_stable_offset(cluster, topic, 0, 11)
    answer, _ = fetch(leader, topic, 0)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [
        (producer_id, 2), (producer_id, 7)]
    assert read(cluster, topic, 1) == [(0, 0, b"x0"), (0, 5, b"x1"), (0, 9, b"x2")]
