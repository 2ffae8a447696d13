"""Transactions seen and repaired from outside: ListTransactions, DescribeTransactions and DescribeProducers
through kafka-python's admin client and raw requests, and `kraftwerk txn` as a user runs it, down to a
hanging transaction found by `txn find-hanging` and aborted by `txn abort`."""
from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import TransactionState
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    ListTransactionsRequest, ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse

from cluster.formats.errors import ErrorCode
from cluster.formats.records import ATTR_TRANSACTIONAL, encode_batch
from cluster.launch import Cluster
from tests.integration.test_cli import KRAFTWERK
from tests.integration.test_transactions import read_all, transactional_producer, values
from tests.integration.wire import exchange_once

LONG_TIMEOUT_MS = 600_000  # the open transaction must outlive the module
HANGING_AGE_MS = 20 * 60_000 + 1_000  # older than kafka-transactions.sh's default 15 minutes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Without KIP-890's verification a partition leader takes a transactional batch its coordinator
    # never heard of: how a hanging transaction is made here, as older Kafka brokers allowed.
    with Cluster(nodes=3, data_dir=tmp_path_factory.mktemp("txn-admin") / "cluster",
                 node_config={"transaction.state.log.num.partitions": "5",
                              "transaction.partition.verification.enable": "false"}) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, client_id="txn-admin-tests")
    yield client
    client.close()


@pytest.fixture(scope="module")
def setup(cluster):
    """A topic of two partitions written by three transactional producers, one after another:
    committed (partition 1), aborted (partitions 0 and 1), then open (partition 0)."""
    run = uuid.uuid4().hex[:6]
    topic = f"txn-admin-{run}"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    ids = {kind: f"{run}-{kind}" for kind in ("committed", "aborted", "open")}
    committed = transactional_producer(cluster, ids["committed"])
    committed.begin_transaction()
    committed.produce(topic, value=b"committed", partition=1)
    committed.commit_transaction(15)
    aborted = transactional_producer(cluster, ids["aborted"])
    aborted.begin_transaction()
    aborted.produce(topic, value=b"aborted-0", partition=0)
    aborted.produce(topic, value=b"aborted-1", partition=1)
    aborted.flush(10)
    aborted.abort_transaction(15)
    opened = transactional_producer(cluster, ids["open"], **{"transaction.timeout.ms": LONG_TIMEOUT_MS})
    before_ms = int(time.time() * 1000)
    opened.begin_transaction()
    opened.produce(topic, value=b"open", partition=0)
    opened.flush(10)
    after_ms = int(time.time() * 1000)
    yield {"run": run, "topic": topic, "ids": ids, "open_between": (before_ms, after_ms)}
    opened.abort_transaction(15)


def address_of(cluster, node_id: int) -> tuple[str, int]:
    return cluster.host, cluster.nodes[node_id].port


def kraftwerk(cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*KRAFTWERK, *args, "--data-dir", str(cluster.data_dir)], capture_output=True, text=True,
                            timeout=120)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result


def table(output: str) -> list[list[str]]:
    """The cells of a table printed as Kafka's tools print them, checking its layout on the way: every
    line ends with a tab, and each column is as wide in every line."""
    lines = output.splitlines()
    assert lines and all(line.endswith("\t") for line in lines), repr(output)
    cells = [line.split("\t")[:-1] for line in lines]
    for column in zip(*cells):
        assert len({len(cell) for cell in column}) == 1, repr(output)
    return [[cell.rstrip() for cell in line] for line in cells]


def producer_ids(admin, setup) -> dict[str, int]:
    described = admin.describe_transactions(list(setup["ids"].values()))
    return {kind: described[t].producer_id for kind, t in setup["ids"].items()}


def coordinator_of(cluster, transactional_id: str) -> int:
    return cluster.transaction_coordinator(transactional_id)["coordinator"]


def partition_leader(admin, topic: str, partition: int) -> int:
    described = admin.describe_topics([topic])[0]
    return next(p["leader_id"] for p in described["partitions"] if p["partition_index"] == partition)


# --- the admin APIs, through kafka-python's KafkaAdminClient ---

def test_every_coordinator_lists_its_ids_with_producer_ids_and_states(cluster, admin, setup):
    pids = producer_ids(admin, setup)
    ids = setup["ids"]
    listed = {listing.transactional_id: (coordinator, listing.producer_id, listing.state)
              for coordinator, listings in admin.list_transactions().items() for listing in listings
              if listing.transactional_id.startswith(setup["run"])}
    assert listed == {
        ids["committed"]: (coordinator_of(cluster, ids["committed"]), pids["committed"], TransactionState.COMPLETE_COMMIT),
        ids["aborted"]: (coordinator_of(cluster, ids["aborted"]), pids["aborted"], TransactionState.COMPLETE_ABORT),
        ids["open"]: (coordinator_of(cluster, ids["open"]), pids["open"], TransactionState.ONGOING)}
    assert len(set(pids.values())) == 3

    def ids_listed(**filters) -> set[str]:
        return {listing.transactional_id for listings in admin.list_transactions(**filters).values()
                for listing in listings if listing.transactional_id.startswith(setup["run"])}

    assert ids_listed(state_filters=["Ongoing"]) == {ids["open"]}
    assert ids_listed(state_filters=["CompleteAbort", "CompleteCommit"]) == {ids["aborted"], ids["committed"]}
    assert ids_listed(producer_id_filters=[pids["aborted"]]) == {ids["aborted"]}
    assert ids_listed(transactional_id_pattern=f"{setup['run']}-(open|aborted)") == {ids["open"], ids["aborted"]}
    assert ids_listed(transactional_id_pattern="open") == set()  # the whole id must match
    assert ids_listed(duration_filter_ms=LONG_TIMEOUT_MS) == set()  # none started ten minutes ago
    assert ids_listed(duration_filter_ms=0) == set(ids.values())


def test_describe_gives_the_state_epoch_timeout_start_and_partitions(cluster, admin, setup):
    ids, topic = setup["ids"], setup["topic"]
    described = admin.describe_transactions(list(ids.values()))
    opened = described[ids["open"]]
    assert opened.coordinator_id == coordinator_of(cluster, ids["open"])
    assert opened.state == TransactionState.ONGOING
    assert opened.producer_epoch == 0  # one InitProducerId, on an id never used before
    assert opened.transaction_timeout_ms == LONG_TIMEOUT_MS
    low, high = setup["open_between"]
    assert low <= opened.transaction_start_time_ms <= high
    assert opened.topic_partitions == {TopicPartition(topic, 0)}
    for kind, state in (("committed", TransactionState.COMPLETE_COMMIT), ("aborted", TransactionState.COMPLETE_ABORT)):
        done = described[ids[kind]]
        assert (done.state, done.producer_epoch, done.transaction_timeout_ms, done.topic_partitions) == \
            (state, 0, 60_000, set())  # librdkafka's default transaction.timeout.ms
        assert 0 < done.transaction_start_time_ms < low


def test_describe_producers_shows_each_producer_of_a_partition(cluster, admin, setup):
    topic = setup["topic"]
    pids = producer_ids(admin, setup)
    coordinator_epochs = {kind: transaction_state_leader_epoch(cluster, admin, setup["ids"][kind])
                          for kind in ("committed", "aborted")}
    found = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    by_partition = {tp.partition: {p.producer_id: p for p in state.active_producers} for tp, state in found.items()}
    # Partition 0: aborted-0 at 0, its ABORT marker at 1, then the open transaction from offset 2.
    zero = by_partition[0]
    assert set(zero) == {pids["aborted"], pids["open"]}
    assert (zero[pids["open"]].producer_epoch, zero[pids["open"]].last_sequence,
            zero[pids["open"]].coordinator_epoch, zero[pids["open"]].current_transaction_start_offset) == (0, 0, -1, 2)
    assert (zero[pids["aborted"]].producer_epoch, zero[pids["aborted"]].last_sequence,
            zero[pids["aborted"]].coordinator_epoch, zero[pids["aborted"]].current_transaction_start_offset) == \
        (0, 0, coordinator_epochs["aborted"], -1)
    low, _ = setup["open_between"]
    assert zero[pids["open"]].last_timestamp >= low
    # Partition 1: committed at 0, COMMIT at 1, aborted-1 at 2, ABORT at 3; nothing open.
    one = by_partition[1]
    assert {pid: (p.last_sequence, p.coordinator_epoch, p.current_transaction_start_offset)
            for pid, p in one.items()} == {pids["committed"]: (0, coordinator_epochs["committed"], -1),
                                           pids["aborted"]: (0, coordinator_epochs["aborted"], -1)}
    # Any replica answers, as in Kafka: a follower knows the same producers.
    leader = partition_leader(admin, topic, 0)
    follower = next(n for n in cluster.nodes if n != leader)
    from_follower = admin.describe_producers([TopicPartition(topic, 0)], broker_id=follower)
    assert {p.producer_id: p.current_transaction_start_offset
            for p in from_follower[TopicPartition(topic, 0)].active_producers} == {pids["aborted"]: -1,
                                                                                 pids["open"]: 2}


def transaction_state_leader_epoch(cluster, admin, transactional_id: str) -> int:
    """The coordinator epoch of the id's markers: its __transaction_state partition's leader epoch."""
    placement = cluster.transaction_coordinator(transactional_id)
    described = admin.describe_topics(["__transaction_state"])[0]
    return next(p["leader_epoch"] for p in described["partitions"] if p["partition_index"] == placement["partition"])


def test_the_transaction_coordinator_is_the_one_find_coordinator_names(cluster, setup):
    transactional_id = setup["ids"]["open"]
    placement = cluster.transaction_coordinator(transactional_id)
    found = exchange_once(address_of(cluster, 1), FindCoordinatorRequest[3](key=transactional_id, key_type=1),
                          FindCoordinatorResponse, 3)
    assert found.error_code == 0
    assert placement["topic"] == "__transaction_state" and placement["coordinator"] == found.node_id
    assert 0 <= placement["partition"] < 5


# --- Kafka's error codes, in raw requests to chosen nodes ---

def test_describe_transactions_errors(cluster, setup):
    transactional_id = setup["ids"]["open"]
    coordinator = coordinator_of(cluster, transactional_id)
    other = next(n for n in cluster.nodes if n != coordinator)

    def describe(node_id: int, *ids: str) -> list[tuple[str, int]]:
        answer = exchange_once(address_of(cluster, node_id), DescribeTransactionsRequest[0](transactional_ids=list(ids)),
                               DescribeTransactionsResponse, 0)
        return [(s.transactional_id, s.error_code) for s in answer.transaction_states]

    assert describe(other, transactional_id) == [(transactional_id, ErrorCode.NOT_COORDINATOR)]
    nobody = next(t for t in (f"nobody-{i}" for i in range(100)) if coordinator_of(cluster, t) == coordinator)
    assert describe(coordinator, nobody, "", transactional_id) == [
        (nobody, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND), ("", ErrorCode.INVALID_REQUEST), (transactional_id, 0)]


def test_describe_producers_errors(cluster, admin, setup):
    single = f"single-{setup['run']}"
    cluster.create_topic(single, partitions=1, replication_factor=1)
    leader = partition_leader(admin, single, 0)
    other = next(n for n in cluster.nodes if n != leader)
    T = DescribeProducersRequest.TopicRequest

    def describe(node_id: int, topic: str, *partitions: int) -> list[tuple[int, int, str | None, int]]:
        answer = exchange_once(address_of(cluster, node_id), DescribeProducersRequest[0](
            topics=[T(name=topic, partition_indexes=list(partitions))]), DescribeProducersResponse, 0)
        return [(p.partition_index, p.error_code, p.error_message, len(p.active_producers))
                for p in answer.topics[0].partitions]

    assert describe(leader, single, 0, 7) == [(0, 0, None, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, 0)]
    assert describe(other, single, 0) == [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 0)]
    assert describe(other, "no-such-topic", 0) == [
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", 0)]
    assert describe(other, "bad name", 0) == [
        (0, ErrorCode.INVALID_TOPIC_EXCEPTION,
         "Topic name \"bad name\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
         0)]


def test_list_transactions_filters_and_errors(cluster, setup):
    ids = setup["ids"]
    coordinator = coordinator_of(cluster, ids["open"])

    def listed(version: int, **fields) -> tuple[int, list[str], set[str]]:
        answer = exchange_once(address_of(cluster, coordinator), ListTransactionsRequest[version](**fields),
                               ListTransactionsResponse, version)
        return (answer.error_code, answer.unknown_state_filters,
                {s.transactional_id for s in answer.transaction_states if s.transactional_id.startswith(setup["run"])})

    assert listed(0, state_filters=["Ongoing", "Bogus"], producer_id_filters=[])[:2] == (0, ["Bogus"])
    assert ids["open"] in listed(0, state_filters=["Ongoing", "Bogus"], producer_id_filters=[])[2]
    # Only filters Kafka does not know: nothing matches them.
    assert listed(0, state_filters=["Bogus"], producer_id_filters=[]) == (0, ["Bogus"], set())
    assert listed(1, state_filters=[], producer_id_filters=[], duration_filter=-1)[0] == 0
    assert listed(2, state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern="(") == \
        (ErrorCode.INVALID_REGULAR_EXPRESSION, [], set())


# --- `kraftwerk txn` and `kraftwerk status --transactional-id` ---

def test_txn_list_describe_and_describe_producers_commands(cluster, admin, setup):
    ids, topic = setup["ids"], setup["topic"]
    pids = producer_ids(admin, setup)
    rows = table(kraftwerk(cluster, "txn", "list", "--state", "Ongoing", "--state", "CompleteAbort").stdout)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted(row for row in rows[1:] if row[0].startswith(setup["run"])) == [
        [ids["aborted"], str(coordinator_of(cluster, ids["aborted"])), str(pids["aborted"]), "CompleteAbort"],
        [ids["open"], str(coordinator_of(cluster, ids["open"])), str(pids["open"]), "Ongoing"]]
    as_json = json.loads(kraftwerk(cluster, "txn", "list", "--producer-id", str(pids["committed"]), "--json").stdout)
    assert as_json == [{"transactional_id": ids["committed"], "coordinator": coordinator_of(cluster, ids["committed"]),
                        "producer_id": pids["committed"], "state": "CompleteCommit"}]

    rows = table(kraftwerk(cluster, "txn", "describe", ids["open"]).stdout)
    assert rows[0] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                       "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                       "TopicPartitions"]
    started = admin.describe_transactions([ids["open"]])[ids["open"]].transaction_start_time_ms
    assert rows[1][:7] == [str(coordinator_of(cluster, ids["open"])), ids["open"], str(pids["open"]), "0", "Ongoing",
                           str(LONG_TIMEOUT_MS), str(started)]
    assert 0 < int(rows[1][7]) < 120_000 and rows[1][8] == f"{topic}-0"
    described = json.loads(kraftwerk(cluster, "txn", "describe", ids["committed"], "--json").stdout)
    assert {k: v for k, v in described.items() if k not in ("transaction_start_time_ms", "transaction_duration_ms")} \
        == {"coordinator_id": coordinator_of(cluster, ids["committed"]), "transactional_id": ids["committed"],
            "producer_id": pids["committed"], "producer_epoch": 0, "state": "CompleteCommit",
            "transaction_timeout_ms": 60_000, "topic_partitions": []}

    rows = table(kraftwerk(cluster, "txn", "describe-producers", topic, "0").stdout)
    assert rows[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                       "CurrentTransactionStartOffset"]
    epoch = transaction_state_leader_epoch(cluster, admin, ids["aborted"])
    assert sorted((row[0], row[1], row[2], row[3], row[5]) for row in rows[1:]) == sorted([
        (str(pids["aborted"]), "0", str(epoch), "0", "None"), (str(pids["open"]), "0", "-1", "0", "2")])


def test_txn_command_errors(cluster, setup):
    def error(*args: str) -> str:
        result = kraftwerk(cluster, *args, ok=False)
        assert result.returncode == 1 and result.stdout == ""
        return result.stderr.strip()

    assert error("txn", "describe", "nobody-at-all") == \
        "Error: Failed to describe transaction state of transactional-id 'nobody-at-all': " \
        "The transactionalId could not be found. (TRANSACTIONAL_ID_NOT_FOUND)"
    assert error("txn", "describe-producers", setup["topic"], "9").startswith(
        f"Error: Failed to describe producers for partition {setup['topic']}-9 on leader: ")
    assert error("txn", "abort", "--topic", setup["topic"], "--partition", "0", "--start-offset", "1") == \
        f"Error: Could not find any open transactions starting at offset 1 on partition {setup['topic']}-0"
    assert error("txn", "find-hanging") == \
        "Error: find-hanging needs --topic or --broker-id to limit the scope of the search. " \
        "See 'kraftwerk txn find-hanging --help'."
    assert error("txn", "list", "--transactional-id-pattern", "(").startswith(
        "Error: Invalid value for '--transactional-id-pattern': '(' is not a regular expression")


def test_status_shows_where_a_transactional_id_is_coordinated(cluster, setup):
    transactional_id = setup["ids"]["open"]
    placement = cluster.transaction_coordinator(transactional_id)
    document = json.loads(kraftwerk(cluster, "status", "--transactional-id", transactional_id, "--json").stdout)
    assert document["transaction_coordinators"] == [placement]
    shown = kraftwerk(cluster, "status", "--transactional-id", transactional_id).stdout
    assert "transaction coordinators" in shown
    assert any(transactional_id in line and f"__transaction_state-{placement['partition']}" in line
               and line.rstrip(" │").endswith(str(placement["coordinator"])) for line in shown.splitlines())


# --- a hanging transaction: found, aborted, and read past ---

def hanging_transaction(cluster, admin, topic: str, partition: int, transactional_id: str) -> dict:
    """A transactional batch written straight to the partition after InitProducerId, with no
    AddPartitionsToTxn: its coordinator never hears of it, so no marker will ever end it. Its
    timestamp makes it older than kafka-transactions.sh's default 15 minutes."""
    coordinator = coordinator_of(cluster, transactional_id)
    init = exchange_once(address_of(cluster, coordinator), InitProducerIdRequest[4](
        transactional_id=transactional_id, transaction_timeout_ms=LONG_TIMEOUT_MS, producer_id=-1,
        producer_epoch=-1), InitProducerIdResponse, 4)
    assert init.error_code == 0, init
    timestamp = int(time.time() * 1000) - HANGING_AGE_MS
    batch = encode_batch([(None, b"hanging")], timestamp=timestamp, attributes=ATTR_TRANSACTIONAL,
                         producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=0)
    T = ProduceRequest.TopicProduceData
    written = exchange_once(address_of(cluster, partition_leader(admin, topic, partition)), ProduceRequest[9](
        transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
            T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])]),
        ProduceResponse, 9).responses[0].partition_responses[0]
    assert written.error_code == 0, written
    return {"producer_id": init.producer_id, "epoch": init.producer_epoch, "offset": written.base_offset,
            "timestamp": timestamp}


def test_a_hanging_transaction_is_found_and_aborted(cluster, admin, setup):
    topic = setup["topic"]
    hung = hanging_transaction(cluster, admin, topic, 1, f"{setup['run']}-hanging")
    assert hung["offset"] == 4  # after partition 1's committed record, aborted record and their markers
    plain = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    plain.send(topic, b"after the hanging one", partition=1).get(10)
    plain.close()
    # read_committed readers stop at the hanging transaction (and at the open one in partition 0).
    assert values(read_all(cluster, topic, "read_committed", timeout_s=5)) == [b"committed"]

    expected_row = [topic, "1", str(hung["producer_id"]), str(hung["epoch"]), "-1", str(hung["offset"]),
                    str(hung["timestamp"]), "20"]
    header = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
              "Duration(min)"]
    # The open transaction in partition 0 is open too, but its coordinator has it: it is not hanging.
    assert table(kraftwerk(cluster, "txn", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
                 .stdout) == [header, expected_row]
    # By node, with Kafka's default 15 minutes, asked of a follower of the partition.
    follower = next(n for n in cluster.nodes if n != partition_leader(admin, topic, 1))
    assert table(kraftwerk(cluster, "txn", "find-hanging", "--broker-id", str(follower)).stdout) == \
        [header, expected_row]

    aborted = kraftwerk(cluster, "txn", "abort", "--topic", topic, "--partition", "1", "--start-offset",
                        str(hung["offset"])).stdout
    assert aborted == f"aborted the transaction of producer {hung['producer_id']} (epoch {hung['epoch']}) " \
                      f"that started at offset {hung['offset']} of {topic}-1\n"
    assert values(read_all(cluster, topic, "read_committed", expected=2, timeout_s=10)) == \
        [b"after the hanging one", b"committed"]
    assert json.loads(kraftwerk(cluster, "txn", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
                                "--json").stdout) == []
    after = admin.describe_producers([TopicPartition(topic, 1)])[TopicPartition(topic, 1)].active_producers
    hanging_one = next(p for p in after if p.producer_id == hung["producer_id"])
    assert (hanging_one.coordinator_epoch, hanging_one.current_transaction_start_offset) == (0, -1)
