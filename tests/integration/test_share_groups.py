"""Share groups (KIP-932) over the wire: ShareGroupHeartbeat and ShareGroupDescribe as Kafka 4.1 answers
them, on a 3-node cluster; the group carried over to a new coordinator; a confluent-kafka ShareConsumer
joining."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse
from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse

from cluster.formats.errors import ErrorCode
from cluster.launch import Cluster
from node.apis.share_group_describe import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from node.apis.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from tests.integration.wire import exchange, exchange_once

SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 500
MAX_SIZE = 3
CONFIG = {
    "offsets.topic.replication.factor": "3",  # so that the group outlives its coordinator
    "group.share.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.share.max.size": str(MAX_SIZE),
}


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, node_config=CONFIG) as running:
        yield running


def new_topic(cluster, partitions: int) -> tuple[str, uuid.UUID]:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=partitions)
    return name, topic_id(cluster, name)


def topic_id(cluster, name: str) -> uuid.UUID:
    node = cluster.nodes[min(cluster.nodes)]
    request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=name)],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    [topic] = exchange_once((cluster.host, node.port), request, MetadataResponse, 12).topics
    assert topic.error_code == 0
    return topic.topic_id


def find_coordinator(cluster, group: str) -> tuple[int, tuple[str, int]]:
    """(node id, address) of the group's coordinator, once one answers for it."""
    deadline = time.monotonic() + 30
    while True:
        for node in [n for n in cluster.nodes.values() if n.alive()]:
            found = exchange_once((cluster.host, node.port), FindCoordinatorRequest[3](key=group, key_type=0),
                                  FindCoordinatorResponse, 3)
            if found.error_code == 0:
                return found.node_id, (found.host, found.port)
        assert time.monotonic() < deadline, f"no coordinator for {group}"
        time.sleep(0.2)


def connect(cluster, group: str) -> socket.socket:
    return socket.create_connection(find_coordinator(cluster, group)[1], timeout=10)


def heartbeat(sock, group: str, member: str, epoch: int, topics: list[str] | None = None, rack: str | None = None):
    request = ShareGroupHeartbeatRequest[1](group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                                            subscribed_topic_names=topics)
    return exchange(sock, request, ShareGroupHeartbeatResponse, 1)


def describe(sock, *groups: str):
    request = ShareGroupDescribeRequest[1](group_ids=list(groups), include_authorized_operations=False)
    return exchange(sock, request, ShareGroupDescribeResponse, 1).groups


def assigned(response) -> dict[uuid.UUID, list[int]] | None:
    if response.assignment is None:
        return None
    return {tp.topic_id: list(tp.partitions) for tp in response.assignment.topic_partitions}


def answer(response) -> tuple:
    return response.error_code, response.member_epoch, response.heartbeat_interval_ms, assigned(response)


def members_of(described) -> dict[str, tuple]:
    return {m.member_id: (m.member_epoch, m.subscribed_topic_names,
                          {(tp.topic_name, tp.topic_id): list(tp.partitions) for tp in m.assignment.topic_partitions})
            for m in described.members}


def test_members_join_share_the_partitions_and_leave(cluster):
    topic, tid = new_topic(cluster, partitions=3)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        first = heartbeat(sock, group, "member-a", 0, [topic])
        assert (first.error_code, first.member_id) == (0, "member-a")
        assert answer(first) == (0, 1, HEARTBEAT_INTERVAL_MS, {tid: [0, 1, 2]})
        # Nothing changed: the epoch stays and no assignment is sent.
        assert answer(heartbeat(sock, group, "member-a", 1)) == (0, 1, HEARTBEAT_INTERVAL_MS, None)

        second = heartbeat(sock, group, "member-b", 0, [topic])
        assert answer(second) == (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [2]})
        # The first member is given the new target at once: no revocation phase.
        assert answer(heartbeat(sock, group, "member-a", 1)) == (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [0, 1]})

        [described] = describe(sock, group)
        assert (described.error_code, described.group_id, described.group_state, described.group_epoch,
                described.assignment_epoch, described.assignor_name) == (0, group, "Stable", 2, 2, "simple")
        assert members_of(described) == {"member-a": (2, [topic], {(topic, tid): [0, 1]}),
                                         "member-b": (2, [topic], {(topic, tid): [2]})}

        left = heartbeat(sock, group, "member-b", -1)
        assert (left.error_code, left.member_id, left.member_epoch) == (0, "member-b", -1)
        # Leaving bumped the group epoch; the next heartbeat computes the assignment of that epoch.
        assert answer(heartbeat(sock, group, "member-a", 2)) == (0, 3, HEARTBEAT_INTERVAL_MS, {tid: [0, 1, 2]})
        [described] = describe(sock, group)
        assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 3, 3)
        assert members_of(described) == {"member-a": (3, [topic], {(topic, tid): [0, 1, 2]})}

        assert heartbeat(sock, group, "member-a", -1).error_code == 0
        [described] = describe(sock, group)
        assert (described.group_state, described.members) == ("Empty", [])
