"""ISR expiry on a leader: which followers it finds behind, asking only about partitions that are
not quiet in a recent fetch session of theirs.

A real Broker's replica manager and fetch handler, with its controller round trip recorded instead
of sent; followers are Fetch requests handed to the handler.
"""
import asyncio
import uuid

from kafka.protocol.consumer import FetchRequest

from cluster.formats.config import BrokerConfig
from cluster.formats.image import BrokerInfo, PartitionInfo, TopicInfo
from cluster.formats.records import encode_batch
from node.apis import fetch
from node.broker import Broker
from tests.unit.headers import request_header

LAG_MS = 100
VERSION = 12


async def leading(tmp_path) -> tuple[Broker, list[tuple[int, list[int]]]]:
    """Node 1, leader of orders-0 and orders-1 with replicas and ISR [1, 2, 3]."""
    broker = Broker(BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)}))
    proposed: list[tuple[int, list[int]]] = []

    async def call_controller(op: str, **args) -> dict:
        assert op == "alter_partition"
        proposed.append((args["partition"], args["isr"]))
        return {"error_code": 0}

    broker.call_controller = call_controller
    topic = TopicInfo("orders", uuid.uuid4())
    for index in (0, 1):
        topic.partitions[index] = PartitionInfo(index, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=0)
    broker.image.topics["orders"] = topic
    broker.image.topics_by_id[topic.topic_id] = topic
    for node_id in (2, 3):
        broker.image.brokers[node_id] = BrokerInfo(node_id, uuid.uuid4(), 0, [], fenced=False)
    await broker.replicas.reconcile()
    return broker, proposed


async def follower_fetch(broker: Broker, follower: int, session_id: int, epoch: int, offsets: dict[int, int]) -> int:
    """One Fetch from a follower (max_wait 0) naming `offsets` (partition -> fetch offset); its session id."""
    partitions = [FetchRequest.FetchTopic.FetchPartition(partition=index, current_leader_epoch=0, fetch_offset=offset,
                                                         last_fetched_epoch=-1, log_start_offset=0,
                                                         partition_max_bytes=1 << 20)
                  for index, offset in offsets.items()]
    request = FetchRequest[VERSION](
        cluster_id=None, replica_id=follower, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic="orders", partitions=partitions)] if partitions else [],
        forgotten_topics_data=[], rack_id="")
    answer = await fetch.handle(broker, request_header(VERSION), request)
    wire = b"".join(bytes(piece) for piece in answer.encode_pieces(VERSION))
    response = fetch.RESPONSE.decode(wire, version=VERSION)
    assert response.error_code == 0
    return response.session_id


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_follower_fetching_in_its_session_stays_and_one_that_stopped_leaves(tmp_path):
    async def scenario():
        broker, proposed = await leading(tmp_path)
        sessions = {f: await follower_fetch(broker, f, 0, 0, {0: 0, 1: 0}) for f in (2, 3)}
        await asyncio.sleep(2 * LAG_MS / 1000)
        await follower_fetch(broker, 2, sessions[2], 1, {})  # nothing new: both partitions quiet
        await broker.replicas.shrink_lagging_isrs(LAG_MS)
        await settle()
        assert sorted(proposed) == [(0, [1, 2]), (1, [1, 2])]
        broker.replicas.close()

    asyncio.run(scenario())


def test_a_follower_fetching_but_not_reading_what_was_appended_leaves_that_partition_only(tmp_path):
    async def scenario():
        broker, proposed = await leading(tmp_path)
        session = await follower_fetch(broker, 2, 0, 0, {0: 0, 1: 0})
        await follower_fetch(broker, 3, 0, 0, {0: 0, 1: 0})
        broker.replicas.get_log("orders", 1).append(encode_batch([(None, b"v")], timestamp=1000), leader_epoch=0)
        broker.replicas.partitions["orders", 1].appended_as_leader()
        await asyncio.sleep(2 * LAG_MS / 1000)
        # Node 2 keeps its session going but never asks for the new record; node 3 is silent.
        await follower_fetch(broker, 2, session, 1, {})
        await broker.replicas.shrink_lagging_isrs(LAG_MS)
        await settle()
        assert sorted(proposed) == [(0, [1, 2]), (1, [1])]
        broker.replicas.close()

    asyncio.run(scenario())
