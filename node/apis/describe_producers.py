"""DescribeProducers v0: the producers a partition replica here knows, as `kafka-transactions.sh
describe-producers` and `find-hanging` read them.

Per partition, for a replica this node hosts (leader or follower, as in Kafka): each producer's
id, epoch, last sequence (-1 before its first data batch), the max timestamp of its last batch or
marker, the epoch of the coordinator that wrote its last marker (-1 before any), and the first
offset of its open transaction here (-1 when none is open). A partition not hosted here is
NOT_LEADER_OR_FOLLOWER if it exists, else UNKNOWN_TOPIC_OR_PARTITION; an illegal topic name is
INVALID_TOPIC_EXCEPTION with Kafka's message, an unknown topic UNKNOWN_TOPIC_OR_PARTITION with
Kafka's default message.

With an authorizer (node.security.authorizer), the request needs READ on each topic; what is refused
gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

from cluster.formats.acls import READ, TOPIC
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_names import illegal_name_message, topic_name_error
from node.security import authorizer

REQUEST = DescribeProducersRequest
RESPONSE = DescribeProducersResponse
VERSIONS = (0, 0)

Topic = RESPONSE.TopicResponse
Answer = Topic.PartitionResponse
Producer = Answer.ProducerState

# Kafka's default message for an unknown topic (Errors.UNKNOWN_TOPIC_OR_PARTITION).
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def _topic_error(broker, name: str) -> tuple[ErrorCode, str] | None:
    if topic_name_error(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, illegal_name_message(name)
    if broker.topic(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE
    return None


def _partition(broker, topic: str, index: int) -> Answer:
    hosted = broker.replicas.partitions.get((topic, index))
    if hosted is None:
        error = ErrorCode.NOT_LEADER_OR_FOLLOWER if broker.partition(topic, index) else \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return Answer(partition_index=index, error_code=error, error_message=None, active_producers=[])
    producers = [Producer(producer_id=producer_id, producer_epoch=entry.epoch, last_sequence=entry.last_sequence,
                          last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
                          current_txn_start_offset=entry.txn_first_offset)
                 for producer_id, entry in sorted(hosted.producers.producers.items())]
    return Answer(partition_index=index, error_code=ErrorCode.NONE, error_message=None, active_producers=producers)


async def handle(broker, header, request):
    topics = []
    denied = authorizer.denied(broker, header, READ, TOPIC, [t.name for t in request.topics])
    for wanted in request.topics:
        refused = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None) if denied and wanted.name in denied \
            else _topic_error(broker, wanted.name)
        if refused:
            answers = [Answer(partition_index=index, error_code=refused[0], error_message=refused[1],
                              active_producers=[]) for index in wanted.partition_indexes]
        else:
            answers = [_partition(broker, wanted.name, index) for index in wanted.partition_indexes]
        topics.append(Topic(name=wanted.name, partitions=answers))
    return RESPONSE[header.api_version](throttle_time_ms=0, topics=topics)
