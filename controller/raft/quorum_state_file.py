"""Kafka's `quorum-state` file: a replica's election state, one JSON line in the metadata log dir.

Kafka's FileQuorumStateStore writes QuorumStateData (raft/src/main/resources/common/message/
QuorumStateData.json) as JSON with a `data_version` field beside it, through `quorum-state.tmp`,
an fsync and an atomic rename. Version 0 (static voters, kraft.version 0, what Kafka 3.7 writes):
`{"clusterId":"","leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,
"currentVoters":[{"voterId":1}],"data_version":0}`; version 1 (KIP-853) drops clusterId,
appliedOffset and currentVoters and adds votedDirectoryId.

Same as Kafka, except: this store writes version 0 only (no directory ids yet) and reads both; a
file that does not parse is refused with `QuorumStateFileError`, one line naming the file and what
is wrong with it, never read as an empty state, so a replica never forgets an epoch or a vote.
"""
from __future__ import annotations

import json
from pathlib import Path

from cluster.formats.files import fsync_directory, write_bytes_atomically
from controller.raft.election_state import NO_ID, ElectionState

FILE_NAME = "quorum-state"
DATA_VERSION = "data_version"
SUPPORTED_VERSIONS = (0, 1)
WRITTEN_VERSION = 0


class QuorumStateFileError(Exception):
    """A `quorum-state` file that cannot be read; the message is one line."""


class FileQuorumStateStore:
    """A `QuorumStateStore` in `<log dir>/quorum-state`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise QuorumStateFileError(f"{self.path}: cannot be read: {error}") from None
        return parse_quorum_state(text, self.path)

    def write(self, state: ElectionState) -> None:
        write_bytes_atomically(self.path, format_quorum_state(state).encode(), sync=True)
        fsync_directory(self.path.parent)

    def clear(self) -> None:
        for path in (self.path, Path(f"{self.path}.tmp")):
            path.unlink(missing_ok=True)


def format_quorum_state(state: ElectionState) -> str:
    """Version 0 as Kafka's Jackson writer spells it: the schema's field order, no spaces."""
    data = {
        "clusterId": "",
        "leaderId": state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": voter} for voter in sorted(state.voters)],
        DATA_VERSION: WRITTEN_VERSION,
    }
    return json.dumps(data, separators=(",", ":"))


def parse_quorum_state(text: str, path: Path | str = FILE_NAME) -> ElectionState:
    line = text.split("\n", 1)[0]
    if not line.strip():
        raise QuorumStateFileError(f"{path}: empty, not a quorum-state file")
    try:
        data = json.loads(line)
    except ValueError as error:
        raise QuorumStateFileError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise QuorumStateFileError(f"{path}: not a JSON object")
    version = data.get(DATA_VERSION)
    if type(version) is not int:
        raise QuorumStateFileError(f"{path}: no {DATA_VERSION} field")
    if version not in SUPPORTED_VERSIONS:
        raise QuorumStateFileError(
            f"{path}: {DATA_VERSION} ({version}) is not within the supported versions {SUPPORTED_VERSIONS}")
    return ElectionState(
        epoch=_int_field(data, "leaderEpoch", path),
        leader_id=_int_field(data, "leaderId", path),
        voted_id=_int_field(data, "votedId", path),
        voters=_voters(data, path) if version == 0 else frozenset(),
    )


def _int_field(data: dict, name: str, path: Path | str) -> int:
    """Kafka's converter defaults a missing int field to the schema's default (-1)."""
    value = data.get(name, NO_ID)
    if type(value) is not int or value < -1 or value > 2**31 - 1:
        raise QuorumStateFileError(f"{path}: {name} is {value!r}, not an int32 of at least -1")
    return value


def _voters(data: dict, path: Path | str) -> frozenset[int]:
    voters = data.get("currentVoters")
    if voters is None:
        return frozenset()
    if not isinstance(voters, list) or not all(
            isinstance(voter, dict) and type(voter.get("voterId")) is int for voter in voters):
        raise QuorumStateFileError(f"{path}: currentVoters is not a list of {{\"voterId\": int}}")
    return frozenset(voter["voterId"] for voter in voters)
