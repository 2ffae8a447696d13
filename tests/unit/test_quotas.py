"""Client quotas (node.security.quotas, controller.client_quotas, node.apis.describe_client_quotas):
Kafka's Rate over samples, its throttle times, the order of precedence of quota entities, the
throttle time written into answers encoded ahead, and AlterClientQuotas' checks."""
from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from kafka.protocol.admin import DescribeClientQuotasRequest
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage, quota_entity
from controller.client_quotas import alter_client_quotas
from node.apis import describe_client_quotas, produce
from node.security.quotas import (
    ClientQuotas, Rate, precedence, resolve, throttle_time_ms, with_throttle_time,
)
from node.security.session import PLAINTEXT_LISTENER, Session
from node.server import RequestHeader
from node.spliced_response import EncodedResponse


# Rates, as Kafka's Rate over a WindowedSum measures them.

def test_a_rate_is_taken_over_at_least_all_but_one_of_its_windows():
    rate = Rate(num=11, window_ms=1000)
    rate.record(1000, 0)
    assert rate.window_size(0) == 10_000  # nothing elapsed: 10 whole windows assumed
    assert rate.measure(0) == 100.0
    rate.record(1000, 5_500)
    assert rate.window_size(5_500) == 10_500  # 5 whole windows elapsed, 5 more assumed
    assert rate.measure(5_500) == pytest.approx(2000 / 10.5)
    rate.record(2000, 12_000)
    # the first sample (last event at 0) has expired: 6.5 s since the second began, 4 windows assumed
    assert rate.window_size(12_000) == 10_500
    assert rate.measure(12_000) == pytest.approx(3000 / 10.5)


def test_samples_expire_once_a_whole_span_of_windows_has_passed_without_them():
    rate = Rate(num=2, window_ms=1000)
    rate.record(5000, 0)
    assert rate.measure(1_999) == pytest.approx(5000 / 1.999)
    assert rate.measure(2_000) == 0.0  # its last event is 2 windows old: it is gone
    assert rate.idle_since(2_000)


def test_a_new_sample_starts_once_a_window_has_passed_and_the_oldest_is_reused():
    rate = Rate(num=2, window_ms=1000)
    for at in (0, 1000, 2000, 3000):
        rate.record(100, at)
    assert len(rate.samples) == 3  # num + 1: the one overlapping the span's start is kept
    assert sorted(sample[0] for sample in rate.samples) == [1000, 2000, 3000]


def test_the_throttle_time_brings_the_rate_back_to_its_bound():
    rate = Rate(num=2, window_ms=1000)
    rate.record(300, 0)
    assert throttle_time_ms(rate, 1000, 0) == 0
    rate.record(1700, 0)  # 2000 over a 1 s window: twice the bound
    assert throttle_time_ms(rate, 1000, 0) == 1000  # (2000 - 1000) / 1000 * 1000 ms
    rate.record(3000, 0)
    assert throttle_time_ms(rate, 1000, 0) == 4000
    assert throttle_time_ms(rate, 1000, 0, cap_ms=1000) == 1000  # request and connection throttles


# Which entity's quota a client gets.

ALL_LEVELS = [
    ((("client-id", "app"), ("user", "alice")), 1.0, ("alice", "app")),
    ((("client-id", None), ("user", "alice")), 2.0, ("alice", "app")),
    ((("user", "alice"),), 3.0, ("alice", "")),
    ((("client-id", "app"), ("user", None)), 4.0, ("alice", "app")),
    ((("client-id", None), ("user", None)), 5.0, ("alice", "app")),
    ((("user", None),), 6.0, ("alice", "")),
    ((("client-id", "app"),), 7.0, ("", "app")),
    ((("client-id", None),), 8.0, ("", "app")),
]


def test_entities_are_tried_in_kafkas_order_of_precedence():
    quotas = {entity: {"producer_byte_rate": value} for entity, value, _ in ALL_LEVELS}
    for entity, value, usage_key in ALL_LEVELS:
        assert resolve(quotas, "alice", "app", "producer_byte_rate") == (value, usage_key)
        del quotas[entity]
    assert resolve(quotas, "alice", "app", "producer_byte_rate") is None
    # the image's keys are the entities as quota_entity sorts them
    assert [entity for entity, _ in precedence("alice", "app")] == [
        quota_entity(entity) for entity, _, _ in ALL_LEVELS]


def test_each_quota_key_is_resolved_on_its_own():
    quotas = {(("user", "alice"),): {"producer_byte_rate": 100.0},
              (("client-id", "app"),): {"consumer_byte_rate": 200.0, "producer_byte_rate": 300.0}}
    assert resolve(quotas, "alice", "app", "producer_byte_rate") == (100.0, ("alice", ""))
    assert resolve(quotas, "alice", "app", "consumer_byte_rate") == (200.0, ("", "app"))
    assert resolve(quotas, "bob", "app", "producer_byte_rate") == (300.0, ("", "app"))
    assert resolve(quotas, "bob", "other", "request_percentage") is None


class Node:
    """What ClientQuotas reads of a node: its config and its metadata image."""

    def __init__(self, **config):
        self.config = BrokerConfig(config)
        self.image = MetadataImage()


def header(client_id: str, principal: str = "User:ANONYMOUS") -> RequestHeader:
    session = Session(PLAINTEXT_LISTENER, "127.0.0.1", principal)
    return RequestHeader(0, 9, 1, client_id, session=session)


def set_quota(node: Node, entity: tuple, key: str, value: float) -> None:
    node.image.apply(node.image.offset + 1, "ClientQuotaRecord", {
        "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
        "key": key, "value": value, "remove": False})


def test_clients_without_a_quota_have_no_limits_and_those_sharing_an_entity_share_its_rate():
    node = Node()
    quotas = ClientQuotas(node)
    assert quotas.limits_of(header("app")) is None
    set_quota(node, (("user", "alice"),), "producer_byte_rate", 1000.0)
    assert quotas.limits_of(header("app")) is None  # ANONYMOUS has none
    first = quotas.limits_of(header("app", "User:alice"))
    second = quotas.limits_of(header("other", "User:alice"))
    assert first.produce.bound == 1000.0 and first.fetch is None and first.request is None
    assert first.produce.rate is second.produce.rate  # alice's quota counts all her client ids
    set_quota(node, (("user", None),), "producer_byte_rate", 500.0)
    bob, carol = quotas.limits_of(header("app", "User:bob")), quotas.limits_of(header("app", "User:carol"))
    assert bob.produce.bound == 500.0 and bob.produce.rate is not carol.produce.rate  # a default: each his own


def test_the_window_comes_from_the_broker_config():
    node = Node(**{"quota.window.num": "3", "quota.window.size.seconds": "2"})
    set_quota(node, (("client-id", None),), "request_percentage", 50.0)
    limits = ClientQuotas(node).limits_of(header("app"))
    assert (limits.request.rate.num, limits.request.rate.window_ms, limits.window_ms) == (3, 2000, 2000)


def test_produce_bytes_are_charged_and_the_answer_carries_the_throttle_time():
    node = Node(**{"quota.window.num": "2"})
    set_quota(node, (("client-id", "app"),), "producer_byte_rate", 1000.0)
    limits = ClientQuotas(node).limits_of(header("app"))
    request = produce.REQUEST[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        produce.REQUEST[9].TopicProduceData(name="t", partition_data=[
            produce.REQUEST[9].TopicProduceData.PartitionProduceData(index=0, records=b"x" * 3000)])])
    answer = produce.response_of([("t", uuid.UUID(int=1), [])], 9, [])
    throttle, answer = limits.charge(0, 9, request, answer)
    assert 1900 <= throttle <= 2000  # 3000 bytes over at most a 1 s window: twice the bound over
    wire = b"".join(answer.encode_pieces(9))
    assert ProduceResponse.decode(wire, version=9).throttle_time_ms == throttle


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_the_throttle_time_is_written_into_produce_answers_encoded_ahead(version):
    name = "t" if version < 13 else None
    answer = produce.response_of([(name, uuid.UUID(int=1), [{
        "index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0,
        "record_errors": [], "error_message": None}])], version, [])
    assert isinstance(answer, EncodedResponse)
    throttled = with_throttle_time(answer, 0, version, 1234)
    decoded = ProduceResponse.decode(b"".join(throttled.encode_pieces(version)), version=version)
    assert (decoded.throttle_time_ms, decoded.responses[0].partition_responses[0].base_offset) == (1234, 5)
    assert ProduceResponse.decode(b"".join(answer.encode_pieces(version)), version=version).throttle_time_ms == 0


def test_a_kept_metadata_answer_is_copied_not_changed():
    body = bytes(MetadataResponse[9](throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=[]).encode(version=9))
    kept = EncodedResponse([body])
    throttled = with_throttle_time(kept, 3, 9, 77)
    assert MetadataResponse.decode(throttled.pieces[0], version=9).throttle_time_ms == 77
    assert kept.pieces == [body]


# AlterClientQuotas, as Kafka's ClientQuotaControlManager checks it.

def alter(image: MetadataImage, entity: list, *ops) -> tuple[int, str | None, list]:
    outcome = asyncio.run(alter_client_quotas(image, [{"entity": entity, "ops": list(ops)}]))
    (result,) = outcome.results
    return result["error_code"], result["error_message"], outcome.records


@pytest.mark.parametrize("entity, op, message", [
    ([], ["producer_byte_rate", 1.0, False], "Invalid empty client quota entity"),
    ([["user", "a"], ["user", "b"]], ["producer_byte_rate", 1.0, False],
     "Invalid client quota entity, duplicate entity entry user"),
    ([["topic", "a"]], ["producer_byte_rate", 1.0, False], "Unhandled client quota entity type: topic"),
    ([["client-id", ""]], ["producer_byte_rate", 1.0, False], "Empty client-id not supported"),
    ([["user", "a"]], ["connection_creation_rate", 1.0, False], "Invalid configuration key connection_creation_rate"),
    ([["ip", None]], ["producer_byte_rate", 1.0, False], "Invalid configuration key producer_byte_rate"),
    ([["user", "a"]], ["request_percentage", -1.0, False], "Quota request_percentage must be greater than 0"),
    ([["user", "a"]], ["consumer_byte_rate", 2.5, False], "consumer_byte_rate cannot be a fractional value."),
    ([["ip", "1.2.3.4"]], ["connection_creation_rate", 2.0**31, False],
     "Proposed value for connection_creation_rate is too large for an INT."),
    ([["user", "a"]], ["producer_byte_rate", 2.0**64, False],
     "Proposed value for producer_byte_rate is too large for a LONG."),
])
def test_alterations_kafka_refuses(entity, op, message):
    assert alter(MetadataImage(), entity, op) == (ErrorCode.INVALID_REQUEST, message, [])


def test_alterations_write_what_changes_and_only_that():
    image = MetadataImage()
    code, _, records = alter(image, [["user", "a"], ["client-id", None]], ["producer_byte_rate", 10.0, False],
                             ["request_percentage", 0.0, True])
    assert code == 0
    assert records == [("ClientQuotaRecord", {
        "entity": [{"entity_type": "user", "entity_name": "a"}, {"entity_type": "client-id", "entity_name": None}],
        "key": "producer_byte_rate", "value": 10.0, "remove": False})]  # nothing to remove
    for offset, (name, fields) in enumerate(records):
        image.apply(offset, name, fields)
    assert image.client_quotas == {(("client-id", None), ("user", "a")): {"producer_byte_rate": 10.0}}
    assert alter(image, [["client-id", None], ["user", "a"]], ["producer_byte_rate", 10.0, False]) == (0, None, [])
    code, _, records = alter(image, [["user", "a"], ["client-id", None]], ["producer_byte_rate", 0.0, True])
    assert [fields["remove"] for _, fields in records] == [True]


def test_a_key_or_an_entity_given_twice_is_refused():
    outcome = asyncio.run(alter_client_quotas(MetadataImage(), [
        {"entity": [["user", "a"]], "ops": [["producer_byte_rate", 1.0, False], ["producer_byte_rate", 2.0, False]]},
        {"entity": [["user", "b"]], "ops": [["producer_byte_rate", 1.0, False]]},
        {"entity": [["user", "b"]], "ops": [["consumer_byte_rate", 1.0, False]]},
    ]))
    assert [(r["entity"], r["error_code"], r["error_message"]) for r in outcome.results] == [
        ([["user", "a"]], ErrorCode.INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})"),
        ([["user", "b"]], ErrorCode.INVALID_REQUEST, "Ignoring duplicate entity ClientQuotaEntity(entries={user=b})"),
    ]
    assert len(outcome.records) == 1  # b's first alteration is written, as Kafka writes it


# DescribeClientQuotas' filters.

def describe(image: MetadataImage, components: list, strict: bool = False):
    C = DescribeClientQuotasRequest[1].ComponentData
    request = DescribeClientQuotasRequest[1](strict=strict, components=[
        C(entity_type=kind, match_type=match_type, match=match) for kind, match_type, match in components])

    class Broker:
        pass
    broker = Broker()
    broker.image = image
    broker.authorizer = None
    response = asyncio.run(describe_client_quotas.handle(broker, RequestHeader(48, 1, 1, "t"), request))
    if response.error_code:
        return response.error_code, response.error_message
    return [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in response.entries]


def test_describe_filters_as_kafka_does():
    image = MetadataImage()
    for entity in ((("user", "a"),), (("client-id", "x"), ("user", "a")), (("client-id", None),), (("ip", None),)):
        image.client_quotas[entity] = {"request_percentage": 1.0}
    assert describe(image, [("user", 0, "a")]) == [[("client-id", "x"), ("user", "a")], [("user", "a")]]
    assert describe(image, [("user", 0, "a")], strict=True) == [[("user", "a")]]
    assert describe(image, [("client-id", 1, None)]) == [[("client-id", None)]]
    assert describe(image, [("client-id", 2, None)]) == [[("client-id", None)], [("client-id", "x"), ("user", "a")]]
    assert describe(image, [("ip", 2, None), ("user", 2, None)]) == (
        ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter component should not "
                                   "be used with user or clientId filter component.")
    assert describe(image, [("user", 0, None)]) == (
        ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert describe(image, [("group", 2, None)]) == (ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group")
    assert len(describe(image, [])) == 4


# Muting a connection (node.client_connection), over a real loopback socket.

def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_a_throttled_connection_is_read_again_only_after_the_throttle_time_and_a_refused_one_is_closed():
    import uvloop

    from node.client_connection import ClientConnection

    async def main():
        loop = asyncio.get_running_loop()
        started: list[float] = []
        connections: set = set()
        refused: list = []

        def start_request(request: memoryview, _session):
            started.append(loop.time())
            answer = loop.create_future()
            answer.set_result([frame(bytes(request))])
            return answer

        def new_connection():
            connection = ClientConnection(start_request, 1 << 20, connections)
            connection.admit = lambda c, host: refused and c.close_after(refused[0])
            return connection

        server = await loop.create_server(new_connection, "127.0.0.1", 0)
        async with server:
            address = server.sockets[0].getsockname()[:2]
            reader, writer = await asyncio.open_connection(*address)
            writer.write(frame(b"one"))
            assert await reader.readexactly(7) == frame(b"one")
            next(iter(connections)).throttle(300)
            writer.write(frame(b"two"))
            assert await asyncio.wait_for(reader.readexactly(7), 5) == frame(b"two")
            muted_for = started[1] - started[0]
            writer.close()

            refused.append(200)
            reader, writer = await asyncio.open_connection(*address)
            opened = loop.time()
            writer.write(frame(b"three"))
            closed_with = await asyncio.wait_for(reader.read(), 5)
            closed_after = loop.time() - opened
            writer.close()
        return muted_for, closed_with, closed_after, len(started)

    muted_for, closed_with, closed_after, requests = uvloop.run(main())
    assert muted_for >= 0.29
    assert (closed_with, requests) == (b"", 2)  # never read: nothing started
    assert closed_after >= 0.19


# Requests under a quota, handled by ClientQuotas.handle.

class Handler:
    """An API handler that answers at once, noting when each request began."""

    def __init__(self, api_key: int, answer):
        self.api_key = api_key
        self.answer = answer
        self.began: list[float] = []

    async def handle(self, broker, header, request):
        self.began.append(asyncio.get_running_loop().time())
        return self.answer


def test_a_followers_fetch_is_not_charged_and_a_pipelined_burst_is_handled_in_turn():
    node = Node(**{"quota.window.num": "2"})
    set_quota(node, (("client-id", None),), "consumer_byte_rate", 1000.0)
    quotas = ClientQuotas(node)
    client = header("app")
    limits = quotas.limits_of(client)
    answer = EncodedResponse([bytes(4) + b"x" * 1996])  # a Fetch answer of 2000 bytes: twice the rate
    fetch = Handler(1, answer)

    async def main():
        follower = await quotas.handle(limits, fetch, node, client, SimpleNamespace(replica_id=2))
        burst = await asyncio.gather(*(quotas.handle(limits, fetch, node, client, SimpleNamespace(replica_id=-1))
                                       for _ in range(2)))
        return follower, burst

    (follower_throttle, _), burst = asyncio.run(main())
    assert follower_throttle == 0
    # 2000 bytes over 1 s (all but one window assumed), then 4000 over the 1 s since the first began
    assert burst[0][0] == 1000 and 2950 <= burst[1][0] <= 3000
    assert int.from_bytes(burst[0][1].pieces[0][:4], "big") == 1000
    # the second of the burst waited out the first one's throttle time
    assert fetch.began[2] - fetch.began[1] >= 0.99
    assert list(quotas.turns) == [client.session]  # kept while the last throttle time runs


class Arrival:
    """What ClientQuotas.admit asks of a new connection: its listener, and to wait or be closed."""

    def __init__(self, listener: str):
        self.listener = SimpleNamespace(name=listener)
        self.held_ms = self.closed_after_ms = 0

    def throttle(self, delay_ms: int) -> None:
        self.held_ms = delay_ms

    def close_after(self, delay_ms: int) -> None:
        self.closed_after_ms = delay_ms


def test_new_connections_over_the_nodes_rate_wait_and_those_over_their_ips_quota_are_refused():
    node = Node(**{"quota.window.num": "2", "max.connection.creation.rate": "2",
                   "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                   "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                   "inter.broker.listener.name": "INTERNAL"})
    quotas = ClientQuotas(node)
    arrivals = [Arrival("EXTERNAL") for _ in range(3)] + [Arrival("INTERNAL")]
    for arrival in arrivals:
        quotas.admit(arrival, "10.0.0.1")
    # the third in a second is one over 2 a second: held (3 - 2) / 2 of the 1 s window
    assert [a.held_ms for a in arrivals] == [0, 0, 500, 0]  # the inter-broker listener is left out
    set_quota(node, (("ip", None),), "connection_creation_rate", 1.0)
    set_quota(node, (("ip", "10.0.0.9"),), "connection_creation_rate", 100.0)
    first, second, named = Arrival("INTERNAL"), Arrival("INTERNAL"), Arrival("INTERNAL")
    quotas.admit(first, "10.0.0.2")
    quotas.admit(second, "10.0.0.2")
    quotas.admit(named, "10.0.0.9")
    assert [(a.closed_after_ms, a.held_ms) for a in (first, second, named)] == [(0, 0), (1000, 0), (0, 0)]
