"""Client quotas as Kafka's ClientQuotaManager, ClientRequestQuotaManager and ConnectionQuotas keep them.

Quotas come from the metadata image (`image.client_quotas`, written as ClientQuotaRecords by
AlterClientQuotas). A client is known by its user (the session principal's name; ANONYMOUS on
PLAINTEXT) and its client id. Each quota key is resolved on its own, in Kafka's order of precedence:

    user + client-id, user + default client-id, user, default user + client-id,
    default user + default client-id, default user, client-id, default client-id

The entity that supplies a quota also says whose usage is counted against it, as Kafka's metric
tags do: a user's quota is shared by all that user's client ids, a default quota is applied to
each user or client id on its own.

Usage is a Rate over `quota.window.num` samples of `quota.window.size.seconds` each (Kafka's Rate
over a SampledStat): producer_byte_rate counts the produce request's record bytes,
consumer_byte_rate the fetch response's bytes, request_percentage the time the request's handler
runs (a percentage of one thread: 100 is one thread's whole time). A request that takes the rate
over its bound gets throttle_time_ms = (rate - bound) / bound * window, Kafka's QuotaUtils.throttleTime
(request and connection throttles capped at one window); the answer goes out at once and the
connection is muted for that time (KIP-219). The requests of a connection under a quota are
handled one at a time, as Kafka reads them; requests only nodes send each other are exempt.

Connections: `max.connection.creation.rate` bounds new connections to the node (each over it is
held unread for the throttle time, as Kafka's acceptor waits), and a connection_creation_rate
quota of an IP entity (or the default IP) bounds those from one address: one over it is closed
after the throttle time without being read, as Kafka's delayed close does.

With no quota configured a request costs one check (`limits_of`), and nothing per byte.
"""
from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass

from cluster.formats.listeners import broker_listeners, inter_broker_listener_name
from cluster.formats.segment import FileRegion
from node.spliced_response import EncodedResponse, SplicedResponse

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
UNLIMITED_CONNECTION_RATE = 2**31 - 1  # Kafka's default for max.connection.creation.rate

PRODUCE, FETCH, METADATA, ADD_PARTITIONS_TO_TXN = 0, 1, 3, 24
# WriteTxnMarkers and the share-state RPCs (Initialize/Read/Write/Delete/ReadSummary).
_BETWEEN_NODES = frozenset((27, 83, 84, 85, 86, 87))
_NANOS_TO_PERCENT = 100.0 / 1e9  # Kafka's NanosToPercentagePerSecond
_INT32 = struct.Struct(">i")
# Throttled connections whose turns are kept past their last request before those no longer
# throttled are looked for and dropped.
MAX_IDLE_TURNS = 1000
# Clients whose limits are kept resolved; past it they are resolved afresh (and idle rates dropped),
# so that clients making up new ids cannot grow the node's memory.
MAX_KNOWN_CLIENTS = 10_000


class Rate:
    """Kafka's Rate over a WindowedSum: the sum of the live samples over the time they cover."""

    __slots__ = ("samples", "current", "num", "window_ms")

    def __init__(self, num: int, window_ms: int):
        # each sample: [start ms, last event ms, value, event count]
        self.samples: list[list] = []
        self.current = 0
        self.num = num
        self.window_ms = window_ms

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current(now_ms)
        if now_ms - sample[0] >= self.window_ms:
            sample = self._advance(now_ms)
        sample[2] += value
        sample[3] += 1
        sample[1] = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        self._purge(now_ms)
        total = sum(sample[2] for sample in self.samples)
        return total / (self.window_size(now_ms) / 1000)

    def window_size(self, now_ms: int) -> int:
        """The time the rate is taken over: at least num - 1 whole windows, as Kafka assumes."""
        self._purge(now_ms)
        elapsed = now_ms - min(sample[0] for sample in self.samples) if self.samples else 0
        full_windows = elapsed // self.window_ms
        if full_windows < self.num - 1:
            elapsed += (self.num - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def idle_since(self, now_ms: int) -> bool:
        """Whether every sample has expired: the rate is as good as new."""
        return all(not sample[3] or now_ms - sample[1] >= self.num * self.window_ms for sample in self.samples)

    def _current(self, now_ms: int) -> list:
        if not self.samples:
            self.samples.append([now_ms, now_ms, 0.0, 0])
        return self.samples[self.current]

    def _advance(self, now_ms: int) -> list:
        # one more than num: the sample overlapping the window's start is kept
        self.current = (self.current + 1) % (self.num + 1)
        if self.current >= len(self.samples):
            self.samples.append([now_ms, now_ms, 0.0, 0])
        else:
            self.samples[self.current][:] = [now_ms, now_ms, 0.0, 0]
        return self.samples[self.current]

    def _purge(self, now_ms: int) -> None:
        expire = self.num * self.window_ms
        for sample in self.samples:
            if now_ms - sample[1] >= expire:
                sample[:] = [now_ms, now_ms, 0.0, 0]


def throttle_time_ms(rate: Rate, bound: float, now_ms: int, cap_ms: int | None = None) -> int:
    """0 while the rate is within its bound; else Kafka's QuotaUtils.throttleTime: how long until the
    rate, with nothing more recorded, is back at the bound."""
    measured = rate.measure(now_ms)
    if measured <= bound:
        return 0
    throttle = round((measured - bound) / bound * rate.window_size(now_ms))
    return throttle if cap_ms is None else min(throttle, cap_ms)


def precedence(user: str, client_id: str) -> list[tuple[tuple, tuple[str, str]]]:
    """The entities that may give this client a quota, first match wins, each with the usage key
    (user, client id; "" where the entity does not tell clients apart) its quota is counted on."""
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return [
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), user_only),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), user_only),
        (((CLIENT_ID, client_id),), client_only),
        (((CLIENT_ID, None),), client_only),
    ]


def resolve(client_quotas: dict, user: str, client_id: str, key: str) -> tuple[float, tuple[str, str]] | None:
    """(bound, usage key) of the quota `key` that applies to this client, or None."""
    for entity, usage_key in precedence(user, client_id):
        quotas = client_quotas.get(entity)
        if quotas is not None and key in quotas:
            return quotas[key], usage_key
    return None


@dataclass(slots=True)
class Limit:
    bound: float
    rate: Rate


class ClientLimits:
    """The quotas one (user, client id) is held to, and the rates they are counted on."""

    __slots__ = ("produce", "fetch", "request", "window_ms")

    def __init__(self, produce: Limit | None, fetch: Limit | None, request: Limit | None, window_ms: int):
        self.produce, self.fetch, self.request = produce, fetch, request
        self.window_ms = window_ms

    def timed(self, handling):
        """Await `handling`; under a request_percentage quota, the time its own steps run (a request's
        thread time: not the time it waits for replication or for data) is recorded on its rate."""
        return _Timed(handling, self.request.rate) if self.request is not None else handling

    def charge(self, api_key: int, version: int, request, response) -> tuple[int, object]:
        """Record this request's usage; returns (throttle ms, the response carrying it)."""
        now = int(time.time() * 1000)
        throttle = 0
        if api_key == PRODUCE and self.produce is not None:
            self.produce.rate.record(_produce_bytes(request), now)
            throttle = throttle_time_ms(self.produce.rate, self.produce.bound, now)
        elif api_key == FETCH and self.fetch is not None and response is not None:
            self.fetch.rate.record(_response_bytes(response, version), now)
            throttle = throttle_time_ms(self.fetch.rate, self.fetch.bound, now)
        if self.request is not None and not (api_key == PRODUCE and request.acks == 0):
            throttle = max(throttle, throttle_time_ms(self.request.rate, self.request.bound, now, self.window_ms))
        if throttle and response is not None:
            response = with_throttle_time(response, api_key, version, throttle)
        return throttle, response


class _Timed:
    __slots__ = ("coro", "rate", "nanos")

    def __init__(self, coro, rate: Rate):
        self.coro = coro
        self.rate = rate
        self.nanos = 0

    def __await__(self):
        try:
            return (yield from self._steps())
        finally:
            self.rate.record(self.nanos * _NANOS_TO_PERCENT, int(time.time() * 1000))

    def _steps(self):
        coro = self.coro
        value, error = None, None
        while True:
            started = time.perf_counter_ns()
            try:
                step = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                return done.value
            finally:
                self.nanos += time.perf_counter_ns() - started
            try:
                value, error = (yield step), None
            except BaseException as exc:  # (a cancellation goes on into the handler)
                value, error = None, exc


def _produce_bytes(request) -> int:
    return sum(len(data.records or b"") for topic in request.topic_data for data in topic.partition_data)


def _between_nodes(api_key: int, version: int, request) -> bool:
    """Requests only nodes send each other (Kafka's CLUSTER_ACTION ones), which no quota holds back:
    a follower's Fetch, transaction markers, AddPartitionsToTxn v4+, the share-state RPCs."""
    return (api_key in _BETWEEN_NODES or (api_key == ADD_PARTITIONS_TO_TXN and version >= 4)
            or (api_key == FETCH and _from_follower(request)))


def _from_follower(request) -> bool:
    replica = getattr(request, "replica_id", -1)
    state = getattr(request, "replica_state", None)
    if state is not None:
        replica = max(replica, state.replica_id)
    return replica >= 0


def _response_bytes(response, version: int) -> int:
    """The fetch answer's size: its record sets, which are nearly all of it (the rest is not
    encoded twice to count it)."""
    pieces = getattr(response, "pieces", None) or getattr(response, "blobs", None)
    if pieces is None:
        return len(response.encode(version=version))
    return sum(piece.count if type(piece) is FileRegion else len(piece) for piece in pieces)


def with_throttle_time(response, api_key: int, version: int, throttle_ms: int):
    """The response with its throttle_time_ms set; one whose schema has none is left alone."""
    if isinstance(response, EncodedResponse):
        return _encoded_with_throttle(response, api_key, version, throttle_ms)
    message = response.response if isinstance(response, SplicedResponse) else response
    if hasattr(message, "throttle_time_ms"):
        message.throttle_time_ms = throttle_ms
    return response


def _encoded_with_throttle(response, api_key: int, version: int, throttle_ms: int):
    """An answer encoded ahead (node.produce_answers, node.fetch_answers, a kept Metadata answer):
    a copy with the four bytes of throttle_time_ms replaced. Produce carries them after its
    responses, before the answer's tagged fields; Fetch and Metadata first. Others are left alone."""
    pieces = list(response.pieces)
    if api_key == PRODUCE:
        last = bytearray(pieces[-1])
        end = len(last) - (1 if version >= 9 else 0)
        last[end - 4:end] = _INT32.pack(throttle_ms)
        pieces[-1] = bytes(last)
    elif api_key in (FETCH, METADATA):
        pieces[0] = _INT32.pack(throttle_ms) + bytes(pieces[0][4:])
    else:
        return response
    return EncodedResponse(pieces)


class _Turns:
    """The requests of one connection under a quota, handled one at a time (Kafka reads a connection's
    next request only once the last is answered), none while the connection is throttled."""

    __slots__ = ("lock", "waiting", "muted_until")

    def __init__(self):
        self.lock = asyncio.Lock()
        self.waiting = 0
        self.muted_until = 0.0


class ClientQuotas:
    """A node's client quotas: the limits of each client, and the connection creation rates."""

    def __init__(self, broker):
        self.broker = broker
        config = broker.config
        self.samples = int(config.get("quota.window.num") or 11)
        self.window_ms = int(float(config.get("quota.window.size.seconds") or 1) * 1000)
        self.max_connection_rate = float(config.get("max.connection.creation.rate") or UNLIMITED_CONNECTION_RATE)
        self.connection_rate = Rate(self.samples, self.window_ms)
        # Kafka keeps the inter-broker listener out of the node's connection rate when there are others.
        listeners = [spec.name for spec in broker_listeners(config)]
        self.protected_listener = inter_broker_listener_name(config) if len(listeners) > 1 else None
        self.rates: dict[tuple, Rate] = {}  # (quota key, usage key) -> its rate
        self.limits: dict[tuple[str, str], ClientLimits | None] = {}  # (user, client id) -> ...
        self.resolved_at = -1  # image.changes the limits were resolved at
        self.turns: dict = {}  # session -> _Turns, while it has requests under a quota

    async def handle(self, limits: ClientLimits, handler, broker, header, request) -> tuple[int, object]:
        """Handle a request of a client under a quota: (throttle ms, the response carrying it).

        A client that pipelines gets its requests handled in turn, each after the throttle time of
        the one before: a burst read before the connection was muted is charged as Kafka would
        charge it, request by request, not all at once."""
        if _between_nodes(handler.api_key, header.api_version, request):
            return 0, await handler.handle(broker, header, request)
        turns = self.turns.get(header.session)
        if turns is None:
            turns = self.turns[header.session] = _Turns()
            if len(self.turns) > MAX_IDLE_TURNS:
                self._forget_idle_turns()
        turns.waiting += 1
        try:
            async with turns.lock:
                delay = turns.muted_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                response = await limits.timed(handler.handle(broker, header, request))
                throttle, response = limits.charge(handler.api_key, header.api_version, request, response)
                if throttle:
                    turns.muted_until = time.monotonic() + throttle / 1000
                return throttle, response
        finally:
            turns.waiting -= 1
            if not turns.waiting and turns.muted_until <= time.monotonic():
                del self.turns[header.session]

    def _forget_idle_turns(self) -> None:
        """Those of connections no longer throttled (or closed while they were)."""
        now = time.monotonic()
        for session in [s for s, turns in self.turns.items() if not turns.waiting and turns.muted_until <= now]:
            del self.turns[session]

    def limits_of(self, header) -> ClientLimits | None:
        """The limits of the client sending this request; None when no quota applies to it."""
        image = self.broker.image
        if not image.client_quotas:
            return None
        if image.changes != self.resolved_at or len(self.limits) > MAX_KNOWN_CLIENTS:
            self.limits.clear()
            self.resolved_at = image.changes
            self._forget_idle_rates()
        user = header.session.user if header.session is not None else "ANONYMOUS"
        client = (user, header.client_id or "")
        try:
            return self.limits[client]
        except KeyError:
            limits = self.limits[client] = self._resolve(image.client_quotas, *client)
            return limits

    def _resolve(self, client_quotas: dict, user: str, client_id: str) -> ClientLimits | None:
        found = [self._limit(client_quotas, user, client_id, key)
                 for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)]
        if not any(found):
            return None
        return ClientLimits(*found, window_ms=self.window_ms)

    def _limit(self, client_quotas: dict, user: str, client_id: str, key: str) -> Limit | None:
        quota = resolve(client_quotas, user, client_id, key)
        if quota is None:
            return None
        bound, usage_key = quota
        return Limit(bound, self._rate((key, usage_key)))

    def _rate(self, key: tuple) -> Rate:
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = Rate(self.samples, self.window_ms)
        return rate

    def _forget_idle_rates(self) -> None:
        now = int(time.time() * 1000)
        for key in [key for key, rate in self.rates.items() if rate.idle_since(now)]:
            del self.rates[key]

    # Connections.

    def admit(self, connection, client_host: str) -> None:
        """A new connection: held unread while the node's connection rate is over
        max.connection.creation.rate; closed after the throttle time if its IP's is over its quota."""
        now = int(time.time() * 1000)
        delay = 0
        if self.max_connection_rate < UNLIMITED_CONNECTION_RATE and connection.listener.name != self.protected_listener:
            self.connection_rate.record(1, now)
            delay = throttle_time_ms(self.connection_rate, self.max_connection_rate, now, self.window_ms)
        quotas = self.broker.image.client_quotas
        bound = self._ip_quota(quotas, client_host) if quotas else None
        if bound is not None:
            rate = self._rate((CONNECTION_CREATION_RATE, client_host))
            rate.record(1, now)
            refused = throttle_time_ms(rate, bound, now, self.window_ms)
            if refused:
                rate.record(-1, now)  # as Kafka does: a connection refused is not counted
                connection.close_after(refused)
                return
        if delay:
            connection.throttle(delay)

    @staticmethod
    def _ip_quota(client_quotas: dict, client_host: str) -> float | None:
        for entity in (((IP, client_host),), ((IP, None),)):
            quotas = client_quotas.get(entity)
            if quotas is not None and CONNECTION_CREATION_RATE in quotas:
                return quotas[CONNECTION_CREATION_RATE]
        return None
