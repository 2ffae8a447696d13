"""What the share-state RPCs have in common (Kafka's ShareCoordinatorService): each share-partition of
a request is answered on its own, by the coordinator here if this node leads its `__share_group_state`
partition (NOT_COORDINATOR otherwise); a request without a group id is INVALID_REQUEST throughout.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from cluster.formats.errors import ErrorCode
from node.share_coordinator.records import StateKey

# (share-partition, the request's partition entry) -> the fields of its answer, error_code included
PartitionAnswer = Callable[[StateKey, object], Awaitable[dict]]


async def answer_each(request, answer: PartitionAnswer) -> list[tuple[object, list[tuple[int, dict]]]]:
    """[(topic id, [(partition, answer fields)])] in the request's order."""
    results = []
    for topic in request.topics:
        partitions = []
        for entry in topic.partitions:
            if not request.group_id:
                fields = error_fields(ErrorCode.INVALID_REQUEST)
            else:
                fields = await answer(StateKey(request.group_id, topic.topic_id, entry.partition), entry)
            partitions.append((entry.partition, fields))
        results.append((topic.topic_id, partitions))
    return results


def build_response(version_class, result_class, results) -> object:
    partition_class = result_class.PartitionResult
    return version_class(results=[
        result_class(topic_id=topic_id, partitions=[
            partition_class(partition=partition, **fields) for partition, fields in partitions])
        for topic_id, partitions in results])


def error_fields(code: ErrorCode) -> dict:
    return {"error_code": int(code), "error_message": None if code == ErrorCode.NONE else code.name}
