"""Keeps this node's replica of `__cluster_metadata` and its metadata image up to date.

The node registers with the controller, long-polls it for new record batches, appends them
to its own copy of the metadata log (so a restart replays locally first) and applies them
to the image. Waiters (admin requests that must see their own change) are woken through a
condition, never by polling.

A node whose next offset is below the controller's log start (new, or down while the controller
deleted the log before a snapshot) is sent the snapshot's id instead of records: it fetches the
snapshot in chunks, keeps it as its own `.checkpoint`, restarts its copy of the log at the
snapshot's end and rebuilds its image from it. At start-up it loads its latest valid snapshot,
then its log after it. Like a Kafka broker, it also snapshots its own image once
`metadata.log.max.record.bytes.between.snapshots` bytes were fetched since the last snapshot (or
`metadata.log.max.snapshot.interval.ms` passed, checked as batches arrive), and deletes its copy
of the log before it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

from cluster.formats.control import ControlClient, ControlError, NotController
from cluster.formats.image import MetadataImage
from cluster.formats.listeners import SECURITY_PROTOCOL_IDS
from cluster.formats.metadata_log import (
    METADATA_PARTITION_DIR, MetadataLogGap, load_snapshot_and_log, read_meta_properties, write_meta_properties,
)
from cluster.formats.snapshots import (
    CorruptSnapshotError, SnapshotId, delete_snapshots_before, encode_image_gently, keep_snapshot, parse_snapshot,
    snapshot_settings, write_snapshot_file,
)
from cluster.formats.partition_log import PartitionLog
from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.runtime.process_table import process_table_id
from cluster.formats.records import iter_batch_headers
from cluster.runtime.shutdown import cancel_and_wait, cancel_requested
from cluster.runtime.time_slices import FREEZE_AFTER_RECORDS, TimeSlice, freeze_long_lived, gently
from node.faults import CONTROLLER

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)
FETCH_MAX_WAIT_MS = 5000
RECONNECT_DELAY_S = 0.2  # after every controller was tried in vain
ELECTION_WAIT_S = 0.08  # after a controller answered that no controller is active yet
SNAPSHOT_CHUNK_BYTES = 4 << 20


class ControllerUnavailable(Exception):
    """No controller connection; admin requests fail with a retriable error."""


class ControllerFinder:
    """Which controller a node's link tries next: the one named as the quorum's leader by the last
    answer, else the next configured address in turn (a connection refused or lost, or an election
    under way), pausing once every address was tried in vain."""

    def __init__(self, addresses: list[tuple[str, int]]):
        self.addresses = addresses
        self.address = addresses[0]
        self._next = 0  # index of the configured address tried next when no leader is named
        self._tried_in_vain = 0
        self._redirected = False

    @staticmethod
    def outage_begins(exc: Exception, was_registered: bool) -> bool:
        """Whether this failure means the node lost the active controller: a registered link that
        ends, or a controller that cannot be reached; not, before the first registration, a follower
        naming the leader or an election still running."""
        return was_registered or not isinstance(exc, NotController)

    def move_on(self, exc: Exception) -> float:
        """Choose the next address after exc; returns how long to wait before trying it."""
        leader = exc.leader if isinstance(exc, NotController) else None
        if leader and not self._redirected:  # twice in a row would be a stale answer: go round instead
            _, host, port = leader
            self.address = (host if host not in ("", "0.0.0.0", "::") else self.address[0], port)
            self._redirected, self._tried_in_vain = True, 0
            return 0.0
        self._redirected = False
        if self.address in self.addresses:
            self._next = self.addresses.index(self.address) + 1
        self._next %= len(self.addresses)
        self.address = self.addresses[self._next]
        self._tried_in_vain += 1
        if self._tried_in_vain >= len(self.addresses):
            self._tried_in_vain = 0
            return RECONNECT_DELAY_S
        return ELECTION_WAIT_S if isinstance(exc, NotController) else 0.0


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
        self._snapshot_bytes, self._snapshot_interval_s = snapshot_settings(broker.config)
        self._bytes_since_snapshot = 0
        self._last_snapshot = time.monotonic()
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
        try:
            snapshot_id = load_snapshot_and_log(self.log.directory, self.log, self.image)
        except MetadataLogGap as exc:
            log.warning("%s; fetching the metadata from the controller again", exc)
            self.log.truncate_fully_and_start_at(0)
            return
        self._bytes_since_snapshot = self.log.size_bytes()
        if snapshot_id:
            log.info("loaded local metadata snapshot %s, then the log up to offset %d", snapshot_id, self.image.offset)
        else:
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
        if self.log:
            self._bytes_since_snapshot += len(data)
            if self._snapshot_due():
                await self._snapshot_local_log()

    def _snapshot_due(self) -> bool:
        return self._bytes_since_snapshot >= self._snapshot_bytes or (
            self._bytes_since_snapshot > 0 and time.monotonic() - self._last_snapshot >= self._snapshot_interval_s)

    async def _snapshot_local_log(self) -> None:
        """Snapshot the image at the local log's end and delete the log before it. Runs in the fetch
        loop once every fetched batch is applied, so nothing changes the image while it is encoded."""
        snapshot_id = SnapshotId(self.log.log_end_offset, self.log.latest_epoch or 0)
        if self.image.offset != snapshot_id.last_offset:
            return
        data = await encode_image_gently(self.image, snapshot_id)
        self.log.roll()
        self._bytes_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        try:
            await keep_snapshot(self.log, snapshot_id, data)
        except OSError as exc:
            log.error("writing a metadata snapshot failed: %s", exc)
            return
        log.info("metadata snapshot %s written (%d bytes); the local log now starts at offset %d",
                 snapshot_id, len(data), self.log.log_start_offset)

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
        addresses = self.broker.config.controller_addresses()
        if not addresses:
            log.info("no controller configured: serving the local metadata log read-only")
            self.fenced = False
            return
        self._tasks.append(asyncio.create_task(self._run(addresses)))
        await self._registered.wait()

    async def close(self) -> None:
        await cancel_and_wait([*self._tasks, *([self._applying] if self._applying else [])])
        if self.client:
            await self.client.close()
        if self.log:
            self.log.close()

    async def _run(self, addresses: list[tuple[str, int]]) -> None:
        """Keep a link to the quorum's active controller: register with it, then fetch and heartbeat
        until the link ends; then find the active one again (ControllerFinder) and go on there."""
        finder = ControllerFinder(addresses)
        lost_since = None  # when this node lost the active controller, in this outage
        was_registered = False
        while True:
            host, port = finder.address
            try:
                tls = self.broker.control_tls
                self.client = ControlClient(host, port, tls=tls.client if tls else None)
                await self.client.connect()
                await self._register()
                if lost_since is not None:
                    log.info("registered with the controller at %s:%s%s, after %.1f s", host, port,
                             " again" if was_registered else "", time.monotonic() - lost_since)
                    lost_since = None
                was_registered = True
                await self._serve_link()
                raise ControlError("the control connection closed")
            except (OSError, ControlError) as exc:
                if lost_since is None and finder.outage_begins(exc, was_registered):
                    lost_since = time.monotonic()
                    self._log_lost(host, port, exc, len(addresses))
                else:
                    log.debug("no active controller at %s:%s: %s", host, port, exc)
                delay = finder.move_on(exc)
            finally:
                if self.client:
                    await self.client.close()
            await asyncio.sleep(delay)

    @staticmethod
    def _log_lost(host: str, port: int, exc: Exception, count: int) -> None:
        """Once per outage, and never at ERROR: a controller's failover is something a quorum lives through."""
        if isinstance(exc, NotController):
            log.warning("the controller at %s:%s is no longer the active one (%s): following the quorum", host, port,
                        exc)
        else:
            log.warning("cannot reach the controller at %s:%s: %s (trying %s until one answers)", host, port, exc,
                        "again" if count == 1 else f"the {count} controllers")

    async def _serve_link(self) -> None:
        """Fetch metadata and heartbeat until either fails (raising what it failed with) or the connection closes."""
        workers = [asyncio.create_task(self._fetch_loop()), asyncio.create_task(self._heartbeat_loop())]
        closed = asyncio.create_task(self.client.closed.wait())
        try:
            done, _ = await asyncio.wait([*workers, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also when the node stops (this task cancelled): no worker outlives the link.
            await cancel_and_wait([*workers, closed])
        for task in done:
            failure = None if task is closed or task.cancelled() else task.exception()
            if isinstance(failure, (OSError, ControlError)):
                raise failure
            if failure is not None:
                raise ControlError(f"controller link failed: {failure!r}") from failure

    async def _register(self) -> None:
        listeners = list(self.broker.listeners.values())
        reply = await self.client.call(
            "register", timeout=self._answer_timeout_s(),
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
            if reply.get("snapshot_id"):
                await self._install_snapshot(SnapshotId(*reply["snapshot_id"]))
            elif reply["data"]:
                await self._apply_in_order(reply["data"])

    async def _install_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Fetch the controller's snapshot, keep it, restart the local log after it and rebuild the image."""
        data = await self._fetch_snapshot(snapshot_id)
        if data is None:
            return
        try:
            snapshot = parse_snapshot(data, snapshot_id, f"the controller's snapshot {snapshot_id}")
        except CorruptSnapshotError as exc:
            raise ControlError(str(exc)) from None
        log.info("metadata offset %d is below the controller's log start: loading its snapshot %s (%d bytes)",
                 self.next_offset, snapshot_id, len(data))
        image = MetadataImage(cluster_id=self.image.cluster_id)
        async for _, name, fields in gently(snapshot.records(), TimeSlice()):
            image.apply(snapshot_id.last_offset, name, fields)
        image.offset = snapshot_id.last_offset
        if self.log:
            await asyncio.to_thread(write_snapshot_file, self.log.directory, snapshot_id, data)
        # From here on, as for fetched batches, a failing controller link does not cut the switch short.
        self._applying = asyncio.create_task(self._adopt_snapshot(snapshot_id, image, self._applying))
        await asyncio.shield(self._applying)

    async def _adopt_snapshot(self, snapshot_id: SnapshotId, image: MetadataImage,
                              previous: asyncio.Task | None) -> None:
        """Restart the local log at the snapshot's end and take its image, after whatever was being applied."""
        if previous is not None:
            await asyncio.wait([previous])
        if self.log:
            self.log.truncate_fully_and_start_at(snapshot_id.end_offset)
            delete_snapshots_before(self.log.directory, snapshot_id)
            self._bytes_since_snapshot = 0
            self._last_snapshot = time.monotonic()
        else:
            self._fetched_end = snapshot_id.end_offset
        self.image.replace_with(image)
        await self.broker.replicas.reconcile(None)
        self.applied_offset = self.image.offset
        freeze_long_lived()
        async with self.applied:
            self.applied.notify_all()
        self._heartbeat_now.set()

    async def _fetch_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        """The snapshot's bytes, a chunk at a time; None if the controller replaced it meanwhile."""
        data = bytearray()
        while True:
            reply = await self._call_through_faults(
                "fetch_snapshot", end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch, position=len(data),
                max_bytes=SNAPSHOT_CHUNK_BYTES)
            if reply["error_code"]:
                log.info("snapshot %s is no longer at the controller (error %d): asking again",
                         snapshot_id, reply["error_code"])
                return None
            data += reply["data"]
            if len(data) >= reply["size"]:
                return bytes(data)
            if not reply["data"]:
                raise ControlError(f"the controller's snapshot {snapshot_id} ended at byte {len(data)} "
                                   f"of {reply['size']}")

    async def _heartbeat_loop(self) -> None:
        interval = self.broker.config.get_int("broker.heartbeat.interval.ms") / 1000
        while not cancel_requested():
            # Cleared before the offset is read: progress applied while this heartbeat is in
            # flight wakes the next one at once instead of waiting out the interval.
            self._heartbeat_now.clear()
            reply = await self._call_through_faults(
                "heartbeat", timeout=self._answer_timeout_s(), node_id=self.broker.node_id,
                broker_epoch=self.broker_epoch, applied_offset=self.applied_offset,
            )
            self.fenced = reply["fenced"]
            try:
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            except asyncio.TimeoutError:
                pass

    def _answer_timeout_s(self) -> float:
        """How long a registration or heartbeat waits for its answer: a controller silent for a whole
        broker session (paused, or cut off) is not the one to wait for, since an active controller
        would have fenced this node by then; the link ends and the quorum's active one is looked for."""
        return self.broker.config.get_int("broker.session.timeout.ms") / 1000

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
        except NotController as exc:
            # It did nothing; this node's link moves to the active controller as its next heartbeat
            # hears the same, and the client's retry goes there.
            raise ControllerUnavailable(f"{op}: {exc}") from None

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
