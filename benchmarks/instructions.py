"""Instructions per acks=all write, counted rather than timed: `python -m benchmarks.instructions`.

On a shared host the same code's latency moves from one minute to the next by more than a
change worth a few percent of a write's CPU, which then never shows in timings. The number of instructions the code
executes does not move: valgrind's callgrind counts them, the same for the same code and input.

This bench runs the leader and its followers as real node objects (node.broker.Broker, with its
listener node.server.KafkaServer and its replica fetchers), all in one process on one uvloop event
loop, with the topic's metadata set in each node's image (no controller). A client in the same
process writes to the leader over loopback: one Produce request v9 at a time, acks=all, one
100-byte record, the next one sent when the answer has come. Followers fetch as they always do,
over their own connections. The process runs under callgrind twice, with two numbers of writes:
the difference in instructions over the difference in writes is what one write costs the whole
cluster, the client's raw requests included (a small constant) and start-up left out.

Python's own costs count the same in every run, so the figure compares commits on one machine and
Python build; it does not say how long a write takes. Where instructions are spent cold (after a
process slept) they take longer than warm: see `python -m benchmarks.timeline`.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

TOPIC = "instructions"
PRODUCE_VERSION = 9
LISTENER = "PLAINTEXT"
HOST = "127.0.0.1"


async def _no_controller(op: str, **args) -> dict:
    """The nodes' controller calls (ISR changes): none is expected while followers keep up."""
    return {"error_code": 0}


async def start_nodes(directory: Path, replication_factor: int) -> list:
    """(Broker, KafkaServer) of each node, node 1 leading the topic's one partition, every replica in
    sync; followers fetching from it."""
    from cluster.formats.config import BrokerConfig
    from cluster.formats.listeners import ListenerSpec
    from node.broker import Broker
    from node.server import KafkaServer

    nodes = []
    for node_id in range(1, replication_factor + 1):
        broker = Broker(BrokerConfig({"node.id": str(node_id), "log.dirs": str(directory / f"node-{node_id}")}))
        broker.call_controller = _no_controller
        server = KafkaServer(broker, broker.config.get_int("socket.request.max.bytes"))
        ports = await server.start([ListenerSpec(LISTENER, HOST, 0, "PLAINTEXT")])
        broker.listeners = {LISTENER: ListenerSpec(LISTENER, HOST, ports[LISTENER], "PLAINTEXT")}
        nodes.append((broker, server))
    topic_id = uuid.uuid4()
    for broker, _ in nodes:
        _set_image(broker, [other for other, _ in nodes], topic_id)
        await broker.replicas.reconcile()
    return nodes


def _set_image(broker, brokers: list, topic_id: uuid.UUID) -> None:
    from cluster.formats.image import BrokerInfo, Endpoint, PartitionInfo, TopicInfo

    for other in brokers:
        listener = other.listeners[LISTENER]
        endpoint = Endpoint(LISTENER, listener.host, listener.port)
        broker.image.brokers[other.node_id] = BrokerInfo(other.node_id, uuid.uuid4(), 0, [endpoint], fenced=False)
    ids = [other.node_id for other in brokers]
    topic = TopicInfo(TOPIC, topic_id)
    topic.partitions[0] = PartitionInfo(0, replicas=ids, isr=list(ids), leader=1, leader_epoch=0)
    broker.image.topics[TOPIC] = topic
    broker.image.topics_by_id[topic_id] = topic


async def stop_nodes(nodes: list) -> None:
    for broker, server in nodes:
        await server.close()
        await broker.close()


def produce_request() -> bytes:
    """A framed Produce v9 request: acks=all, one 100-byte record to partition 0. Sent as is for every
    write: the node answers whatever correlation id it is given."""
    from kafka.protocol.producer import ProduceRequest

    from cluster.bench.replication import VALUE
    from cluster.formats.records import encode_batch

    request_type = ProduceRequest[PRODUCE_VERSION]
    data = request_type.TopicProduceData
    batch = encode_batch([(None, VALUE)], timestamp=int(time.time() * 1000))
    request = request_type(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        data(name=TOPIC, partition_data=[data.PartitionProduceData(index=0, records=batch)])])
    request.with_header(correlation_id=1, client_id="bench-instructions")
    return bytes(request.encode(header=True, framed=True))


async def write(writes: int, directory: Path, replication_factor: int) -> bytes:
    """Make `writes` acks=all writes, one after another; the last answer's body."""
    nodes = await start_nodes(directory, replication_factor)
    try:
        reader, writer = await asyncio.open_connection(HOST, nodes[0][0].listeners[LISTENER].port)
        request = produce_request()
        answer = b""
        for _ in range(writes):
            writer.write(request)
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            answer = await reader.readexactly(size)
        writer.close()
        return answer
    finally:
        await stop_nodes(nodes)


def check_answer(answer: bytes, writes: int) -> None:
    """The last write's answer names no error and the offset writes - 1."""
    from kafka.protocol.producer import ProduceResponse

    response = ProduceResponse[PRODUCE_VERSION].decode(answer[5:])  # after the correlation id and tagged fields
    partition = response.responses[0].partition_responses[0]
    if partition.error_code != 0 or partition.base_offset != writes - 1:
        raise SystemExit(f"write {writes} answered error {partition.error_code} at offset {partition.base_offset}")


def run_inside(writes: int, replication_factor: int) -> None:
    from cluster.runtime import event_loop

    directory = Path(tempfile.mkdtemp(prefix="kraftwerk-instructions-"))
    try:
        check_answer(event_loop.run(write(writes, directory, replication_factor)), writes)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def counted_instructions(writes: int, replication_factor: int) -> int:
    """Instructions this process executes under callgrind making `writes` writes."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
         "benchmarks.instructions", "--inside", str(writes), "--replication-factor", str(replication_factor)],
        capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the counted run failed:\n{result.stdout}{result.stderr}")
    collected = re.search(r"Collected : (\d+)", result.stderr)
    if collected is None:
        raise SystemExit(f"callgrind printed no count:\n{result.stderr}")
    return int(collected.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, nargs=2, default=(100, 600), metavar=("FEWER", "MORE"),
                        help="the two numbers of writes counted")
    parser.add_argument("--replication-factor", type=int, default=3, help="the topic's replicas (nodes)")
    parser.add_argument("--inside", type=int, metavar="WRITES", help=argparse.SUPPRESS)  # the counted run
    args = parser.parse_args()
    if args.inside is not None:
        run_inside(args.inside, args.replication_factor)
        return
    fewer, more = args.writes
    if not 0 < fewer < more:
        raise SystemExit("--writes takes two numbers of writes, the first smaller")
    counts = [counted_instructions(writes, args.replication_factor) for writes in (fewer, more)]
    per_write = (counts[1] - counts[0]) / (more - fewer)
    print(f"acks=all writes, RF={args.replication_factor}, all nodes in one process: "
          f"{per_write:,.0f} instructions per write ({fewer} and {more} writes: {counts[0]:,} and {counts[1]:,})")


if __name__ == "__main__":
    main()
