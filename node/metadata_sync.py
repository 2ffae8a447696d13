"""Keeps this node's replica of `__cluster_metadata` and its metadata image up to date.

The node registers with the controller, long-polls it for new record batches, appends them
to its own copy of the metadata log (so a restart replays locally first) and applies them
to the image. Waiters (admin requests that must see their own change) are woken through a
condition, never by polling.
"""
from __future__ import annotations

import asyncio
import logging
import os
import uuid

from cluster.formats.control import ControlClient, ControlError
from cluster.formats.listeners import SECURITY_PROTOCOL_IDS
from cluster.formats.metadata_log import (
    METADATA_PARTITION_DIR, read_meta_properties, replay_partition_log, write_meta_properties,
)
from cluster.formats.partition_log import PartitionLog
from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.runtime.process_table import process_table_id
from cluster.formats.records import iter_batch_headers
from cluster.runtime.shutdown import cancel_and_wait, cancel_requested
from cluster.runtime.time_slices import FREEZE_AFTER_RECORDS, freeze_long_lived
from node.faults import CONTROLLER

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)
FETCH_MAX_WAIT_MS = 5000
RECONNECT_DELAY_S = 0.2


class ControllerUnavailable(Exception):
    """No controller connection; admin requests fail with a retriable error."""


class MetadataSync:
    def __init__(self, broker):
        self.broker = broker
        self.image = broker.image
        self.log: PartitionLog | None = None
        self.client: ControlClient | None = None
        self.broker_epoch = -1
        self.fenced = True
        # The last metadata offset whose records this node has acted on (its image, and the
        # partitions it hosts, opened or removed): what it reports and what admin requests wait for.
        self.applied_offset = -1
        self.applied = asyncio.Condition()
        self._applying: asyncio.Task | None = None
        self._fetched_end = 0  # without a copy of the log: the offset after the last batch fetched
        self._heartbeat_now = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._registered = asyncio.Event()

    # --- local replica of the metadata log ---

    def load_local_log(self) -> None:
        props = read_meta_properties(self.broker.log_dir)
        if props.get("cluster.id"):
            self.image.cluster_id = props["cluster.id"]
        config = self.broker.config
        if "controller" in config.process_roles and config.metadata_log_dir == self.broker.log_dir:
            # As in Kafka's combined mode, the one metadata log is the controller's: this node
            # keeps no copy beside it and builds its image from what the controller serves.
            log.info("the metadata log in %s is this node's controller's: fetching the image from it",
                     self.broker.log_dir)
            return
        self.log = PartitionLog(self.broker.log_dir / METADATA_PARTITION_DIR, topic_id=METADATA_TOPIC_ID)
        replay_partition_log(self.log, self.image)
        log.info("replayed local metadata log up to offset %d", self.image.offset)

    @property
    def next_offset(self) -> int:
        """The next metadata offset this node needs (what was fetched before it may still be being applied)."""
        return self.log.log_end_offset if self.log else max(self._fetched_end, self.image.offset + 1)

    async def _apply_in_order(self, data: bytes) -> None:
        """Keep fetched batches, then apply them after every batch fetched before them.

        The apply is a task of its own that a failing controller link does not cut short: the
        batches are kept already and will not be fetched again. A later link's batches wait for it.
        """
        if self.log:
            self.log.append_as_follower(data)
        else:
            self._fetched_end = max(header.next_offset for _, header in iter_batch_headers(data))
        self._applying = asyncio.create_task(self._apply(data, self._applying))
        await asyncio.shield(self._applying)

    async def _apply(self, data: bytes, previous: asyncio.Task | None) -> None:
        """Apply fetched batches to the image and the hosted partitions, in slices that give way to
        the event loop (heartbeats, clients and replication go on meanwhile); only then is their
        offset reported as applied."""
        if previous is not None:
            await asyncio.wait([previous])
            if not previous.cancelled() and previous.exception() is not None:
                log.warning("applying metadata up to offset %d failed: %s", self.image.offset, previous.exception())
        delta = await self.image.replay_gently(data)
        await self.broker.replicas.reconcile(delta)
        self.applied_offset = self.image.offset
        if delta.records >= FREEZE_AFTER_RECORDS:
            freeze_long_lived()
        async with self.applied:
            self.applied.notify_all()
        # Report progress at once: the controller unfences us and declares the
        # cluster ready only once it knows what we have applied.
        self._heartbeat_now.set()

    # --- controller link ---

    async def start(self) -> None:
        address = self.broker.config.controller_address()
        if address is None:
            log.info("no controller configured: serving the local metadata log read-only")
            self.fenced = False
            return
        self._tasks.append(asyncio.create_task(self._run(*address)))
        await self._registered.wait()

    async def close(self) -> None:
        await cancel_and_wait([*self._tasks, *([self._applying] if self._applying else [])])
        if self.client:
            await self.client.close()
        if self.log:
            self.log.close()

    async def _run(self, host: str, port: int) -> None:
        while True:
            try:
                tls = self.broker.control_tls
                self.client = ControlClient(host, port, tls=tls.client if tls else None)
                await self.client.connect()
                await self._register()
                await self._serve_link()
            except (OSError, ControlError) as exc:
                log.warning("cannot reach the controller at %s:%s: %s", host, port, exc)
            if self.client:
                await self.client.close()
            await asyncio.sleep(RECONNECT_DELAY_S)

    async def _serve_link(self) -> None:
        """Fetch metadata and heartbeat until either fails or the connection closes."""
        workers = [asyncio.create_task(self._fetch_loop()), asyncio.create_task(self._heartbeat_loop())]
        closed = asyncio.create_task(self.client.closed.wait())
        try:
            done, _ = await asyncio.wait([*workers, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also when the node stops (this task cancelled): no worker outlives the link.
            await cancel_and_wait([*workers, closed])
        for task in done:
            if not task.cancelled() and task.exception():
                log.warning("controller link failed: %s", task.exception())

    async def _register(self) -> None:
        listeners = list(self.broker.listeners.values())
        reply = await self.client.call(
            "register",
            node_id=self.broker.node_id,
            incarnation_id=topic_id_to_kafka_string(self.broker.incarnation_id),
            host=listeners[0].host,
            port=listeners[0].port,
            endpoints=[[l.name, l.host, l.port, SECURITY_PROTOCOL_IDS[l.security_protocol]] for l in listeners],
            rack=self.broker.config.get("broker.rack") or None,
            # A controller on the same process table watches our pid and fences us the moment we exit.
            pid=os.getpid(),
            process_table=process_table_id(),
        )
        self.broker_epoch = reply["broker_epoch"]
        self._adopt_cluster_id(reply["cluster_id"])
        self._registered.set()

    def _adopt_cluster_id(self, cluster_id: str) -> None:
        props = read_meta_properties(self.broker.log_dir)
        known = props.get("cluster.id")
        if known and known != cluster_id:
            raise SystemExit(f"log dir belongs to cluster {known}, the controller runs cluster {cluster_id}")
        if not known:
            write_meta_properties(self.broker.log_dir, {
                "cluster.id": cluster_id, "node.id": str(self.broker.node_id), "version": "1",
            })
        self.image.cluster_id = cluster_id

    async def _fetch_loop(self) -> None:
        while not cancel_requested():
            reply = await self._call_through_faults(
                "fetch_metadata", offset=self.next_offset, max_wait_ms=FETCH_MAX_WAIT_MS,
                timeout=FETCH_MAX_WAIT_MS / 1000 + 10,
            )
            if reply["data"]:
                await self._apply_in_order(reply["data"])

    async def _heartbeat_loop(self) -> None:
        interval = self.broker.config.get_int("broker.heartbeat.interval.ms") / 1000
        while not cancel_requested():
            # Cleared before the offset is read: progress applied while this heartbeat is in
            # flight wakes the next one at once instead of waiting out the interval.
            self._heartbeat_now.clear()
            reply = await self._call_through_faults(
                "heartbeat", node_id=self.broker.node_id, broker_epoch=self.broker_epoch,
                applied_offset=self.applied_offset,
            )
            self.fenced = reply["fenced"]
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            except asyncio.TimeoutError:
                pass

    async def controlled_shutdown(self, timeout: float = 10.0) -> None:
        """Hand leaderships over before stopping, so clients see a metadata change, not errors."""
        if self.client is None or not self.client.connected:
            return
        try:
            reply = await asyncio.wait_for(self._call_through_faults(
                "controlled_shutdown", timeout=timeout, node_id=self.broker.node_id, broker_epoch=self.broker_epoch),
                timeout)
            await self.wait_for_offset(reply["metadata_offset"], timeout)
        except Exception as exc:  # stopping goes on; the controller fences us when heartbeats stop
            log.warning("controlled shutdown failed: %s", exc)

    async def call_controller(self, op: str, **args) -> dict:
        if self.client is None or not self.client.connected:
            raise ControllerUnavailable("no connection to the controller")
        try:
            return await asyncio.wait_for(self._call_through_faults(op, timeout=30, **args), 30)
        except asyncio.TimeoutError:
            raise ControllerUnavailable(f"{op}: no answer from the controller") from None

    async def _call_through_faults(self, op: str, /, timeout: float | None = None, **args) -> dict:
        """While the node is isolated from the controller, neither the call nor its reply gets through."""
        faults = self.broker.faults
        await faults.wait_reachable(CONTROLLER)
        reply = await self.client.call(op, timeout=timeout, **args)
        await faults.wait_reachable(CONTROLLER)
        return reply

    async def wait_for_offset(self, offset: int, timeout: float = 30.0) -> None:
        async with self.applied:
            try:
                await asyncio.wait_for(self.applied.wait_for(lambda: self.applied_offset >= offset), timeout)
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(f"this node had not applied metadata offset {offset} "
                                           f"after {timeout:g} s") from None
