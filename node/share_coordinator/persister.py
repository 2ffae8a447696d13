"""The SharePersister partition leaders use: the share coordinator of each share-partition, wherever it is.

Kafka's DefaultStatePersister and PersisterStateManager: the coordinator of a share-partition is
the leader of its `__share_group_state` partition (node.share_coordinator.placement; the topic is
created on first use, as FindCoordinator does). On this node it is called directly; elsewhere with
the share-state RPCs through the peer client. NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and an unreachable coordinator are retried, finding the coordinator in
the metadata again each time, until request.timeout.ms has passed; then, or at once for any other
error, CoordinatorError carries the code.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from cluster.formats.errors import ErrorCode
from node.coordinator_log import CoordinatorError
from node.peer_client import PeerUnavailable
from node.share_coordinator import placement
from node.share_coordinator.records import StateKey
from node.share_coordinator.state import NO_START_OFFSET, ShareState, StateBatch

log = logging.getLogger(__name__)

RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}
RETRY_BACKOFF_S = 0.1
NO_LEADER_EPOCH = -1


class CoordinatorPersister:
    def __init__(self, broker):
        self.broker = broker

    # --- SharePersister ---

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ShareState | None:
        key = StateKey(group_id, topic_id, partition)
        return await self._call(key, lambda c: c.read(key, leader_epoch), lambda w: w.read(key, leader_epoch))

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state: ShareState) -> None:
        key = StateKey(group_id, topic_id, partition)
        await self._call(key, lambda c: _no_result(c.write(key, state)), lambda w: w.write(key, state))

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> None:
        key = StateKey(group_id, topic_id, partition)
        await self._call(key, lambda c: _no_result(c.initialize(key, state_epoch, start_offset)),
                         lambda w: w.initialize(key, state_epoch, start_offset))

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ShareState | None:
        key = StateKey(group_id, topic_id, partition)
        return await self._call(key, lambda c: _summary(c, key), lambda w: w.read_summary(key))

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None:
        key = StateKey(group_id, topic_id, partition)
        await self._call(key, lambda c: _no_result(c.delete(key)), lambda w: w.delete(key))

    # --- finding and calling the coordinator ---

    async def _call(self, key: StateKey, local, remote):
        """local(coordinator) or remote(wire) -> (error, result), retried while the coordinator moves."""
        timeout_s = self.broker.config.get_int("request.timeout.ms") / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            error, result = await self._call_once(key, local, remote, max(deadline - time.monotonic(), 0.1))
            if error == ErrorCode.NONE:
                return result
            if error not in RETRIABLE or time.monotonic() + RETRY_BACKOFF_S >= deadline:
                raise CoordinatorError(error)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _call_once(self, key: StateKey, local, remote, timeout_s: float):
        coordinator = await self._coordinator_of(key)
        if coordinator < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if coordinator == self.broker.node_id:
            return await local(self.broker.share_coordinator)
        try:
            return await remote(_Wire(self.broker, coordinator, timeout_s))
        except PeerUnavailable as exc:
            log.debug("share coordinator %d unreachable: %s", coordinator, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

    async def _coordinator_of(self, key: StateKey) -> int:
        """The node leading the share-partition's `__share_group_state` partition; -1 while none does."""
        if self.broker.topic(placement.SHARE_STATE_TOPIC) is None:
            await create_state_topic(self.broker)
        info = self.broker.partition(placement.SHARE_STATE_TOPIC, self.broker.share_coordinator.partition_of(key))
        return info.leader if info is not None and self.broker.is_alive(info.leader) else -1


async def create_state_topic(broker) -> None:
    """Create `__share_group_state` through the controller; a failure is left to the caller's retry."""
    try:
        await broker.call_controller("create_topics", topics=[placement.topic_to_create(
            broker.config, len(broker.live_broker_ids()))], validate_only=False)
    except Exception as exc:  # (answered as COORDINATOR_NOT_AVAILABLE; the caller retries)
        log.warning("cannot create %s: %s", placement.SHARE_STATE_TOPIC, exc)


async def _no_result(operation) -> tuple[ErrorCode, None]:
    return await operation, None


async def _summary(coordinator, key: StateKey) -> tuple[ErrorCode, ShareState | None]:
    error, state_epoch, start_offset = coordinator.read_summary(key, NO_LEADER_EPOCH)
    if error or start_offset == NO_START_OFFSET:
        return error, None
    return error, ShareState(state_epoch, NO_LEADER_EPOCH, start_offset)


class _Wire:
    """The share-state RPCs to one peer, answered as the local coordinator answers. Their modules are
    imported on first use: node.apis loads every API module, and some import node.broker, which
    builds this persister."""

    def __init__(self, broker, node_id: int, timeout_s: float):
        self.broker, self.node_id, self.timeout_s = broker, node_id, timeout_s

    async def _send(self, api, key: StateKey, **partition_fields):
        request = api.REQUEST[0](group_id=key.group_id, topics=[api.TOPIC(
            topic_id=key.topic_id, partitions=[api.PARTITION(partition=key.partition, **partition_fields)])])
        response = await self.broker.peers.send(self.node_id, request, 0, api.RESPONSE, self.timeout_s)
        return response.results[0].partitions[0]

    async def read(self, key: StateKey, leader_epoch: int):
        from node.apis import read_share_group_state as api
        answer = await self._send(api, key, leader_epoch=leader_epoch)
        if answer.error_code or answer.start_offset == NO_START_OFFSET:
            return ErrorCode(answer.error_code), None
        return ErrorCode.NONE, ShareState(answer.state_epoch, leader_epoch, answer.start_offset, [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in answer.state_batches])

    async def write(self, key: StateKey, state: ShareState):
        from node.apis import write_share_group_state as api
        batch = api.PARTITION.StateBatch
        answer = await self._send(api, key, state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
                                  start_offset=state.start_offset, state_batches=[
                                      batch(first_offset=b.first_offset, last_offset=b.last_offset,
                                            delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                                      for b in state.batches])
        return ErrorCode(answer.error_code), None

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int):
        from node.apis import initialize_share_group_state as api
        answer = await self._send(api, key, state_epoch=state_epoch, start_offset=start_offset)
        return ErrorCode(answer.error_code), None

    async def read_summary(self, key: StateKey):
        from node.apis import read_share_group_state_summary as api
        answer = await self._send(api, key, leader_epoch=NO_LEADER_EPOCH)
        if answer.error_code or answer.start_offset == NO_START_OFFSET:
            return ErrorCode(answer.error_code), None
        return ErrorCode.NONE, ShareState(answer.state_epoch, NO_LEADER_EPOCH, answer.start_offset)

    async def delete(self, key: StateKey):
        from node.apis import delete_share_group_state as api
        answer = await self._send(api, key)
        return ErrorCode(answer.error_code), None
