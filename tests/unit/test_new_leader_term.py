"""A new leader whose high watermark lags what the previous leader acknowledged: who it lets into
the ISR (Kafka's Partition.isFollowerInSync) and what ListOffsets answers meanwhile.

A real Broker's replica manager, with its controller round trip recorded instead of sent.
"""
import asyncio
import uuid

from kafka.protocol.consumer import ListOffsetsRequest

from cluster.formats.config import BrokerConfig
from cluster.formats.image import BrokerInfo, MetadataDelta, PartitionInfo, TopicInfo
from cluster.formats.records import encode_batch
from node.apis import list_offsets
from node.broker import Broker
from tests.unit.headers import request_header

OFFSET_NOT_AVAILABLE, LEADER_NOT_AVAILABLE = 78, 5


async def leader_in_waiting(tmp_path) -> tuple[Broker, TopicInfo, list[list[int]]]:
    """Node 1, following node 3 in epoch 0 with ISR [1, 3]; node 2 is alive but out of the ISR."""
    broker = Broker(BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)}))
    proposed: list[list[int]] = []

    async def call_controller(op: str, **args) -> dict:
        assert op == "alter_partition"
        proposed.append(args["isr"])
        return {"error_code": 0}

    broker.call_controller = call_controller
    topic = TopicInfo("orders", uuid.uuid4())
    topic.partitions[0] = PartitionInfo(0, replicas=[1, 2, 3], isr=[1, 3], leader=3, leader_epoch=0)
    broker.image.topics["orders"] = topic
    broker.image.topics_by_id[topic.topic_id] = topic
    broker.image.brokers[2] = BrokerInfo(2, uuid.uuid4(), 0, [], fenced=False)
    await broker.replicas.reconcile()
    return broker, topic, proposed


async def lead_with_a_lagging_high_watermark(broker: Broker, topic: TopicInfo) -> None:
    """Node 1 got ten records from node 3, which acknowledged them all, but learned only of HW 6
    before it took over as leader of epoch 1."""
    partition_log = broker.replicas.get_log("orders", 0)
    for offset in range(10):
        partition_log.append_as_follower(encode_batch([(None, b"v")], base_offset=offset, timestamp=1000 + offset))
    partition_log.high_watermark = 6
    topic.partitions[0] = PartitionInfo(0, replicas=[1, 2, 3], isr=[1, 3], leader=1, leader_epoch=1,
                                        partition_epoch=1)
    await broker.replicas.reconcile(MetadataDelta(partitions={(topic.topic_id, 0)}))


def test_a_follower_joins_the_isr_only_with_everything_written_before_the_term_began(tmp_path):
    async def scenario():
        broker, topic, proposed = await leader_in_waiting(tmp_path)
        await lead_with_a_lagging_high_watermark(broker, topic)

        hosted = broker.replicas.partitions["orders", 0]
        hosted.record_follower_offset(2, 8, broker.partition("orders", 0))  # past our HW, short of offset 10
        await asyncio.sleep(0)
        assert proposed == []
        hosted.record_follower_offset(2, 10, broker.partition("orders", 0))
        for _ in range(3):
            await asyncio.sleep(0)
        assert proposed == [[1, 2, 3]]
        broker.replicas.close()

    asyncio.run(scenario())


def test_list_offsets_asks_clients_to_retry_until_the_high_watermark_reaches_the_term_start(tmp_path):
    async def leading_with_a_lagging_high_watermark() -> Broker:
        broker, topic, _ = await leader_in_waiting(tmp_path)
        await lead_with_a_lagging_high_watermark(broker, topic)
        await broker.fetchers.close()
        return broker

    broker = asyncio.run(leading_with_a_lagging_high_watermark())

    def ask(version: int, timestamp: int, replica_id: int = -1) -> tuple[int, int]:
        T = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest[version](replica_id=replica_id, isolation_level=0, timeout_ms=0, topics=[
            T(name="orders", partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                 timestamp=timestamp)])])
        response = asyncio.run(list_offsets.handle(broker, request_header(version), request))
        answer = response.topics[0].partitions[0]
        return answer.error_code, answer.offset

    assert ask(7, list_offsets.LATEST_TIMESTAMP) == (OFFSET_NOT_AVAILABLE, -1)
    assert ask(4, list_offsets.LATEST_TIMESTAMP) == (LEADER_NOT_AVAILABLE, -1)
    assert ask(7, list_offsets.EARLIEST_TIMESTAMP) == (0, 0)
    assert ask(7, 1003) == (0, 3)  # found below the high watermark: known to be committed
    assert ask(7, 1008) == (OFFSET_NOT_AVAILABLE, -1)
    assert ask(7, list_offsets.LATEST_TIMESTAMP, replica_id=2) == (0, 10)  # replicas see the whole log

    broker.replicas.get_log("orders", 0).high_watermark = 10
    assert ask(7, list_offsets.LATEST_TIMESTAMP) == (0, 10)
    assert ask(7, 1008) == (0, 8)
    broker.replicas.close()
