"""Writing a transaction's markers to the leaders of its partitions, until every one has its marker.

Partitions are grouped by leader; a leader that is this node writes its markers directly
(node.transaction_markers), any other gets a WriteTxnMarkers request (node.peer_client).
A partition whose leader is unknown, moved, or short of in-sync replicas is tried again once the
metadata changes (or after a short backoff); one whose topic was deleted needs no marker. A
request to a leader that stops leading every partition it was sent for (fenced while paused or cut
off, say) is given up at once and its markers are sent to the new leaders, rather than waiting for
an answer that would only say NOT_LEADER_OR_FOLLOWER, after up to PEER_TIMEOUT_S: the
transactional id can do nothing until its markers are written. A refusal for a stale producer or
coordinator epoch means a newer coordinator owns the transaction, and this one stops, as Kafka's
marker channel does.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from cluster.formats.errors import ErrorCode
from node import transaction_markers
from node.peer_client import PeerUnavailable

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
# Longer than a leader waits for its in-sync replicas, so its answer comes first.
PEER_TIMEOUT_S = transaction_markers.MARKER_TIMEOUT_S + 5
RETRY_BACKOFF_S = 0.1
# Errors after which this coordinator no longer owns the transaction.
_DEPOSED = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)
# A partition that can never take a marker (Kafka's marker channel drops these too).
_NEVER = (ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION)

Partition = tuple[str, int]


class MarkerWriter:
    def __init__(self, broker):
        self.broker = broker

    async def write(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: list[Partition], still_mine: Callable[[], bool]) -> bool:
        """True once every partition has its marker; False if this coordinator was deposed meanwhile."""
        remaining = set(partitions)
        while remaining:
            if not still_mine():
                return False
            by_leader = self._by_leader(remaining)
            outcomes = await asyncio.gather(*(
                self._send(leader, producer_id, epoch, commit, coordinator_epoch, led)
                for leader, led in by_leader.items()))
            for led, errors in zip(by_leader.values(), outcomes):
                for partition, error in zip(led, errors):
                    if error in _DEPOSED:
                        log.info("marker for %s-%d refused (%s): this coordinator is no longer the transaction's",
                                 *partition, error.name)
                        return False
                    if error == ErrorCode.NONE or error in _NEVER:
                        remaining.discard(partition)
            if remaining:
                await self._metadata_change()
        return True

    def _by_leader(self, partitions: set[Partition]) -> dict[int, list[Partition]]:
        by_leader: dict[int, list[Partition]] = {}
        for topic, index in sorted(partitions):
            if self.broker.topic(topic) is None:
                partitions.discard((topic, index))  # deleted: nobody reads it any more
                continue
            info = self.broker.partition(topic, index)
            if info is not None and info.leader >= 0:
                by_leader.setdefault(info.leader, []).append((topic, index))
        return by_leader

    async def _send(self, leader: int, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: list[Partition]) -> list[ErrorCode]:
        if leader == self.broker.node_id:
            marker = (producer_id, epoch, commit, coordinator_epoch, partitions)
            return (await transaction_markers.write_markers(self.broker, [marker]))[0]
        request = WriteTxnMarkersRequest[WRITE_TXN_MARKERS_VERSION](markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch, topics=[
                    WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=indexes)
                    for topic, indexes in _by_topic(partitions).items()])])
        try:
            response = await self._unless_deposed(leader, partitions, self.broker.peers.send(
                leader, request, WRITE_TXN_MARKERS_VERSION, WriteTxnMarkersResponse, PEER_TIMEOUT_S))
        except PeerUnavailable as exc:
            log.info("markers to node %d not written yet: %s", leader, exc)
            return [ErrorCode.NOT_LEADER_OR_FOLLOWER] * len(partitions)
        found = {(t.name, p.partition_index): ErrorCode(p.error_code)
                 for m in response.markers for t in m.topics for p in t.partitions}
        return [found.get(partition, ErrorCode.UNKNOWN_SERVER_ERROR) for partition in partitions]

    async def _unless_deposed(self, leader: int, partitions: list[Partition], sending):
        """The answer `sending` awaits, unless the metadata moves every partition off `leader` first:
        then PeerUnavailable (the request may still arrive there, to be refused or truncated away)."""
        answer = asyncio.ensure_future(sending)
        deposed = asyncio.ensure_future(self._until_none_led_by(leader, partitions))
        try:
            await asyncio.wait((answer, deposed), return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                return answer.result()
            raise PeerUnavailable(f"node {leader} no longer leads {', '.join(f'{t}-{i}' for t, i in partitions)}")
        finally:
            deposed.cancel()
            if not answer.done():
                # Given up, or this coordinator stops: what the request still comes to is of no
                # interest (a connection closing meanwhile can end it with an error, not cancelled).
                answer.cancel()
                answer.add_done_callback(_ignore_outcome)

    async def _until_none_led_by(self, leader: int, partitions: list[Partition]) -> None:
        def none_led() -> bool:
            return not any((info := self.broker.partition(*p)) is not None and info.leader == leader
                           for p in partitions)
        applied = self.broker.metadata.applied
        async with applied:
            await applied.wait_for(none_led)

    async def _metadata_change(self) -> None:
        """Until the metadata moves on (a new leader, say), or a short backoff."""
        applied = self.broker.metadata.applied
        try:
            async with applied:
                await asyncio.wait_for(applied.wait(), RETRY_BACKOFF_S)
        except asyncio.TimeoutError:
            pass


def _ignore_outcome(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()  # (retrieved, so that asyncio does not report it as lost)


def _by_topic(partitions: list[Partition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return by_topic
