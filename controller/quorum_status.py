"""What DescribeQuorum answers about the metadata log's quorum, and who its voters are.

Kafka's leader answers from its Raft state (KafkaRaftClient.handleDescribeQuorumRequest): the
leader, its epoch, the high watermark, and for each voter and observer its log end offset, when it
last fetched and when it last caught up with the leader's log end. Here the voters are the
controllers: the leader's own log end, and for each other voter the offset it last fetched from
and the times of its fetches as the leader saw them (-1 before its first fetch in this epoch). The
nodes are the observers: they follow the log over the control channel rather than Raft's Fetch,
so their log end is one past the offset they last reported applied, their last fetch is their last
heartbeat, and they last caught up at the last heartbeat that reported the committed end.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

NO_DIRECTORY_ID = uuid.UUID(int=0)  # Kafka's ReplicaKey.NO_DIRECTORY_ID (Uuid.ZERO_UUID)


@dataclass(frozen=True)
class Voter:
    """This controller as a voter of the quorum: its id, its log dir's directory.id, and the
    listener it serves the control channel on (name, host, port)."""
    node_id: int
    directory_id: uuid.UUID
    listener: tuple[str, str, int]


def describe_quorum(controller, voter: Voter) -> dict:
    """The quorum as the DescribeQuorum answer carries it, times in milliseconds since the epoch."""
    now_ms = int(time.time() * 1000)
    quorum = controller.writer.quorum
    state = quorum.replica.state
    fetch_offsets = getattr(state, "fetch_offsets", {})
    voters, nodes = [], []
    name = voter.listener[0]
    for voter_id, (host, port) in sorted(quorum.voters.items()):
        if voter_id == voter.node_id:
            voters.append({"replica_id": voter_id, "directory_id": voter.directory_id.bytes,
                           "log_end_offset": quorum.raft_log.end_offset(),
                           "last_fetch_timestamp": now_ms, "last_caught_up_timestamp": now_ms})
            host, port = voter.listener[1:]
        else:
            voters.append({"replica_id": voter_id, "directory_id": NO_DIRECTORY_ID.bytes,
                           "log_end_offset": fetch_offsets.get(voter_id, -1),
                           "last_fetch_timestamp": quorum.last_fetch_ms.get(voter_id, -1),
                           "last_caught_up_timestamp": quorum.last_caught_up_ms.get(voter_id, -1)})
        nodes.append({"node_id": voter_id, "listeners": [{"name": name, "host": host, "port": port}]})
    observers = []
    for node_id, session in sorted(controller.sessions.items()):
        last_fetch_ms = now_ms - session.heartbeat_age_ms() if session.heard_from else -1
        observers.append({"replica_id": node_id, "directory_id": NO_DIRECTORY_ID.bytes,
                          "log_end_offset": session.applied_offset + 1 if session.applied_offset >= 0 else -1,
                          "last_fetch_timestamp": last_fetch_ms,
                          "last_caught_up_timestamp": session.caught_up_ms})
    return {"leader_id": quorum.replica.leader_id, "leader_epoch": quorum.replica.epoch,
            "high_watermark": quorum.high_watermark, "voters": voters, "observers": observers, "nodes": nodes}
