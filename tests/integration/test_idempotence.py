"""Idempotent producers: a retried batch is written once, across connection loss and restarts."""
from __future__ import annotations

import socket
import struct
import threading
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse

from cluster.launch import Cluster
from cluster.formats.records import encode_batch
from tests.integration.wire import exchange_once, recv_exactly

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def produce(address, topic, producer_id, sequence, value):
    batch = encode_batch([(None, value)], timestamp=1_700_000_000_000, producer_id=producer_id, producer_epoch=0,
                         base_sequence=sequence)
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    result = exchange_once(address, request, ProduceResponse, 9).responses[0].partition_responses[0]
    return result.error_code, result.base_offset


def read_values(bootstrap, topic):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [(r.offset, r.value) for r in consumer]
    finally:
        consumer.close()


def test_duplicates_are_answered_with_the_original_offset_even_after_a_restart(tmp_path):
    with Cluster(nodes=1, data_dir=tmp_path / "cluster") as cluster:
        topic = f"idem-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic)
        host, port = cluster.bootstrap_servers.rsplit(":", 1)
        address = (host, int(port))
        init = exchange_once(address, InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1),
                        InitProducerIdResponse, 4)
        assert init.error_code == 0 and init.producer_id >= 0
        pid = init.producer_id

        assert produce(address, topic, pid, 0, b"first") == (0, 0)
        assert produce(address, topic, pid, 0, b"first") == (0, 0)  # a retry: same offset, not written again
        assert produce(address, topic, pid, 5, b"gap")[0] == OUT_OF_ORDER_SEQUENCE_NUMBER

        cluster.restart_node(1)
        host, port = cluster.bootstrap_servers.rsplit(":", 1)  # a node on port 0 comes back on a new port
        address = (host, int(port))
        assert produce(address, topic, pid, 0, b"first") == (0, 0)  # state rebuilt from the log
        assert produce(address, topic, pid, 1, b"second") == (0, 1)
        assert read_values(cluster.bootstrap_servers, topic) == [(0, b"first"), (1, b"second")]

        again = exchange_once(address, InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60000,
                                                           producer_id=-1, producer_epoch=-1),
                         InitProducerIdResponse, 4)
        assert again.producer_id != pid  # ids come from controller blocks and never repeat


class DroppingProxy:
    """A TCP proxy in front of one node that, once armed, forwards the next Produce request and
    then cuts the connection before the response can reach the client."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:  # the node is gone (the cluster is stopping): refuse this client only
                client.close()
                continue
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _client_to_server(self, client, server):
        try:
            while True:
                header = recv_exactly(client, 4)
                frame = recv_exactly(client, struct.unpack(">i", header)[0])
                if struct.unpack(">h", frame[:2])[0] == 0 and self.armed.is_set():
                    # Cut the client off before the node can answer, so that the answer is surely
                    # lost; the node still gets the request and writes it.
                    self.armed.clear()
                    client.shutdown(socket.SHUT_RDWR)
                    server.sendall(header + frame)
                    self.dropped.set()
                    raise ConnectionError("dropped on purpose")
                server.sendall(header + frame)
        except OSError:
            pass
        finally:
            for sock in (client, server):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def close(self):
        self.closing = True
        self.listener.close()


def confluent_producer(bootstrap):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                                         "max.in.flight.requests.per.connection": 1})

    def send(value: bytes) -> int:
        offsets = []

        def on_delivery(err, msg):
            assert err is None, err
            offsets.append(msg.offset())

        producer.produce("idempotent", value, partition=0, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        return offsets[0]

    return send, lambda: None


def kafka_python_producer(bootstrap):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             max_in_flight_requests_per_connection=1, request_timeout_ms=5000)
    return (lambda value: producer.send("idempotent", value, partition=0).get(30).offset), producer.close


@pytest.mark.parametrize("make_producer", [confluent_producer, kafka_python_producer],
                         ids=["confluent-kafka", "kafka-python"])
def test_idempotent_producer_retried_after_a_disconnect_writes_once(make_producer):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        node_port = probe.getsockname()[1]
    proxy = DroppingProxy(("127.0.0.1", node_port))
    try:
        # Clients are told to reach the node through the proxy.
        with Cluster(nodes=1, port=node_port,
                     node_config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}) as cluster:
            cluster.create_topic("idempotent")
            send, close = make_producer(f"127.0.0.1:{proxy.port}")
            offsets = [send(f"before-{i}".encode()) for i in range(5)]
            proxy.armed.set()
            offsets.append(send(b"retried"))
            assert proxy.dropped.is_set(), "the proxy never cut a produce request"
            offsets.append(send(b"after"))
            close()
            values = [v for _, v in read_values(cluster.bootstrap_servers, "idempotent")]
    finally:
        proxy.close()
    assert values == [f"before-{i}".encode() for i in range(5)] + [b"retried", b"after"]
    assert offsets == list(range(7))


def test_a_new_leader_recognises_a_retry_of_a_batch_the_old_leader_acknowledged(tmp_path):
    with Cluster(nodes=3, data_dir=tmp_path / "cluster") as cluster:
        topic = f"idem-failover-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=1, replication_factor=3)
        assert cluster.wait_in_sync(topic)
        state = next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"][0]
        old_leader = state["leader"]
        address = (cluster.host, cluster.nodes[old_leader].port)
        init = exchange_once(address, InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1),
                             InitProducerIdResponse, 4)
        pid = init.producer_id
        assert produce(address, topic, pid, 0, b"first") == (0, 0)
        assert produce(address, topic, pid, 1, b"second") == (0, 1)

        cluster.kill_node(old_leader)  # the controller moves the leadership before this returns
        new_leader = next(t for t in cluster.status()["topics"] if t["name"] == topic)["partitions"][0]["leader"]
        assert new_leader != old_leader
        cluster.wait_ready([new_leader])  # it has applied its leadership (until then: NOT_LEADER_OR_FOLLOWER)
        address = (cluster.host, cluster.nodes[new_leader].port)
        # The producer never saw the answer for sequence 1 and retries it on the new leader.
        assert produce(address, topic, pid, 1, b"second") == (0, 1)
        assert produce(address, topic, pid, 2, b"third") == (0, 2)
        assert produce(address, topic, pid, 5, b"gap")[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert [v for _, v in read_values(f"{address[0]}:{address[1]}", topic)] == [b"first", b"second", b"third"]
