"""This controller's place in the KRaft quorum: the Raft state machine (controller/raft/) on the
event loop, over the metadata log, talking to the other voters on the control channel.

Every message is one `raft` control op carrying an envelope (controller/quorum_codec.py), sent one
way: the op's reply is empty, and a response is an op of its own from the peer, because a leader
answers a follower's fetch when records arrive or its wait ends, not when it is asked. A message
that cannot be sent (the peer is down, the link is being opened) is dropped; the state machine
sends again after its request timeout, as Raft expects of a lossy network.

One task runs the state machine's timers: it sleeps until `next_deadline_ms`, or until a message or
an append changes it. Whoever feeds the replica calls `_after` with what it returned, which sends
the messages and tells the listeners when the high watermark, the role or the epoch moved.

A single voter elects itself when it starts and commits each append at once (a majority of one),
so a one-controller cluster runs the same code with no network and no waiting.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable

from cluster.formats.config import BrokerConfig
from cluster.formats.control import BadControlRequest, ControlClient, ControlError, NotController
from cluster.formats.partition_log import PartitionLog
from cluster.runtime.shutdown import cancel_and_wait
from controller.faults import ControllerFaults
from controller.metadata_raft_log import MetadataRaftLog
from controller.quorum_codec import decode_envelope, encode_envelope
from controller.raft.config import RaftConfig
from controller.raft.election_state import NO_ID
from controller.raft.messages import Envelope, FetchRequest
from controller.raft.quorum_state_file import FileQuorumStateStore
from controller.raft.replica import NotLeaderError, RaftReplica
from controller.raft.roles import Leader, Role

log = logging.getLogger(__name__)

QUORUM_STATE_FILE = "quorum-state"
# How often, and for how long, a peer that refuses a connection is dialled again while messages wait.
CONNECT_RETRY_S = 0.02
CONNECT_PATIENCE_S = 0.5
# Messages kept for a peer while its connection opens (the state machine sends again after a timeout).
MAX_WAITING = 16


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def raft_config(config: BrokerConfig) -> RaftConfig:
    """The quorum's timeouts from Kafka's `controller.quorum.*` settings, where given."""
    defaults = RaftConfig()
    def setting(name: str, default: int) -> int:
        value = str(config.values.get(name, "")).strip()
        return int(value) if value else default
    return RaftConfig(election_timeout_ms=setting("controller.quorum.election.timeout.ms", defaults.election_timeout_ms),
                      fetch_timeout_ms=setting("controller.quorum.fetch.timeout.ms", defaults.fetch_timeout_ms),
                      election_backoff_max_ms=setting("controller.quorum.election.backoff.max.ms",
                                                      defaults.election_backoff_max_ms))


class PeerLink:
    """The control-channel connection to one other voter, opened when a message is first sent.
    Messages sent while it opens go out once it is open. A peer that refuses the connection (it is
    still starting, say) is dialled again every CONNECT_RETRY_S for CONNECT_PATIENCE_S; then what
    waits is dropped, and the state machine sends again after its request timeout."""

    def __init__(self, voter_id: int, host: str, port: int, tls):
        self.voter_id = voter_id
        self.host, self.port, self.tls = host, port, tls
        self.client: ControlClient | None = None
        self._connecting: asyncio.Task | None = None
        self._waiting: list[list] = []
        self._sends: set[asyncio.Task] = set()

    @property
    def connected(self) -> bool:
        return self.client is not None and self.client.connected

    def send(self, message: list) -> None:
        if self.connected:
            task = asyncio.create_task(self._call(message))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
            return
        self._waiting = [*self._waiting[-(MAX_WAITING - 1):], message]
        if self._connecting is None:
            self._connecting = asyncio.create_task(self._connect())

    async def _call(self, message: list) -> None:
        try:
            await self.client.call("raft", envelope=message, timeout=10)
        except (ControlError, OSError, asyncio.TimeoutError) as exc:
            log.debug("raft message to controller %d not delivered: %s", self.voter_id, exc)

    async def _connect(self) -> None:
        give_up_at = time.monotonic() + CONNECT_PATIENCE_S
        try:
            while not self.connected:
                client = ControlClient(self.host, self.port, tls=self.tls)
                try:
                    await client.connect()
                    self.client = client
                except OSError as exc:
                    if time.monotonic() >= give_up_at:
                        log.debug("cannot reach controller %d at %s:%d: %s", self.voter_id, self.host, self.port,
                                  exc)
                        self._waiting = []
                        return
                    await asyncio.sleep(CONNECT_RETRY_S)
        finally:
            self._connecting = None
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self.send(message)

    async def close(self) -> None:
        await cancel_and_wait([*self._sends, *([self._connecting] if self._connecting else [])])
        if self.client is not None:
            await self.client.close()


class Quorum:
    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], cluster_id: str, metadata_log: PartitionLog,
                 config: RaftConfig = RaftConfig(), tls=None):
        self.node_id = node_id
        self.voters = dict(voters)
        self.raft_log = MetadataRaftLog(metadata_log, node_id, list(voters))
        store = FileQuorumStateStore(metadata_log.directory / QUORUM_STATE_FILE)
        self.replica = RaftReplica(node_id, list(voters), cluster_id, self.raft_log, store, random.Random(), now_ms(),
                                   config)
        self.peers = {voter: PeerLink(voter, host, port, tls) for voter, (host, port) in voters.items()
                      if voter != node_id}
        self.changed = asyncio.Condition()  # the high watermark, the role or the epoch moved
        self.last_fetch_ms: dict[int, int] = {}
        self.last_caught_up_ms: dict[int, int] = {}
        self.faults = ControllerFaults()  # the controller's own, once it runs (controller/faults.py)
        self.on_commit: Callable[[int], None] | None = None
        self.on_role_change: Callable[[], None] | None = None
        self._seen = (self.replica.high_watermark, self.replica.role, self.replica.epoch, self.replica.leader_id)
        self._wake = asyncio.Event()
        self._timer: asyncio.Task | None = None
        if node_id == min(voters):
            self.replica.campaign_soon(now_ms())
        self._pending_out: list[Envelope] = self.replica.tick(now_ms())

    # --- what the controller reads ---

    @property
    def high_watermark(self) -> int:
        return self.replica.high_watermark

    @property
    def is_leader(self) -> bool:
        return self.replica.role is Role.LEADER

    @property
    def epoch_start_offset(self) -> int:
        state = self.replica.state
        return state.epoch_start_offset if isinstance(state, Leader) else -1

    def leader_address(self) -> tuple[int, str, int] | None:
        leader = self.replica.leader_id
        if leader == NO_ID or leader not in self.voters:
            return None
        return (leader, *self.voters[leader])

    def not_controller(self) -> NotController:
        return NotController(self.leader_address() if not self.is_leader else None)

    # --- running ---

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timers())
        outgoing, self._pending_out = self._pending_out, []
        self._after(outgoing)

    async def close(self) -> None:
        if self._timer is not None:
            await cancel_and_wait([self._timer])
        for peer in self.peers.values():
            await peer.close()

    async def handle(self, args: dict, conn) -> dict:
        """The `raft` control op: one message from another voter."""
        envelope = decode_envelope(args.get("envelope"))
        if self.faults.isolated:
            return {}  # lost on the way, as in a network partition
        if envelope.destination != self.node_id:
            raise BadControlRequest(f"raft message for controller {envelope.destination} sent to {self.node_id}")
        if isinstance(envelope.body, FetchRequest) and self.is_leader:
            self._note_fetch(envelope.source, envelope.body.fetch_offset)
        try:
            outgoing = self.replica.handle(envelope, now_ms())
        except (ValueError, OSError) as exc:  # a batch that does not fit the log: the peer sends again
            log.warning("raft message from controller %d not taken: %s", envelope.source, exc)
            outgoing = self.replica.tick(now_ms())
        self._after(outgoing)
        return {}

    def _note_fetch(self, replica_id: int, fetch_offset: int) -> None:
        """When each replica last fetched, and last fetched from the log end (DescribeQuorum's times)."""
        wall_ms = int(time.time() * 1000)
        self.last_fetch_ms[replica_id] = wall_ms
        if fetch_offset >= self.raft_log.end_offset():
            self.last_caught_up_ms[replica_id] = wall_ms

    def append(self, batch: bytes) -> int:
        """Append one record batch as the leader; returns its last offset (committed once the high
        watermark passes it). NotController when this controller does not lead."""
        try:
            offset = self.replica.append([batch], now_ms())
        except NotLeaderError:
            raise self.not_controller() from None
        self._after(self.replica.tick(now_ms()))
        return offset

    async def wait_committed(self, offset: int) -> None:
        """Until the high watermark passes offset; NotController if this controller stops leading the
        epoch it appended in first (the entry may then be committed by the next leader, or dropped)."""
        epoch = self.replica.epoch
        async with self.changed:
            await self.changed.wait_for(lambda: self.high_watermark > offset or not self.is_leader
                                        or self.replica.epoch != epoch)
        if self.high_watermark <= offset:
            raise self.not_controller()

    async def _run_timers(self) -> None:
        while True:
            delay_ms = self.replica.next_deadline_ms() - now_ms()
            if delay_ms > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)
                except asyncio.TimeoutError:
                    pass
            self._after(self.replica.tick(now_ms()))

    def _after(self, outgoing: list[Envelope]) -> None:
        for envelope in outgoing:
            peer = self.peers.get(envelope.destination)
            if peer is None or self.faults.isolated:
                continue
            if self.faults.delay_ms:
                asyncio.get_running_loop().call_later(self.faults.delay_ms / 1000, peer.send, encode_envelope(envelope))
            else:
                peer.send(encode_envelope(envelope))
        self._wake.set()
        seen = (self.replica.high_watermark, self.replica.role, self.replica.epoch, self.replica.leader_id)
        if seen == self._seen:
            return
        previous, self._seen = self._seen, seen
        if seen[1:] != previous[1:]:
            log.info("quorum: %s in epoch %d (leader %s)", seen[1].value, seen[2],
                     seen[3] if seen[3] != NO_ID else "unknown")
            if self.on_role_change is not None:
                self.on_role_change()
        if seen[0] != previous[0] and self.on_commit is not None:
            self.on_commit(seen[0])
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()
