"""Followers replicate from their leaders with the Kafka Fetch API, as Kafka's fetcher threads do.

One task per leader node fetches every partition this node follows there, starting at its
own log end offset (which tells the leader what it has), appends the batches with their
offsets unchanged and takes the leader's high watermark. The leader parks the request until
there is something new, so the loop never polls.

Each connection to a leader holds a fetch session (KIP-227, FollowerSession): after the first
request names every partition, a request names only the partitions whose fetch state changed
(mostly those just appended to) and the leader answers only partitions with news, so the cost
of a round trip follows what changed, not how many partitions are followed.
"""
from __future__ import annotations

import asyncio
import logging
import struct

from kafka.protocol.consumer import FetchRequest

from cluster.formats.errors import ErrorCode
from cluster.formats.records import (
    CorruptRecordError, read_uvarint, validate_batches, write_compact_string, write_uvarint,
)
from cluster.runtime.shutdown import cancel_and_wait
from cluster.runtime.time_slices import TimeSlice, gently
from cluster.runtime import timeline
from node.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from node.follower_fetch_answers import FetchedPartition, read_fetch_answer
from node.leader_connection import LeaderConnection
from node.partition import Partition
from node.producer_state import PartitionProducers
from node.replication_throttle import FOLLOWER, UNLIMITED, ReplicationThrottle

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topic names; ReplicaId in the body
FETCH_MAX_BYTES = 8 << 20
PARTITION_MAX_BYTES = 1 << 20
RETRY_DELAY_S = 0.2
_INT32 = struct.Struct(">i")  # frame sizes, partition indexes
_REQUEST_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length


class ReplicaFetchers:
    def __init__(self, broker):
        self.broker = broker
        self.followed: dict[int, set[tuple[str, int]]] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        self.changed: dict[int, asyncio.Event] = {}
        self.throttle = ReplicationThrottle(broker, FOLLOWER)
        self.client_id = f"replica-{broker.node_id}".encode()  # node.faults tells peers by it
        self.max_wait_ms = broker.config.get_int("replica.fetch.wait.max.ms")
        # A connection whose packets a network cut dropped may wait out TCP's retransmission
        # backoff long after the cut heals; past this, the fetcher reconnects instead.
        self.socket_timeout_s = broker.config.get_int("replica.socket.timeout.ms") / 1000
        # Per leader, what the next request must look at again: every followed partition after a
        # metadata change (or a new session), else only those appended to or truncated since.
        self.look_at_all: set[int] = set()
        self.appended: dict[int, set[tuple[str, int]]] = {}

    async def reconcile(self, time_slice: TimeSlice | None = None) -> None:
        """Follow every partition replicated here whose leader is another live node."""
        wanted: dict[int, set[tuple[str, int]]] = {}
        partitions = ((topic.name, index, info) for topic in list(self.broker.image.topics.values())
                      for index, info in topic.partitions.items())
        async for name, index, info in gently(partitions, time_slice):
            if info.leader not in (-1, self.broker.node_id) and self.broker.node_id in info.replicas:
                wanted.setdefault(info.leader, set()).add((name, index))
        for leader in set(self.tasks) - set(wanted):
            self.tasks.pop(leader).cancel()
            self.followed.pop(leader, None)
        for leader, partitions in wanted.items():
            if self.followed.get(leader) != partitions:
                self.followed[leader] = partitions
                self.changed.setdefault(leader, asyncio.Event()).set()
            if leader not in self.tasks or self.tasks[leader].done():
                self.tasks[leader] = asyncio.get_running_loop().create_task(self._follow(leader))
        self.look_at_all.update(self.changed)
        for event in self.changed.values():
            event.set()  # also wakes fetchers held back by a throttle whose configs may have changed

    def logs_opened(self) -> None:
        """Logs of partitions followed here were opened: a fetcher that had none to fetch looks again."""
        self.look_at_all.update(self.changed)
        for event in self.changed.values():
            event.set()

    async def close(self) -> None:
        await cancel_and_wait(self.tasks.values())

    async def _follow(self, leader: int) -> None:
        session = FollowerSession()
        while leader in self.followed:
            endpoint = self.broker.peer_endpoint(leader)
            if endpoint is None:
                await self._wait_for_change(leader)
                continue
            try:
                connection = await self.broker.peer_links.open_protocol(LeaderConnection, endpoint[0], endpoint[1])
            except OSError:
                await asyncio.sleep(RETRY_DELAY_S)
                continue
            session.restart()
            try:
                correlation = 0
                while leader in self.followed:
                    correlation += 1
                    await self._fetch_once(leader, connection, correlation, session)
            except (OSError, asyncio.IncompleteReadError, ValueError, CorruptRecordError) as exc:
                log.info("replication from node %d interrupted: %s", leader, exc)
                await asyncio.sleep(RETRY_DELAY_S)
            finally:
                connection.close()

    async def _wait_for_change(self, leader: int, timeout_s: float = 5) -> None:
        event = self.changed.setdefault(leader, asyncio.Event())
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def _logs_to_fetch(self, leader: int, session: "FollowerSession"):
        """(logs whose fetch state the next request must look at, throttled partitions among them,
        whether those are all the partitions to fetch or only the ones that changed)."""
        throttling = self.throttle.rate() < UNLIMITED
        if leader in self.look_at_all or throttling or session.epoch == INITIAL_EPOCH:
            self.look_at_all.discard(leader)
            self.appended.pop(leader, None)
            partitions, complete = self.followed.get(leader, ()), True
        else:
            partitions, complete = self.appended.pop(leader, ()), False
        logs = {key: self.broker.replicas.get_log(*key) for key in partitions}
        logs = {key: partition_log for key, partition_log in logs.items() if partition_log is not None}
        throttled = {key for key in logs if self.throttle.applies(key, self.broker.node_id)} if throttling else set()
        if throttled and self.throttle.exceeded():
            logs = {key: partition_log for key, partition_log in logs.items() if key not in throttled}
        return logs, throttled, complete

    async def _fetch_once(self, leader: int, connection: LeaderConnection, correlation: int,
                          session: "FollowerSession") -> None:
        logs, throttled, complete = self._logs_to_fetch(leader, session)
        if complete and not logs:
            self.look_at_all.add(leader)
            await self._wait_for_change(leader, self.throttle.wait_s() if throttled else 5)
            return
        faults = self.broker.faults
        if not faults.reachable(leader):  # isolated: nothing goes out, nothing comes back
            await faults.wait_reachable(leader)
        request = framed_request(self._request(logs, session, complete), correlation, self.client_id)
        body = await connection.exchange(request, self.socket_timeout_s)
        if timeline.ENABLED:
            timeline.mark("follower got answer")
        _, start = read_uvarint(body, 4)  # correlation id, then an empty tagged-field section
        response = read_fetch_answer(body[start:])
        if not faults.reachable(leader):
            await faults.wait_reachable(leader)
        if not session.answered(response):
            log.info("fetch session with node %d ended: error %d; starting a new one", leader, response.error_code)
            return
        failed = False
        appended = self.appended.setdefault(leader, set())
        for topic, partitions in response.responses:
            for data in partitions:
                key = (topic, data[0])
                partition = self.broker.replicas.partitions.get(key)
                # The leader read from the offset its session holds for us: the last one we sent.
                if self._still_following(leader, key, partition, session.fetch_offset_of(key)):
                    failed |= not self._apply(leader, key, data, partition)
                    appended.add(key)
                    if key in throttled:
                        self.throttle.record(len(data[-1] or b""))
        if timeline.ENABLED:
            timeline.mark("follower appended")
        if failed:
            # The leader answers errors at once; back off instead of spinning until metadata changes.
            await asyncio.sleep(RETRY_DELAY_S)

    def _request(self, logs, session: "FollowerSession", complete: bool):
        wanted = {}
        for key, partition_log in logs.items():
            info = self.broker.partition(*key)
            # Epoch 0 is an epoch like any other; only a log without epochs has none (-1).
            last_epoch = -1 if partition_log.latest_epoch is None else partition_log.latest_epoch
            wanted[key] = (partition_log.log_end_offset, info.leader_epoch if info else -1, last_epoch,
                           partition_log.log_start_offset)
        to_send, forgotten = session.next_request(wanted, complete)
        return follower_fetch_request(self.broker.node_id, self.max_wait_ms, session, to_send, forgotten)

    def _still_following(self, leader: int, key: tuple[str, int], partition: Partition | None, fetch_offset) -> bool:
        """A response is applied only while it still answers our question: the partition is
        followed from this leader (leadership may have moved, even to us, while the request was
        out) and our log ends where the request said (Kafka's fetcher checks the same)."""
        info = self.broker.partition(*key)
        return (partition is not None and info is not None and info.leader == leader
                and key in self.followed.get(leader, ()) and partition.log.log_end_offset == fetch_offset)

    def _apply(self, leader: int, key: tuple[str, int], data: FetchedPartition, partition: Partition) -> bool:
        partition_log = partition.log
        _, error_code, high_watermark, log_start_offset, diverging_epoch, records = data
        if error_code == ErrorCode.OFFSET_OUT_OF_RANGE and log_start_offset > partition_log.log_end_offset:
            # Retention on the leader deleted everything we lack: start over where its log starts
            # (Kafka's AbstractFetcherThread.handleOutOfRangeError).
            log.info("%s-%d: leader %d's log starts at %d, after ours ends at %d: starting over there",
                     *key, leader, log_start_offset, partition_log.log_end_offset)
            partition_log.truncate_fully_and_start_at(log_start_offset)
            partition.producers = PartitionProducers()
            return True
        if error_code != ErrorCode.NONE:
            log.debug("fetching %s-%d from node %d: error %d", *key, leader, error_code)
            return False
        if diverging_epoch is not None:  # the leader sends it only when our tail diverged
            end = _truncation_offset(partition_log, diverging_epoch.epoch, diverging_epoch.end_offset)
            log.info("%s-%d diverged from leader %d after offset %d: truncating", *key, leader, end)
            partition_log.truncate_to(end)
            # Rare: rebuilt from what is left, so that a later leadership here knows every producer.
            partition.producers = PartitionProducers.from_log(partition_log)
            return True
        if records:
            batches = validate_batches(records, replicated=True)
            partition_log.append_as_follower(records, batches)
            # (so that this replica can take over as leader, recognise retried batches and know
            # which transactions are open)
            partition.track_replicated(records, batches)
        partition_log.high_watermark = min(high_watermark, partition_log.log_end_offset)
        partition.producers.high_watermark_moved(partition_log.high_watermark)
        # Records the leader deleted (DeleteRecords) go here too, as far as this replica is committed.
        partition_log.advance_log_start_offset(log_start_offset)
        return True


PartitionState = tuple[int, int, int, int]  # fetch offset, leader epoch, last fetched epoch, log start offset


# Fetch v12's fixed fields, by the schema's order: replica id, max wait, min bytes, max bytes,
# isolation level, session id, session epoch; and a partition's: index, current leader epoch,
# fetch offset, last fetched epoch, log start offset, partition max bytes.
_REQUEST_FIELDS = struct.Struct(">iiiibii")
_PARTITION_FIELDS = struct.Struct(">iiqiqi")


def follower_fetch_request(replica_id: int, max_wait_ms: int, session: "FollowerSession",
                           to_send: dict[tuple[str, int], PartitionState], forgotten: list[tuple[str, int]]) -> bytes:
    """The body of the Fetch v12 request naming `to_send` and forgetting `forgotten`, in the
    session's id and epoch: what kafka.protocol encodes, written here with struct. Built and encoded
    through kafka.protocol's classes it was about a quarter of a follower's CPU per acks=all write.

    v12 is flexible: arrays and strings carry length + 1 as an unsigned varint, and every struct
    ends with its tagged fields; none is set (ClusterId, the only tagged field, stays null)."""
    out = bytearray(_REQUEST_FIELDS.pack(replica_id, max_wait_ms, 1, FETCH_MAX_BYTES, 0, session.session_id,
                                         session.epoch))
    by_topic = _by_topic(to_send)
    write_uvarint(len(by_topic) + 1, out)
    for topic, partitions in by_topic.items():
        write_compact_string(topic, out)
        write_uvarint(len(partitions) + 1, out)
        for index, (fetch_offset, leader_epoch, last_fetched_epoch, log_start_offset) in partitions:
            out += _PARTITION_FIELDS.pack(index, leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
                                          PARTITION_MAX_BYTES)
            out.append(0)  # the partition's tagged fields
        out.append(0)  # the topic's
    gone = _by_topic(dict.fromkeys(forgotten))
    write_uvarint(len(gone) + 1, out)
    for topic, parts in gone.items():
        write_compact_string(topic, out)
        write_uvarint(len(parts) + 1, out)
        for index, _ in parts:
            out += _INT32.pack(index)
        out.append(0)
    out += b"\x01\x00"  # rack id "", then the request's tagged fields
    return bytes(out)


class FollowerSession:
    """The follower's side of a fetch session with one leader, as Kafka's FetchSessionHandler.

    `sent` is the fetch state of every partition as the leader's session holds it; a request
    names the partitions whose state differs from it and forgets those no longer wanted.
    """

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict[tuple[str, int], PartitionState] = {}

    def restart(self) -> None:
        """Next request is a full one, closing the session held so far (a new connection)."""
        self.epoch = INITIAL_EPOCH

    def fetch_offset_of(self, key: tuple[str, int]) -> int | None:
        state = self.sent.get(key)
        return None if state is None else state[0]

    def next_request(self, wanted: dict[tuple[str, int], PartitionState], complete: bool = True):
        """(partitions to name with their state, partitions to forget) for the next request.
        `wanted`: every partition to fetch, or (complete=False) only some whose state may have changed."""
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.sent = dict(wanted)
            return wanted, []
        changed = {key: state for key, state in wanted.items() if self.sent.get(key) != state}
        forgotten = [key for key in self.sent if key not in wanted] if complete else []
        for key in forgotten:
            del self.sent[key]
        self.sent.update(changed)
        return changed, forgotten

    def answered(self, response) -> bool:
        """Take the session id and epoch the answer implies; False if the leader refused the session."""
        if response.error_code != ErrorCode.NONE:
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if self.epoch == INITIAL_EPOCH or response.session_id == INVALID_SESSION_ID:
            # A full answer opens a session (or none, id 0: then every request stays a full one).
            self.session_id = response.session_id
            self.epoch = INITIAL_EPOCH if response.session_id == INVALID_SESSION_ID else next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True


def framed_request(body: bytes, correlation_id: int, client_id: bytes) -> bytes:
    """Size, request header (v2) and body, as kafka.protocol's encode(header=True, framed=True) writes
    them."""
    header = _REQUEST_HEADER.pack(FetchRequest.API_KEY, FETCH_VERSION, correlation_id, len(client_id)) + client_id
    return _INT32.pack(len(header) + 1 + len(body)) + header + b"\x00" + body  # (no tagged fields)


def _by_topic(partitions: dict[tuple[str, int], object]) -> dict[str, list[tuple[int, object]]]:
    by_topic: dict[str, list] = {}
    for (topic, index), state in partitions.items():
        by_topic.setdefault(topic, []).append((index, state))
    return by_topic


def _truncation_offset(partition_log, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a diverged follower cuts its log, as Kafka's AbstractFetcherThread does.

    The leader names the largest epoch it has up to ours and where that epoch ends. When we know
    that epoch too, the logs agree up to the smaller of the two ends; when we do not, everything
    from our end of it onwards goes, and the next fetch compares again from there. A leader that
    knows none of our epochs leaves us the high watermark.
    """
    if leader_epoch < 0:
        target = partition_log.high_watermark
    else:
        own_epoch, own_end = partition_log.end_offset_for_epoch(leader_epoch)
        if own_epoch < 0:
            target = partition_log.high_watermark
        elif own_epoch == leader_epoch:
            target = min(leader_end_offset, own_end)
        else:
            target = own_end
    return max(partition_log.log_start_offset, min(target, partition_log.log_end_offset))
