"""ShareFetch and ShareAcknowledge one request at a time, for tests: a share session driven by hand
against the leader of a partition, with the member id the test chooses (leaders do not ask the
group coordinator who is a member, as in Kafka)."""
from __future__ import annotations

import base64
import socket
import uuid
from dataclasses import dataclass, field

from kafka.record import MemoryRecords

from node.apis.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from node.apis.share_fetch import ShareFetchRequest, ShareFetchResponse
from tests.integration.wire import exchange

VERSION = 1
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3

FetchTopic = ShareFetchRequest.FetchTopic
FetchPartition = FetchTopic.FetchPartition
AckTopic = ShareAcknowledgeRequest.AcknowledgeTopic
AckPartition = AckTopic.AcknowledgePartition


def new_member_id() -> str:
    """A member id as Kafka's coordinators make them: a UUID in URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class Fetched:
    error_code: int
    acknowledge_error_code: int
    acquired: list[tuple[int, int, int]]  # (first, last, delivery count)
    values: dict[int, bytes]  # offset -> value of the records acquired
    leader: tuple[int, int]
    node_endpoints: list = field(default_factory=list)


class ShareMember:
    """One member's share session with one node."""

    def __init__(self, address: tuple[str, int], group_id: str, member_id: str | None = None):
        self.sock = socket.create_connection(address, timeout=30)
        self.group_id = group_id
        self.member_id = member_id or new_member_id()
        self.epoch = 0
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "ShareMember":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fetch_raw(self, topic_id, partitions=(0,), acks: dict[int, list] | None = None, max_wait_ms: int = 0,
                  max_records: int = 500, epoch: int | None = None, forgotten=()):
        acks = acks or {}
        self.correlation += 1
        topics = [FetchTopic(topic_id=topic_id, partitions=[
            FetchPartition(partition_index=p, acknowledgement_batches=_ack_batches(FetchPartition, acks.get(p, [])))
            for p in partitions])] if partitions else []
        forgotten_topics = ([ShareFetchRequest.ForgottenTopic(topic_id=topic_id, partitions=list(forgotten))]
                            if forgotten else [])
        request = ShareFetchRequest[VERSION](
            group_id=self.group_id, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch, max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=8 << 20, max_records=max_records, batch_size=max_records, topics=topics,
            forgotten_topics_data=forgotten_topics)
        response = exchange(self.sock, request, ShareFetchResponse, VERSION, self.correlation)
        if response.error_code == 0 and epoch is None:
            self.epoch += 1
        return response

    def fetch(self, topic_id, partition: int = 0, **kwargs) -> Fetched:
        response = self.fetch_raw(topic_id, (partition,), **kwargs)
        assert response.error_code == 0, response
        [topic] = response.responses
        [data] = [p for p in topic.partitions if p.partition_index == partition]
        return fetched(data, response.node_endpoints)

    def acknowledge(self, topic_id, acks: dict[int, list], epoch: int | None = None):
        self.correlation += 1
        request = ShareAcknowledgeRequest[VERSION](
            group_id=self.group_id, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            topics=[AckTopic(topic_id=topic_id, partitions=[
                AckPartition(partition_index=p, acknowledgement_batches=_ack_batches(AckPartition, batches))
                for p, batches in acks.items()])])
        response = exchange(self.sock, request, ShareAcknowledgeResponse, VERSION, self.correlation)
        if response.error_code == 0 and epoch is None:
            self.epoch += 1
        return response


def fetched(data, node_endpoints=()) -> Fetched:
    acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in data.acquired_records]
    owned = {offset for first, last, _ in acquired for offset in range(first, last + 1)}
    values = {}
    records = MemoryRecords(bytes(data.records or b""))
    while records.has_next():
        for record in records.next_batch():
            if record.offset in owned:
                values[record.offset] = record.value
    return Fetched(data.error_code, data.acknowledge_error_code, acquired, values,
                   (data.current_leader.leader_id, data.current_leader.leader_epoch), list(node_endpoints))


def _ack_batches(partition_class, batches) -> list:
    """(first, last, type or [types]) as AcknowledgementBatch entries."""
    return [partition_class.AcknowledgementBatch(first_offset=first, last_offset=last,
                                                 acknowledge_types=types if isinstance(types, list) else [types])
            for first, last, types in batches]
