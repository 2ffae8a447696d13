"""DescribeTopicPartitions v0 (KIP-966): topics and partitions, paginated by a cursor.

Every topic when none is named, in name order; the answer stops at response_partition_limit
partitions and names where the next page starts.

With an authorizer, a topic named that the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED;
of every topic, only those it may describe are listed.

Differs from Kafka: eligible leader replicas and last known ELR are always null (ELR is not
built); topic authorized operations are never filled in.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

from cluster.formats.acls import DESCRIBE, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_names import INTERNAL_TOPICS, topic_name_error
from node.security import authorizer

REQUEST = DescribeTopicPartitionsRequest
RESPONSE = DescribeTopicPartitionsResponse
VERSIONS = (0, 0)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

Topic = RESPONSE.DescribeTopicPartitionsResponseTopic
Partition = Topic.DescribeTopicPartitionsResponsePartition


async def handle(broker, header, request):
    names = sorted({t.name for t in request.topics}) if request.topics else sorted(broker.image.topics)
    denied = authorizer.denied(broker, header, DESCRIBE, TOPIC, names)
    if denied and not request.topics:  # of every topic, only those it may describe
        names = [n for n in names if n not in denied]
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(request.response_partition_limit, 1)
    topics, next_cursor = [], None
    for name in names:
        info = broker.topic(name)
        if info is None or (denied and name in denied):
            unknown = ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied and name in denied else \
                topic_name_error(name) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(Topic(error_code=unknown,
                                name=name, topic_id=None, is_internal=False, partitions=[],
                                topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = [i for i in sorted(info.partitions) if i >= first]
        if len(indexes) > budget:
            next_cursor = RESPONSE.Cursor(topic_name=name, partition_index=indexes[budget])
            indexes = indexes[:budget]
        budget -= len(indexes)
        topics.append(Topic(error_code=ErrorCode.NONE, name=name, topic_id=info.topic_id,
                            is_internal=name in INTERNAL_TOPICS,
                            partitions=[_partition(broker, info.partitions[i]) for i in indexes],
                            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        if next_cursor is not None:
            break
        if budget == 0 and name != names[-1]:
            next_cursor = RESPONSE.Cursor(topic_name=names[names.index(name) + 1], partition_index=0)
            break
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def _partition(broker, info):
    alive = broker.is_alive(info.leader)
    return Partition(error_code=ErrorCode.NONE, partition_index=info.partition,
                     leader_id=info.leader if alive else -1, leader_epoch=info.leader_epoch,
                     replica_nodes=list(info.replicas), isr_nodes=list(info.isr),
                     eligible_leader_replicas=None, last_known_elr=None,
                     offline_replicas=[r for r in info.replicas if not broker.is_alive(r)])
