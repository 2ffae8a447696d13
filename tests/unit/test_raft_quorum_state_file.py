"""Kafka's `quorum-state` file: read what Kafka 3.7 wrote, write it the way Kafka does, refuse what does not parse."""
from __future__ import annotations

import shutil

import pytest

from controller.raft.election_state import ElectionState
from controller.raft.quorum_state_file import FileQuorumStateStore, QuorumStateFileError, format_quorum_state

KAFKA_WRITTEN = ElectionState(epoch=1, leader_id=1, voted_id=-1, voters=frozenset({1}))


@pytest.fixture
def kafka_quorum_state(shared_dir, tmp_path):
    source = shared_dir / "fixtures" / "kafka-3.7-kraft-logdir" / "__cluster_metadata-0" / "quorum-state"
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    return shutil.copy(source, tmp_path / "quorum-state")


def test_reads_the_file_kafka_wrote(kafka_quorum_state):
    assert FileQuorumStateStore(kafka_quorum_state).read() == KAFKA_WRITTEN


def test_writes_byte_for_byte_what_kafka_writes(kafka_quorum_state):
    assert format_quorum_state(KAFKA_WRITTEN) == kafka_quorum_state.read_text()


def test_a_write_replaces_the_file_whole_and_reads_back(tmp_path):
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    assert store.read() is None
    store.write(ElectionState(epoch=7, leader_id=-1, voted_id=3, voters=frozenset({1, 2, 3})))
    store.write(ElectionState(epoch=8, leader_id=2, voted_id=-1, voters=frozenset({1, 2, 3})))
    assert store.read() == ElectionState(8, 2, -1, frozenset({1, 2, 3}))
    assert (tmp_path / "quorum-state").read_text() == (
        '{"clusterId":"","leaderId":2,"leaderEpoch":8,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    assert sorted(path.name for path in tmp_path.iterdir()) == ["quorum-state"]


def test_reads_version_1_from_kafka_with_kip_853(tmp_path):
    path = tmp_path / "quorum-state"
    path.write_text('{"leaderId":-1,"leaderEpoch":12,"votedId":2,'
                    '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    assert FileQuorumStateStore(path).read() == ElectionState(12, -1, 2, frozenset())


@pytest.mark.parametrize("text, reason", [
    ("", "empty, not a quorum-state file"),
    ("{\"leaderId\":1,", "not JSON (Expecting property name enclosed in double quotes: line 1 column 15 (char 14))"),
    ("[1, 2]", "not a JSON object"),
    ('{"leaderId":1,"leaderEpoch":1,"votedId":-1}', "no data_version field"),
    ('{"leaderEpoch":1,"data_version":2}', "data_version (2) is not within the supported versions (0, 1)"),
    ('{"leaderEpoch":"1","data_version":0}', "leaderEpoch is '1', not an int32 of at least -1"),
    ('{"leaderEpoch":1,"currentVoters":[1],"data_version":0}', 'currentVoters is not a list of {"voterId": int}'),
])
def test_a_file_that_does_not_parse_is_refused_in_one_line_and_left_alone(tmp_path, text, reason):
    path = tmp_path / "quorum-state"
    path.write_text(text)
    with pytest.raises(QuorumStateFileError) as refused:
        FileQuorumStateStore(path).read()
    assert str(refused.value) == f"{path}: {reason}"
    assert path.read_text() == text
