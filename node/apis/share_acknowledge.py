"""ShareAcknowledge v1: a share group member acknowledges records it acquired (KIP-932).

Each partition's batches (FirstOffset..LastOffset with one acknowledge type, or one per offset:
0 gap, 1 accept, 2 release, 3 reject) are applied as a whole or not at all: every offset must be
acquired by this member, else INVALID_RECORD_STATE. Accepted records are done with, rejected and
gap offsets archived, released ones made available again (or archived once their delivery count
reached `group.share.delivery.count.limit`). The change is written through the persister before it
is answered; a failed write is answered with Kafka's error for it and changes nothing. The share
session's epoch is checked (epoch 0 is INVALID_SHARE_SESSION_EPOCH); epoch -1 acknowledges, then
releases what the member still holds and closes the session.

With an authorizer (node.security.authorizer), the request needs READ on the group, and READ on each
topic (TOPIC_AUTHORIZATION_FAILED per partition); what is refused gets Kafka's
*_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import GROUP, READ
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.security import authorizer
from node.share import requests as share_requests
from node.share.requests import Target, acknowledgement_batches
from node.share.sessions import FINAL_EPOCH


class ShareAcknowledgeRequest(ApiMessage, load_json=schemas):
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = ShareAcknowledgeRequest
RESPONSE = ShareAcknowledgeResponse
VERSIONS = (1, 1)

TopicResponse = RESPONSE.ShareAcknowledgeTopicResponse
PartitionData = TopicResponse.PartitionData


async def handle(broker, header, request):
    version = header.api_version
    if not request.group_id or not request.member_id:
        return _error(version, ErrorCode.INVALID_REQUEST)
    if not authorizer.allowed(broker, header, READ, GROUP, request.group_id):
        return _error(version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    epoch = request.share_session_epoch
    error, session = broker.share_sessions.acknowledge_session(request.group_id, request.member_id, epoch)
    if error:
        return _error(version, error)
    acknowledgements = {(topic.topic_id, p.partition_index): acknowledgement_batches(p)
                        for topic in request.topics for p in topic.partitions}
    denied = authorizer.denied_topic_ids(broker, header, READ, [key[0] for key in acknowledgements])
    acked = await share_requests.acknowledge(broker, request.group_id, request.member_id,
                                             {key: b for key, b in acknowledgements.items() if key[0] not in denied})
    for key in acknowledgements.keys() - acked.keys():  # (TOPIC_AUTHORIZATION_FAILED)
        acked[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, Target(*key, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    if epoch == FINAL_EPOCH:
        await share_requests.close_session(broker, session)
    topics: dict = {}
    for (topic_id, index), (ack_error, target) in acked.items():
        leader_id, leader_epoch = target.leader or (-1, -1)
        topics.setdefault(topic_id, []).append(PartitionData(
            partition_index=index, error_code=ack_error, error_message=None,
            current_leader=PartitionData.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)))
    return RESPONSE[version](
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        responses=[TopicResponse(topic_id=topic_id, partitions=partitions) for topic_id, partitions in topics.items()],
        node_endpoints=share_requests.node_endpoints(broker, RESPONSE, [target for _, target in acked.values()],
                                                      header.session.listener.name))


def _error(version: int, error: ErrorCode):
    return RESPONSE[version](throttle_time_ms=0, error_code=error, error_message=None, responses=[],
                             node_endpoints=[])
