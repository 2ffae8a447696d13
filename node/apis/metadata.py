"""Metadata v0-13: live brokers, topics, and the true leader of every partition.

Topics are named (or, v10+, asked by id); a null list (v1+) asks for all. Topics that do not
exist are created when the request allows it (always before v4) and auto.create.topics.enable is
set. A partition whose leader is not alive is LEADER_NOT_AVAILABLE.

Answers are encoded once per state of the metadata image and kept: while the image is unchanged,
a request for the same topics at the same version gets the bytes the first one got (clients ask
again and again, and an answer for thousands of partitions is slow to build). After a change,
each topic entry whose state (id, partitions, leaders, epochs, replicas, ISR, live brokers) is
unchanged is reused already encoded, so one leader change costs one topic's encoding. Every piece
is encoded by kafka-python's MetadataResponse; only the topic array is joined from entries
encoded one at a time.

With an authorizer (node.security.authorizer), asking for every topic lists those the principal may
DESCRIBE; a topic named that it may not describe is TOPIC_AUTHORIZATION_FAILED, as is one that
would be auto-created without CREATE on the cluster or on the topic; cluster and topic authorized
operations are filled in when asked for (answers with them are built for the request, not kept;
with no authorizer, every operation is allowed, as Kafka answers). A topic asked for by id that the
principal may not describe is answered by its id alone, without its name.

Same as Kafka.
"""
from __future__ import annotations

import logging

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool, Int32, UnsignedVarInt32

from cluster.formats.acls import CLUSTER, CREATE, DESCRIBE, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_names import INTERNAL_TOPICS, topic_name_error
from node.groups import placement
from node.security import authorizer
from node.spliced_response import EncodedResponse

REQUEST = MetadataRequest
RESPONSE = MetadataResponse
VERSIONS = (0, 13)
AUTHORIZED_OPERATIONS_OMITTED = None  # encoded as Kafka's "not requested" value, -2147483648
EMPTY_TAGGED_FIELDS = b"\x00"  # what a flexible version ends with when it sets no tagged field
TOPIC_ENTRY = RESPONSE.MetadataResponseTopic._struct.array_of  # one element of the topic array

log = logging.getLogger(__name__)


async def handle(broker, header, request):
    version = header.api_version
    names, unknown_ids = _requested_topics(broker, request, version)
    if broker.authorizer is not None or (version >= 8 and (request.include_topic_authorized_operations or (
            version <= 10 and request.include_cluster_authorized_operations))):
        return await _authorized_answer(broker, header, request, names, tuple(unknown_ids))
    if names is not None and _may_auto_create(broker, request, version):
        await _auto_create(broker, [n for n in names if broker.topic(n) is None and topic_name_error(n) is None])
    names = None if names is None else tuple(names)
    answers = answers_of(broker, header.session.listener.name)
    return EncodedResponse([answers.body(version, names, tuple(unknown_ids))])


async def _authorized_answer(broker, header, request, names: list[str] | None, unknown_ids: tuple):
    """Kafka's answer with an authorizer: of every topic, those the principal may DESCRIBE; a topic
    named that it may not is TOPIC_AUTHORIZATION_FAILED, as is one to be auto-created without CREATE
    on the cluster or the topic. Authorized operations are filled in when asked for."""
    version = header.api_version
    refused: list[tuple[str | None, object]] = []  # (name, or None and the id when asked for by id)
    if names is None:
        denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, broker.image.topics)
        names = sorted(name for name in broker.image.topics if name not in denied)
    else:
        denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, names)
        asked_by_id = _asked_by_id(broker, request) if denied else {}
        refused = [(None, asked_by_id[name]) if name in asked_by_id else (name, None) for name in names
                   if name in denied]
        names = [name for name in names if name not in denied]
        missing = [n for n in names if broker.topic(n) is None and topic_name_error(n) is None]
        if missing and _may_auto_create(broker, request, version):
            if not authorizer.allowed(broker, header, CREATE):
                not_creatable = authorizer.denied(broker, header, CREATE, TOPIC, missing)
                refused += [(name, None) for name in missing if name in not_creatable]
                names = [name for name in names if name not in not_creatable]
                missing = [name for name in missing if name not in not_creatable]
            await _auto_create(broker, missing)
    listener = header.session.listener.name
    topic_operations = version >= 8 and request.include_topic_authorized_operations
    cluster_operations = 8 <= version <= 10 and request.include_cluster_authorized_operations
    if not (topic_operations or cluster_operations):
        return EncodedResponse([answers_of(broker, listener).body(version, tuple(names), unknown_ids, tuple(refused))])
    topics = [_describe_topic(broker, name, version) for name in names]
    if topic_operations:
        for topic in topics:
            topic.authorized_operations = authorizer.authorized_operations(broker, header, TOPIC, topic.name)
    response = _response(broker, listener, version, topics + [_unknown_topic_id(t) for t in unknown_ids]
                         + [_refused_topic(*entry) for entry in refused])
    if cluster_operations:
        response.authorized_operations = authorizer.authorized_operations(broker, header, CLUSTER)
    return EncodedResponse([response.encode(version=version)])


def answers_of(broker, listener: str) -> "MetadataAnswers":
    """The node's kept answers for clients of `listener` (made with its first Metadata request on
    that listener, and kept by its broker): each listener's name the brokers' addresses on it."""
    answers = broker.metadata_answers.get(listener)
    if answers is None:
        answers = broker.metadata_answers[listener] = MetadataAnswers(broker, listener)
    return answers


class MetadataAnswers:
    """One node's encoded Metadata answers and topic entries, and the image state they hold for."""

    # Distinct (version, topics asked) answers kept per image state: clients mostly ask for all
    # topics or for the same few, and an answer for every topic of a large cluster is big.
    MAX_BODIES = 16

    def __init__(self, broker, listener: str):
        self.broker = broker
        self.listener = listener
        self._stamp = None  # (image changes, cluster id) the bodies were encoded at
        self._bodies: dict[tuple, bytes] = {}
        self._live: tuple[int, ...] | None = None  # live brokers the topic entries were encoded with
        self._entries: dict[tuple[int, str], tuple[tuple, bytes]] = {}  # (version, name) -> (state, bytes)

    def body(self, version: int, names: tuple[str, ...] | None, unknown_ids: tuple, refused: tuple = ()) -> bytes:
        """The encoded answer to a request for names (None: every topic), unknown topic ids and
        topics the principal may not describe."""
        self._forget_if_changed()
        key = (version, names, unknown_ids, refused)
        body = self._bodies.get(key)
        if body is None:
            if len(self._bodies) >= self.MAX_BODIES:
                self._bodies.clear()
            body = self._bodies[key] = self._encode(version, names, unknown_ids, refused)
        return body

    def _forget_if_changed(self) -> None:
        image = self.broker.image
        stamp = (image.changes, image.cluster_id)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._bodies.clear()
        live = tuple(self.broker.live_broker_ids())
        # Liveness decides leaders and offline replicas of every entry; deleted topics' entries
        # go once they could outnumber the live ones.
        if live != self._live or len(self._entries) > 4 * len(image.topics) + 1000:
            self._live = live
            self._entries.clear()

    def _encode(self, version: int, names: tuple[str, ...] | None, unknown_ids: tuple, refused: tuple) -> bytes:
        broker = self.broker
        flexible = RESPONSE.flexible_version_q(version)
        entries = [self._topic_entry(version, name, flexible)
                   for name in (sorted(broker.image.topics) if names is None else names)]
        entries += [_encode_topic(_unknown_topic_id(topic_id), version, flexible) for topic_id in unknown_ids]
        entries += [_encode_topic(_refused_topic(*entry), version, flexible) for entry in refused]
        head, tail = _around_topics(_response(broker, self.listener, version, topics=[]), version, flexible)
        count = UnsignedVarInt32.encode(len(entries) + 1) if flexible else Int32.encode(len(entries))
        return b"".join([head, count, *entries, tail])

    def _topic_entry(self, version: int, name: str, flexible: bool) -> bytes:
        state = _topic_state(self.broker.topic(name))
        kept = self._entries.get((version, name))
        if kept is not None and kept[0] == state:
            return kept[1]
        entry = _encode_topic(_describe_topic(self.broker, name, version), version, flexible)
        if state is not None:
            self._entries[(version, name)] = (state, entry)
        return entry


def _encode_topic(topic, version: int, flexible: bool) -> bytes:
    with EncodeBufferPool.acquire() as out:
        TOPIC_ENTRY.compiled_encode_into(version, compact=flexible, tagged=flexible)(topic, out)
        return out.result()


def _topic_state(info) -> tuple | None:
    """All of a topic's state its Metadata entry shows, but for liveness (None: no such topic)."""
    if info is None:
        return None
    return info.topic_id, tuple((p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr))
                                for p in info.partitions.values())


def _response(broker, listener: str, version: int, topics: list):
    endpoints = ((node_id, broker.endpoint_of(node_id, listener)) for node_id in broker.live_broker_ids())
    return RESPONSE[version](
        throttle_time_ms=0,
        brokers=[_broker_entry(node_id, *endpoint) for node_id, endpoint in endpoints if endpoint],
        cluster_id=broker.cluster_id,
        # In KRaft the real controller is hidden from clients: admin clients send
        # controller-only requests to this id, so it must be a live broker.
        controller_id=broker.node_id,
        topics=topics,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=ErrorCode.NONE,
    )


def _around_topics(response, version: int, flexible: bool) -> tuple[bytes, bytes]:
    """An answer with no topics, encoded, split around its empty topic array."""
    encoded = response.encode(version=version)
    fields = RESPONSE._struct.untagged_fields(version)
    after_topics = fields[[f.name for f in fields].index("topics") + 1:]
    tail = b"".join(f.encode(getattr(response, f.name), version=version, compact=flexible, tagged=flexible)
                    for f in after_topics) + (EMPTY_TAGGED_FIELDS if flexible else b"")
    empty_array = UnsignedVarInt32.encode(1) if flexible else Int32.encode(0)
    assert encoded.endswith(empty_array + tail), "unexpected Metadata response layout"
    return encoded[:len(encoded) - len(empty_array) - len(tail)], tail


def _requested_topics(broker, request, version):
    """Names asked for (None = all topics) and topic ids that matched nothing."""
    if request.topics is None or (version == 0 and not request.topics):
        return None, []
    names, unknown_ids = [], []
    for topic in request.topics:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None and topic_id is not None and topic_id.int != 0:
            info = broker.topic_by_id(topic_id)
            if info is None:
                unknown_ids.append(topic_id)
                continue
            name = info.name
        if name is not None and name not in names:
            names.append(name)
    return names, unknown_ids


def _may_auto_create(broker, request, version) -> bool:
    allowed = True if version < 4 else request.allow_auto_topic_creation
    return allowed and broker.config.get_bool("auto.create.topics.enable")


async def _auto_create(broker, names: list[str]) -> None:
    if not names:
        return
    topics = [_topic_to_create(broker, name) for name in names]
    try:
        await broker.call_controller("create_topics", topics=topics, validate_only=False)
    except Exception as exc:  # the response then says UNKNOWN_TOPIC_OR_PARTITION and the client retries
        log.warning("auto-creating %s failed: %s", names, exc)


def _topic_to_create(broker, name: str) -> dict:
    # Kafka's AutoTopicCreationManager creates the offsets topic as a group's first use would
    # (Burrow, for one, asks for it before any group exists).
    if name == placement.OFFSETS_TOPIC:
        return placement.topic_to_create(broker.config, len(broker.live_broker_ids()))
    return {"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": None, "configs": {}}


def _broker_entry(node_id: int, host: str, port: int, rack: str | None):
    return RESPONSE.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)


def _describe_topic(broker, name: str, version: int):
    Topic = RESPONSE.MetadataResponseTopic
    info = broker.topic(name)
    if info is None:
        error = topic_name_error(name) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return Topic(error_code=error, name=name, is_internal=False, partitions=[],
                     authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    return Topic(
        error_code=ErrorCode.NONE,
        name=name,
        topic_id=info.topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=[_describe_partition(broker, p) for _, p in sorted(info.partitions.items())],
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _describe_partition(broker, info):
    alive = broker.is_alive(info.leader)
    return RESPONSE.MetadataResponseTopic.MetadataResponsePartition(
        error_code=ErrorCode.NONE if alive else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=info.partition,
        leader_id=info.leader if alive else -1,
        leader_epoch=info.leader_epoch,
        replica_nodes=list(info.replicas),
        isr_nodes=list(info.isr),
        offline_replicas=[r for r in info.replicas if not broker.is_alive(r)],
    )


def _asked_by_id(broker, request) -> dict:
    """{name: topic id} of the known topics the request names by id only."""
    asked = {}
    for topic in request.topics or ():
        topic_id = getattr(topic, "topic_id", None)
        if getattr(topic, "name", None) is None and topic_id is not None and (info := broker.topic_by_id(topic_id)):
            asked[info.name] = topic_id
    return asked


def _refused_topic(name: str | None, topic_id=None):
    """A topic the principal may not describe: by name, or (asked for by id) by id alone, as Kafka
    answers (a topic's id is not secret, its name is)."""
    return RESPONSE.MetadataResponseTopic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
        partitions=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _unknown_topic_id(topic_id):
    return RESPONSE.MetadataResponseTopic(
        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, is_internal=False,
        partitions=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
