"""What DescribeQuorum answers about the metadata log's quorum, and who its voters are.

Kafka's leader answers from its Raft state (KafkaRaftClient.handleDescribeQuorumRequest): the
leader, its epoch, the high watermark, and for each voter and observer its log end offset, when it
last fetched and when it last caught up with the leader's log end. Here the single controller is
the quorum's only voter and its leader, in the epoch it writes its batches with; its high
watermark is the log end, since a batch counts once it is fsynced. The nodes are the observers:
their log end is one past the offset they last reported applied, their last fetch is their last
heartbeat, and they last caught up at the last heartbeat that reported the controller's log end.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from controller.metadata_writer import CONTROLLER_EPOCH

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
    end_offset = controller.writer.end_offset
    observers = []
    for node_id, session in sorted(controller.sessions.items()):
        last_fetch_ms = now_ms - session.heartbeat_age_ms() if session.heard_from else -1
        observers.append({"replica_id": node_id, "directory_id": NO_DIRECTORY_ID.bytes,
                          "log_end_offset": session.applied_offset + 1 if session.applied_offset >= 0 else -1,
                          "last_fetch_timestamp": last_fetch_ms,
                          "last_caught_up_timestamp": session.caught_up_ms})
    name, host, port = voter.listener
    return {
        "leader_id": voter.node_id, "leader_epoch": CONTROLLER_EPOCH, "high_watermark": end_offset,
        "voters": [{"replica_id": voter.node_id, "directory_id": voter.directory_id.bytes, "log_end_offset": end_offset,
                    "last_fetch_timestamp": now_ms, "last_caught_up_timestamp": now_ms}],
        "observers": observers,
        "nodes": [{"node_id": voter.node_id, "listeners": [{"name": name, "host": host, "port": port}]}],
    }
