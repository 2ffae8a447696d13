"""FindCoordinator v0-6: the leader of a group's `__consumer_offsets` partition, of a transactional
id's `__transaction_state` partition, or of a share-partition's `__share_group_state` partition (each
topic created on first use).

One key (v0-3) or a batch of keys (v4+). Key types: GROUP (0), TRANSACTION (1) and, from v6, SHARE
(2), whose key is "groupId:topicId:partition" (a malformed one is INVALID_REQUEST, as is any other
key type). The topic is created through the controller when the first key of its type is looked
up; until its partition has a leader the answer is COORDINATOR_NOT_AVAILABLE and clients retry.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the group or the
transactional id; a share-state key, CLUSTER_ACTION on the cluster; what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

import logging

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from cluster.formats.acls import CLUSTER_ACTION, DESCRIBE, GROUP, TRANSACTIONAL_ID
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_from_kafka_string
from node.groups import placement
from node.security import authorizer
from node.share_coordinator import placement as share_placement
from node.transactions import placement as transaction_placement

REQUEST = FindCoordinatorRequest
RESPONSE = FindCoordinatorResponse
VERSIONS = (0, 6)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
FIRST_SHARE_VERSION = 6

log = logging.getLogger(__name__)


async def handle(broker, header, request):
    version = header.api_version
    keys = request.coordinator_keys if version >= 4 else [request.key]
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    if key_type == GROUP_KEY_TYPE and broker.topic(placement.OFFSETS_TOPIC) is None:
        await _create_topic(broker, placement.topic_to_create(broker.config, len(broker.live_broker_ids())))
    elif key_type == TRANSACTION_KEY_TYPE and broker.topic(transaction_placement.TRANSACTION_STATE_TOPIC) is None:
        await _create_topic(broker, transaction_placement.topic_to_create(broker.config, len(broker.live_broker_ids())))
    elif key_type == SHARE_KEY_TYPE and version >= FIRST_SHARE_VERSION \
            and broker.topic(share_placement.SHARE_STATE_TOPIC) is None:
        await _create_topic(broker, share_placement.topic_to_create(broker.config, len(broker.live_broker_ids())))
    if key_type == SHARE_KEY_TYPE and not authorizer.allowed(broker, header, CLUSTER_ACTION):
        return authorizer.refusal(broker, header, request, RESPONSE, CLUSTER_ACTION)
    listener = header.session.listener.name
    found = [_refused(broker, header, key, key_type) or _locate(broker, key, key_type, version, listener)
             for key in keys]
    if version >= 4:
        return RESPONSE[version](throttle_time_ms=0, coordinators=[
            RESPONSE.Coordinator(key=key, node_id=node, host=host, port=port, error_code=code, error_message=None)
            for key, (code, node, host, port) in zip(keys, found)])
    code, node, host, port = found[0]
    return RESPONSE[version](throttle_time_ms=0, error_code=code, error_message=None, node_id=node, host=host,
                             port=port)


def _refused(broker, header, key: str, key_type: int) -> tuple[ErrorCode, int, str, int] | None:
    """As Kafka: a group's coordinator needs DESCRIBE on the group, a transaction's on its id."""
    if key_type == GROUP_KEY_TYPE and not authorizer.allowed(broker, header, DESCRIBE, GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, "", -1
    if key_type == TRANSACTION_KEY_TYPE and not authorizer.allowed(broker, header, DESCRIBE, TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1
    return None


def _locate(broker, key: str, key_type: int, version: int, listener: str) -> tuple[ErrorCode, int, str, int]:
    if key_type == GROUP_KEY_TYPE:
        info = broker.partition(placement.OFFSETS_TOPIC, broker.groups.partition_of(key))
    elif key_type == TRANSACTION_KEY_TYPE:
        info = broker.partition(transaction_placement.TRANSACTION_STATE_TOPIC, broker.transactions.partition_of(key))
    elif key_type == SHARE_KEY_TYPE and version >= FIRST_SHARE_VERSION and _is_share_key(key):
        partition = share_placement.partition_for_key(key, broker.share_coordinator.partition_count())
        info = broker.partition(share_placement.SHARE_STATE_TOPIC, partition)
    else:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    endpoint = broker.endpoint_of(info.leader, listener) if info is not None and info.leader >= 0 else None
    if endpoint is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    host, port, _ = endpoint
    return ErrorCode.NONE, info.leader, host, port


def _is_share_key(key: str) -> bool:
    """Whether key is "groupId:topicId:partition", as Kafka's SharePartitionKey.validate requires."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0].strip():
        return False
    try:
        topic_id_from_kafka_string(parts[1])
        int(parts[2])
    except ValueError:
        return False
    return True


async def _create_topic(broker, topic: dict) -> None:
    try:
        await broker.call_controller("create_topics", topics=[topic], validate_only=False)
    except Exception as exc:  # answered as COORDINATOR_NOT_AVAILABLE; clients retry
        log.warning("cannot create %s: %s", topic["name"], exc)
