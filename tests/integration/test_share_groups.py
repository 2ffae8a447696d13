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
from tests.integration.observe import logged_errors
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
        # Joins, leaves, sessions that end, refusals, a coordinator's death: none worth an ERROR.
        assert {name: lines for name, lines in logged_errors(running).items() if lines} == {}


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
        assert answer(left) == (0, -1, 0, None) and left.member_id == "member-b"
        # Leaving bumped the group epoch; the next heartbeat computes the assignment of that epoch.
        assert answer(heartbeat(sock, group, "member-a", 2)) == (0, 3, HEARTBEAT_INTERVAL_MS, {tid: [0, 1, 2]})
        [described] = describe(sock, group)
        assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 3, 3)
        assert members_of(described) == {"member-a": (3, [topic], {(topic, tid): [0, 1, 2]})}

        assert heartbeat(sock, group, "member-a", -1).error_code == 0
        [described] = describe(sock, group)
        assert (described.group_state, described.members) == ("Empty", [])


def test_heartbeats_kafka_refuses(cluster):
    topic, _ = new_topic(cluster, partitions=1)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        def refused(member: str, epoch: int, topics=None, rack=None, group_id=group) -> tuple:
            response = heartbeat(sock, group_id, member, epoch, topics, rack)
            return response.error_code, response.error_message, response.member_id, response.assignment

        assert refused("member-a", 1) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group} not found.", None, None)
        assert refused("", 0, [topic]) == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.", None, None)
        assert refused("member-a", 0, None) == \
            (ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.", None, None)
        assert refused("member-a", 0, [topic], rack="") == \
            (ErrorCode.INVALID_REQUEST, "RackId can't be empty.", None, None)
        assert refused("member-a", -2, [topic]) == (ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.", None, None)

        assert heartbeat(sock, group, "member-a", 0, [topic]).member_epoch == 1
        assert refused("member-a", 2) == (
            ErrorCode.FENCED_MEMBER_EPOCH, "The share group member has a greater member epoch (2) than the one known "
            "by the group coordinator (1). The member must abandon all its partitions and rejoin.", None, None)
        assert refused("member-b", 1) == \
            (ErrorCode.UNKNOWN_MEMBER_ID, f"Member member-b is not a member of group {group}.", None, None)
        assert refused("member-b", -1) == \
            (ErrorCode.UNKNOWN_MEMBER_ID, f"Member member-b is not a member of group {group}.", None, None)
        # Refusals changed nothing: the member carries on at its epoch.
        assert answer(heartbeat(sock, group, "member-a", 1)) == (0, 1, HEARTBEAT_INTERVAL_MS, None)
        [missing] = describe(sock, "no-such-share-group")
        assert (missing.error_code, missing.error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-share-group not found.") or \
            missing.error_code == ErrorCode.NOT_COORDINATOR

    # Another node is not the group's coordinator.
    coordinator_id, _ = find_coordinator(cluster, group)
    other = cluster.nodes[next(n for n in sorted(cluster.nodes) if n != coordinator_id)]
    with socket.create_connection((cluster.host, other.port), timeout=10) as sock:
        assert heartbeat(sock, group, "member-a", 1).error_code == ErrorCode.NOT_COORDINATOR
        [elsewhere] = describe(sock, group)
        assert elsewhere.error_code == ErrorCode.NOT_COORDINATOR


def test_a_classic_group_id_is_not_a_share_group(cluster):
    topic, _ = new_topic(cluster, partitions=1)
    group = f"classic-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        joined = exchange(sock, JoinGroupRequest[3](group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000,
                                                    member_id="", protocol_type="consumer",
                                                    protocols=[("range", b"subscription")]), JoinGroupResponse, 3)
        assert joined.error_code == 0
        response = heartbeat(sock, group, "member-a", 0, [topic])
        assert (response.error_code, response.error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a share group.")
        [described] = describe(sock, group)
        assert (described.error_code, described.error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a share group.")


def test_a_full_group_refuses_new_members(cluster):
    topic, tid = new_topic(cluster, partitions=2)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        for index in range(MAX_SIZE):
            assert heartbeat(sock, group, f"member-{index}", 0, [topic]).error_code == 0
        full = heartbeat(sock, group, "member-late", 0, [topic])
        assert (full.error_code, full.error_message) == \
            (ErrorCode.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of {MAX_SIZE} members.")
        # Three members over two partitions: each partition shared by two members, the first member given both.
        # Members that joined earlier move to the latest epoch at their next heartbeat; their partitions did
        # not change, so no assignment is sent.
        for index in range(MAX_SIZE):
            assert answer(heartbeat(sock, group, f"member-{index}", index + 1)) == \
                (0, MAX_SIZE, HEARTBEAT_INTERVAL_MS, None)
        [described] = describe(sock, group)
        assert members_of(described) == {"member-0": (3, [topic], {(topic, tid): [0, 1]}),
                                         "member-1": (3, [topic], {(topic, tid): [1]}),
                                         "member-2": (3, [topic], {(topic, tid): [0]})}
        # A member leaving makes room.
        assert heartbeat(sock, group, "member-2", -1).error_code == 0
        assert heartbeat(sock, group, "member-late", 0, [topic]).error_code == 0


def test_new_topics_and_partitions_reach_the_assignment(cluster):
    topic, tid = new_topic(cluster, partitions=1)
    later = f"later-{uuid.uuid4().hex[:8]}"
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        # A subscribed topic that does not exist yet is left out until it is created.
        assert answer(heartbeat(sock, group, "member-a", 0, [topic, later])) == \
            (0, 1, HEARTBEAT_INTERVAL_MS, {tid: [0]})
        cluster.create_topic(later, partitions=2)
        later_id = topic_id(cluster, later)
        assert answer(heartbeat(sock, group, "member-a", 1)) == \
            (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [0], later_id: [0, 1]})

        node = cluster.nodes[min(cluster.nodes)]
        grow = CreatePartitionsRequest[1](topics=[(topic, 3, None)], timeout_ms=10000, validate_only=False)
        [grown] = exchange_once((cluster.host, node.port), grow, CreatePartitionsResponse, 1).results
        assert grown.error_code == 0
        deadline = time.monotonic() + 10
        while (response := heartbeat(sock, group, "member-a", 2)).member_epoch == 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # until the coordinator's metadata has the new partitions
        assert answer(response) == (0, 3, HEARTBEAT_INTERVAL_MS, {tid: [0, 1, 2], later_id: [0, 1]})


def test_a_member_that_stops_heartbeating_is_removed(cluster):
    topic, tid = new_topic(cluster, partitions=2)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        assert heartbeat(sock, group, "member-a", 0, [topic]).member_epoch == 1
        assert answer(heartbeat(sock, group, "member-b", 0, [topic])) == (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [1]})
        deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 5
        while len(describe(sock, group)[0].members) == 2:  # member-a falls silent
            assert time.monotonic() < deadline
            assert heartbeat(sock, group, "member-b", 2).error_code == 0
            time.sleep(HEARTBEAT_INTERVAL_MS / 1000)
        assert answer(heartbeat(sock, group, "member-b", 2)) == (0, 3, HEARTBEAT_INTERVAL_MS, {tid: [0, 1]})
        gone = heartbeat(sock, group, "member-a", 1)
        assert (gone.error_code, gone.error_message) == \
            (ErrorCode.UNKNOWN_MEMBER_ID, f"Member member-a is not a member of group {group}.")


def test_a_share_consumer_joins_and_its_heartbeats_are_answered(cluster):
    from confluent_kafka import ShareConsumer

    topic, tid = new_topic(cluster, partitions=2)
    group = f"share-{uuid.uuid4().hex[:8]}"
    consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        with connect(cluster, group) as sock:
            while True:
                consumer.poll(0.2)
                [described] = describe(sock, group)
                members = list(described.members)
                if members and members[0].member_epoch > 0 and members[0].assignment.topic_partitions:
                    break
                assert time.monotonic() < deadline, f"the share consumer did not join: {described}"
            [member] = members
            assert (described.group_state, member.member_epoch, member.subscribed_topic_names) == ("Stable", 1, [topic])
            assert {(tp.topic_id, tp.topic_name): list(tp.partitions) for tp in member.assignment.topic_partitions} == \
                {(tid, topic): [0, 1]}
            assert member.client_host.startswith("/")
            # It keeps heartbeating at its epoch: still a member after more than a session timeout.
            until = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 1
            while time.monotonic() < until:
                consumer.poll(0.2)
            [described] = describe(sock, group)
            assert [(m.member_id, m.member_epoch) for m in described.members] == [(member.member_id, 1)]
    finally:
        consumer.close()
    with connect(cluster, group) as sock:
        [described] = describe(sock, group)
        assert (described.group_state, list(described.members)) == ("Empty", [])


def test_a_new_coordinator_has_the_group_after_the_old_one_dies(cluster):
    topic, tid = new_topic(cluster, partitions=3)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        assert heartbeat(sock, group, "member-a", 0, [topic]).member_epoch == 1
        assert answer(heartbeat(sock, group, "member-b", 0, [topic])) == (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [2]})
        assert answer(heartbeat(sock, group, "member-a", 1)) == (0, 2, HEARTBEAT_INTERVAL_MS, {tid: [0, 1]})
    old_coordinator, _ = find_coordinator(cluster, group)
    cluster.kill_node(old_coordinator)
    try:
        deadline = time.monotonic() + 30
        while (found := find_coordinator(cluster, group))[0] == old_coordinator:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with socket.create_connection(found[1], timeout=10) as sock:
            while (kept := heartbeat(sock, group, "member-a", 2)).error_code in (
                    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            # The same epoch, and nothing new to tell.
            assert answer(kept) == (0, 2, HEARTBEAT_INTERVAL_MS, None)
            [described] = describe(sock, group)
            assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 2, 2)
            assert members_of(described) == {"member-a": (2, [topic], {(topic, tid): [0, 1]}),
                                             "member-b": (2, [topic], {(topic, tid): [2]})}
            assert heartbeat(sock, group, "member-a", 1).error_code == 0  # the previous epoch is still accepted
            assert heartbeat(sock, group, "member-a", 3).error_code == ErrorCode.FENCED_MEMBER_EPOCH
            # A member leaving bumps the epoch there as it did here: the other takes every partition.
            assert heartbeat(sock, group, "member-b", -1).error_code == 0
            assert answer(heartbeat(sock, group, "member-a", 2)) == \
                (0, 3, HEARTBEAT_INTERVAL_MS, {tid: [0, 1, 2]})
    finally:
        cluster.restart_node(old_coordinator)


def test_classic_group_apis_naming_a_share_group_are_told_it_is_not_found(cluster):
    from kafka.protocol.consumer import (
        HeartbeatRequest, HeartbeatResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
        OffsetFetchResponse,
    )

    topic, _ = new_topic(cluster, partitions=1)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        assert heartbeat(sock, group, "member-a", 0, [topic]).error_code == 0
        joined = exchange(sock, JoinGroupRequest[3](group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000,
                                                    member_id="", protocol_type="consumer",
                                                    protocols=[("range", b"subscription")]), JoinGroupResponse, 3)
        assert joined.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        beat = exchange(sock, HeartbeatRequest[3](group_id=group, generation_id=1, member_id="member-a",
                                                  group_instance_id=None), HeartbeatResponse, 3)
        assert beat.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        commit = OffsetCommitRequest[2](
            group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
            topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_metadata="")])])
        [committed] = exchange(sock, commit, OffsetCommitResponse, 2).topics
        assert [p.error_code for p in committed.partitions] == [ErrorCode.GROUP_ID_NOT_FOUND]
        F = OffsetFetchRequest.OffsetFetchRequestTopic
        fetched = exchange(sock, OffsetFetchRequest[3](group_id=group, topics=[F(name=topic, partition_indexes=[0])]),
                           OffsetFetchResponse, 3)
        assert fetched.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # The share group is untouched.
        assert answer(heartbeat(sock, group, "member-a", 1)) == (0, 1, HEARTBEAT_INTERVAL_MS, None)


def test_list_groups_and_describe_groups_name_a_share_group_as_kafka_does(cluster):
    from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse

    topic, _ = new_topic(cluster, partitions=1)
    group = f"share-{uuid.uuid4().hex[:8]}"
    with connect(cluster, group) as sock:
        assert heartbeat(sock, group, "member-a", 0, [topic]).error_code == 0
        listed = exchange(sock, ListGroupsRequest[5](states_filter=[], types_filter=["share"]), ListGroupsResponse, 5)
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups
                if g.group_id == group] == [(group, "share", "Stable", "share")]
        [described] = exchange(sock, DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False),
                               DescribeGroupsResponse, 5).groups
        assert (described.error_code, described.group_state, described.members) == (0, "Dead", [])
        [described] = exchange(sock, DescribeGroupsRequest[6](groups=[group], include_authorized_operations=False),
                               DescribeGroupsResponse, 6).groups
        assert (described.error_code, described.error_message, described.group_state) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.", "Dead")
