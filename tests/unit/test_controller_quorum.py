"""Three controllers' metadata writers in one event loop, each behind a real control server on a
loopback port, replicating `__cluster_metadata` with Raft: one becomes active, a change it writes
is committed and applied by the others, and when it stops another takes over with that change.
The envelope codec refuses malformed messages before they reach the state machine."""
from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from cluster.formats.control import BadControlRequest, ControlClient, ControlError, ControlServer, NotController
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_to_kafka_string
from controller.metadata_writer import MetadataWriter
from controller.quorum_codec import decode_envelope, encode_envelope
from controller.raft.log import LogEntry
from controller.raft.messages import EpochEndOffset, Envelope, FetchResponse, VoteRequest
from controller.server import Controller

IDS = (3000, 3001, 3002)


class Member:
    """One controller: its control server, metadata writer, controller and takeover task."""

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.handlers: dict = {}
        self.server = ControlServer(self.handlers)
        self.port = 0
        self.writer: MetadataWriter | None = None
        self.controller: Controller | None = None
        self.following: asyncio.Task | None = None

    async def open(self) -> None:
        self.port = await self.server.start("127.0.0.1", 0)

    async def run(self, data_dir, voters: dict) -> None:
        self.writer = MetadataWriter(data_dir / str(self.node_id), "quorum-test", self.node_id, voters)
        self.controller = Controller(self.writer, {}, 60_000)
        self.handlers.update(self.controller.handlers())
        self.handlers["raft"] = self.writer.quorum.handle
        await self.writer.start()
        self.following = asyncio.create_task(self.controller.activation.follow_quorum())

    async def stop(self) -> None:
        self.following.cancel()
        await asyncio.gather(self.following, return_exceptions=True)
        await self.server.close()
        await self.writer.stop()


async def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def start_quorum(tmp_path) -> dict[int, Member]:
    """Three controllers, each knowing the others' ports before it starts."""
    members = {node_id: Member(node_id) for node_id in IDS}
    for member in members.values():
        await member.open()
    voters = {node_id: ("127.0.0.1", member.port) for node_id, member in members.items()}
    for member in members.values():
        await member.run(tmp_path, voters)
    return members


def register_args(node_id: int) -> dict:
    return {"node_id": node_id, "incarnation_id": topic_id_to_kafka_string(uuid.uuid4()), "host": "127.0.0.1",
            "port": 9000 + node_id, "pid": None}


def test_a_change_committed_by_the_active_controller_survives_its_loss(tmp_path):
    async def scenario():
        members = await start_quorum(tmp_path)
        try:
            await until(lambda: sum(m.controller.active for m in members.values()) == 1)
            first = next(m for m in members.values() if m.controller.active)
            for member in members.values():
                member.writer.snapshot_bytes = 1  # a snapshot after every batch applied
            await first.handlers["register"](register_args(1), None)
            offset = first.writer.last_offset
            # Committed means on a majority: every voter applies it, and snapshots it, keeping its log.
            await until(lambda: all(1 in m.writer.image.brokers for m in members.values()))
            await until(lambda: all(m.writer.snapshot_id is not None and m.writer.snapshot_id.end_offset > offset
                                    for m in members.values()))
            assert [m.writer.log_start_offset for m in members.values()] == [0, 0, 0]
            follower = next(m for m in members.values() if m is not first)
            with pytest.raises(NotController) as refused:
                await follower.handlers["status"]({}, None)
            assert refused.value.leader == (first.node_id, "127.0.0.1", first.port)

            await first.stop()
            rest = [m for m in members.values() if m is not first]
            started = time.monotonic()
            await until(lambda: sum(m.controller.active for m in rest) == 1)
            elected_in = time.monotonic() - started
            second = next(m for m in rest if m.controller.active)
            assert second.writer.quorum.replica.epoch > first.writer.quorum.replica.epoch
            assert 1 in second.writer.image.brokers and second.writer.last_offset > offset
            await second.handlers["register"](register_args(2), None)
            await until(lambda: all(2 in m.writer.image.brokers for m in rest))
            return elected_in
        finally:
            for member in members.values():
                if member.server.server is not None and member.server.server.is_serving():
                    await member.stop()

    elected_in = asyncio.run(scenario())
    assert elected_in < 5  # fetch timeout (1 s), jitter, pre-vote and vote: about 1.5 s


def test_a_lone_controller_leads_at_once_and_commits_each_write_as_it_is_written(tmp_path):
    async def scenario():
        writer = MetadataWriter(tmp_path, "lone")
        controller = Controller(writer, {}, 60_000)
        assert writer.is_active and writer.last_offset == 0  # the LeaderChangeMessage of epoch 1
        controller.take_over()
        reply = await controller.handlers()["register"](register_args(1), None)
        assert reply["broker_epoch"] == 1 and writer.last_offset == 1 == writer.quorum.high_watermark - 1
        writer.close()
    asyncio.run(scenario())


def test_messages_travel_through_the_codec_unchanged():
    messages = [
        Envelope(3000, 3001, 7, VoteRequest("c", 3000, 4, 3, 120, 3001, pre_vote=True)),
        Envelope(3001, 3000, 8, FetchResponse(ErrorCode.NONE, 3001, 4, 120,
                                              (LogEntry(118, 4, b"batch", False), LogEntry(119, 4, b"", True)),
                                              EpochEndOffset(3, 100))),
    ]
    for envelope in messages:
        assert decode_envelope(encode_envelope(envelope)) == envelope


@pytest.mark.parametrize("value, refused", [
    (None, "expected [source"),
    ([1, 2, 3, "Gossip", []], "unknown message type"),
    ([1, 2, 3, "VoteRequest", ["c", 1]], "expected 7 fields"),
    ([1, 2, 3, "VoteRequest", ["c", 1, "one", 1, 1, 2, False]], "candidate_epoch must be an integer"),
    ([1, 2, True, "VoteRequest", ["c", 1, 1, 1, 1, 2, False]], "must be integers"),
    ([1, 2, 3, "FetchResponse", [9999, 1, 1, 1, [], None, None]], "9999"),
    ([1, 2, 3, "FetchResponse", [0, 1, 1, 1, [[1, 1, "text", False]], None, None]], "batch must be bytes"),
])
def test_a_malformed_message_is_refused_as_a_bad_request(value, refused):
    with pytest.raises(BadControlRequest, match=re.escape(refused)):
        decode_envelope(value)


def test_a_raft_message_for_another_controller_is_refused_and_the_controller_serves_on(tmp_path):
    async def scenario():
        member = Member(3000)
        await member.open()
        await member.run(tmp_path, {3000: ("127.0.0.1", member.port), 3001: ("127.0.0.1", 1)})
        client = ControlClient("127.0.0.1", member.port)
        await client.connect()
        try:
            wrong = encode_envelope(Envelope(3001, 3002, 1, VoteRequest("quorum-test", 3001, 1, 0, 0, 3002)))
            with pytest.raises(ControlError, match="sent to 3000"):
                await client.call("raft", envelope=wrong)
            with pytest.raises(ControlError, match="bad request"):
                await client.call("raft", envelope=[1, 2])
            return (await client.call("quorum_role"))["node_id"]
        finally:
            await client.close()
            await member.stop()
    assert asyncio.run(scenario()) == 3000


def test_an_isolated_active_controller_resigns_a_new_one_takes_over_and_the_healed_one_follows_it(tmp_path):
    async def scenario():
        members = await start_quorum(tmp_path)
        try:
            await until(lambda: sum(m.controller.active for m in members.values()) == 1)
            first = next(m for m in members.values() if m.controller.active)
            assert await first.handlers["isolate"]({}, None) == {"isolated": True, "delay_ms": 0}
            with pytest.raises(NotController) as refused:
                await first.handlers["status"]({}, None)
            assert refused.value.leader is None
            rest = [m for m in members.values() if m is not first]
            await until(lambda: sum(m.controller.active for m in rest) == 1 and not first.controller.active)
            second = next(m for m in rest if m.controller.active)
            await second.handlers["register"](register_args(5), None)
            await first.handlers["heal"]({}, None)
            await until(lambda: 5 in first.writer.image.brokers)
            assert first.writer.quorum.replica.leader_id == second.node_id and not first.controller.active
        finally:
            for member in members.values():
                await member.stop()
    asyncio.run(scenario())
