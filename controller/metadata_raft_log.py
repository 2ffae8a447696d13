"""The metadata log (`__cluster_metadata-0`, a PartitionLog) as the Raft state machine's `RaftLog`.

One Raft entry is one record batch: its offset is the batch's base offset, its epoch the batch's
partition leader epoch, its payload the batch's bytes; the next entry starts at the batch's next
offset. Offsets therefore count records, as Kafka's do, and what the quorum commits is exactly what
nodes fetch. A leader's control entry is written as Kafka's LeaderChangeMessage control batch.

Appends are durable when they return (the quorum may count them toward a majority at once): a
follower's or leader's append is fsynced before the call returns. Metadata batches are few and
small, so the fsync runs on the event loop rather than in a thread, which would let the state
machine see a log that is not durable yet.
"""
from __future__ import annotations

import struct
import time
from typing import Sequence

from cluster.formats.partition_log import PartitionLog
from cluster.formats.records import iter_batch_headers
from cluster.formats.snapshots import control_batch
from controller.raft.log import LogEntry, OffsetAndEpoch

LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
LEADER_CHANGE_VERSION = 0
# Bytes read per entry asked for: a metadata batch is at most a few MiB (a 1,000-topic creation).
READ_BYTES_PER_ENTRY = 64 * 1024
READ_MAX_BYTES = 8 << 20


def leader_change_value(leader_id: int, voters: Sequence[int], granting: Sequence[int]) -> bytes:
    """LeaderChangeMessage v0 (flexible): version, leader id, voters and granting voters as compact
    arrays of {VoterId} each with empty tagged fields, then the message's empty tagged fields."""
    def voters_array(ids: Sequence[int]) -> bytes:
        return bytes([len(ids) + 1]) + b"".join(struct.pack(">i", voter) + b"\x00" for voter in sorted(ids))
    return (struct.pack(">hi", LEADER_CHANGE_VERSION, leader_id) + voters_array(voters) + voters_array(granting)
            + b"\x00")


class MetadataRaftLog:
    def __init__(self, log: PartitionLog, node_id: int, voters: Sequence[int]):
        self.log = log
        self.node_id = node_id
        self.voters = tuple(sorted(voters))

    def end_offset(self) -> int:
        return self.log.log_end_offset

    def last_epoch(self) -> int:
        return self.log.latest_epoch or 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found_epoch, end = self.log.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            return OffsetAndEpoch(0, 0)
        return OffsetAndEpoch(end, found_epoch)

    def read(self, start: int, max_entries: int) -> Sequence[LogEntry]:
        if start >= self.log.log_end_offset or start < self.log.log_start_offset:
            return []
        data = self.log.read(start, min(READ_MAX_BYTES, max_entries * READ_BYTES_PER_ENTRY),
                             max_offset=self.log.log_end_offset).records
        view = memoryview(data)
        entries = []
        for position, header in iter_batch_headers(view):
            if header.base_offset < start:
                continue  # a read starts at the batch holding `start`; entries start at batches' bases
            entries.append(LogEntry(header.base_offset, header.partition_leader_epoch,
                                    bytes(view[position:position + header.size]), header.is_control))
            if len(entries) >= max_entries:
                break
        return entries

    def append_as_leader(self, payloads: Sequence[bytes], epoch: int, control: bool = False) -> int:
        first = self.log.log_end_offset
        if control:
            payloads = [control_batch(LEADER_CHANGE, leader_change_value(self.node_id, self.voters, (self.node_id,)),
                                      base_offset=first, epoch=epoch, timestamp=int(time.time() * 1000))]
        for payload in payloads:
            self.log.append(payload, leader_epoch=epoch)
        self.log.flush()
        return first

    def append_as_follower(self, entries: Sequence[LogEntry]) -> None:
        if not entries:
            return
        if entries[0].offset != self.log.log_end_offset:
            raise ValueError(f"append at offset {entries[0].offset} to a log ending at {self.log.log_end_offset}")
        self.log.append_as_follower(b"".join(entry.payload for entry in entries))
        self.log.flush()

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.log.flush()
