"""What `kraftwerk group describe` shows of a group of any type, asked over the Kafka protocol.

As Kafka's AdminClient.describeConsumerGroups does, a group is first described with
ConsumerGroupDescribe (KIP-848 consumer groups: epochs, each member's epoch, its current and
target assignment), then, if it is not a consumer group, with DescribeGroups (classic groups), and
a group DescribeGroups v6 calls "not a classic group" with ShareGroupDescribe (KIP-932 share
groups). kafka-python carries no codec for the first and the last: node/apis holds them.
"""
from __future__ import annotations

from kafka import KafkaAdminClient

from cluster.formats.errors import ErrorCode
from cluster.tools.errors import GroupRefused


def _send(admin: KafkaAdminClient, group_id: str, request):
    """The request sent to the group's coordinator through kafka-python's admin client, which finds
    the coordinator and picks the version both sides speak (it has no public call for these APIs)."""
    async def ask():
        coordinator = (await admin._find_coordinator_ids([group_id]))[group_id]
        return await admin._manager.send(request, node_id=coordinator)
    return admin._manager.run(ask)


def _partitions(assignment) -> list[list]:
    return sorted([tp.topic_name, p] for tp in assignment.topic_partitions for p in tp.partitions)


def consumer_group(admin: KafkaAdminClient, group_id: str) -> dict | None:
    """The consumer group as ConsumerGroupDescribe answers it; None when it is not a consumer group."""
    from node.apis.consumer_group_describe import ConsumerGroupDescribeRequest

    response = _send(admin, group_id, ConsumerGroupDescribeRequest(group_ids=[group_id],
                                                                   include_authorized_operations=False))
    described = response.groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    if described.error_code:
        raise GroupRefused(group_id, described.error_code)
    return {
        "group_id": group_id, "type": "consumer", "state": described.group_state,
        "group_epoch": described.group_epoch, "assignment_epoch": described.assignment_epoch,
        "assignor": described.assignor_name,
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
            "host": m.client_host, "member_epoch": m.member_epoch,
            "subscribed_topics": sorted(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": _partitions(m.assignment), "target_assignment": _partitions(m.target_assignment),
        } for m in sorted(described.members, key=lambda m: m.member_id)],
    }


def share_group(admin: KafkaAdminClient, group_id: str) -> dict:
    """The share group as ShareGroupDescribe answers it."""
    from node.apis.share_group_describe import ShareGroupDescribeRequest

    response = _send(admin, group_id, ShareGroupDescribeRequest(group_ids=[group_id],
                                                                include_authorized_operations=False))
    described = response.groups[0]
    if described.error_code:
        raise GroupRefused(group_id, described.error_code)
    return {
        "group_id": group_id, "type": "share", "state": described.group_state,
        "group_epoch": described.group_epoch, "assignment_epoch": described.assignment_epoch,
        "assignor": described.assignor_name,
        "members": [{
            "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
            "member_epoch": m.member_epoch, "subscribed_topics": sorted(m.subscribed_topic_names),
            "assignment": _partitions(m.assignment),
        } for m in sorted(described.members, key=lambda m: m.member_id)],
    }


def classic_or_share(admin: KafkaAdminClient, group_id: str) -> tuple[str, dict]:
    """("classic", kafka-python's DescribeGroups answer: Dead for a group no coordinator knows) or
    ("share", share_group(...))."""
    described = admin.describe_groups([group_id])[group_id]
    error = described.get("error") or ""
    if "is not a classic group" in error:
        return "share", share_group(admin, group_id)
    if error and not error.startswith(f"[Error {ErrorCode.GROUP_ID_NOT_FOUND}]"):
        raise GroupRefused(group_id, int(error.split("]")[0].removeprefix("[Error ")))
    return "classic", described
