"""Every API at every version ApiVersions advertises: a request encoded by kafka-python's
codec at that version gets a response that decodes at that version, without errors."""
from __future__ import annotations

import socket
import uuid

import pytest
from kafka import KafkaProducer
from kafka.protocol import admin as admin_api
from kafka.protocol import consumer as group_api
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest,
    MetadataResponse,
)
from kafka.protocol import producer as txn_api
from kafka.protocol.producer import (
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
)

from cluster.formats.message_sets import encode_message
from cluster.formats.records import encode_batch
from node.apis.consumer_group_describe import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from node.apis import (
    alter_share_group_offsets, delete_share_group_offsets, delete_share_group_state, describe_share_group_offsets,
    initialize_share_group_state, read_share_group_state, read_share_group_state_summary, write_share_group_state,
)
from node.apis.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from node.apis.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from node.apis.share_fetch import ShareFetchRequest, ShareFetchResponse
from node.apis.share_group_describe import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from node.apis.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from node.apis.unregister_broker import UnregisterBrokerRequest, UnregisterBrokerResponse
from tests.integration.wire import exchange

TOPIC = "versions"


@pytest.fixture(scope="module")
def node():
    from cluster.launch import Cluster

    with Cluster(nodes=1) as cluster:
        cluster.create_topic(TOPIC, partitions=1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        producer.send(TOPIC, b"already there", partition=0).get(10)
        producer.close()
        host, port = cluster.bootstrap_servers.rsplit(":", 1)
        topic_id = None
        with socket.create_connection((host, int(port))) as sock:
            metadata = exchange(sock, MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name=TOPIC)],
                                                          allow_auto_topic_creation=False), MetadataResponse, 12)
            topic_id = metadata.topics[0].topic_id
        yield host, int(port), topic_id


def advertised(host: str, port: int) -> dict[int, tuple[int, int]]:
    with socket.create_connection((host, port)) as sock:
        response = exchange(sock, ApiVersionsRequest[0](), ApiVersionsResponse, 0)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def requests_for(version_of, topic_id):
    """(request, response class) builders keyed by API key; each takes the version."""
    def produce(v):
        T = ProduceRequest.TopicProduceData
        topic = T(name=TOPIC, partition_data=[]) if v < 13 else T(topic_id=topic_id, partition_data=[])
        records = encode_batch([(None, b"v%d" % v)], timestamp=1) if v >= 3 else \
            encode_message(0, v // 2, 0, 1, None, b"v%d" % v)  # a legacy message: magic 0 until v2's magic 1
        topic.partition_data = [T.PartitionProduceData(index=0, records=records)]
        return ProduceRequest[v](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[topic])

    def fetch(v):
        T = FetchRequest.FetchTopic
        part = T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                log_start_offset=-1, last_fetched_epoch=-1)
        topic = T(topic=TOPIC, partitions=[part]) if v < 13 else T(topic_id=topic_id, partitions=[part])
        return FetchRequest[v](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                               session_id=0, session_epoch=-1, topics=[topic], forgotten_topics_data=[], rack_id="")

    def list_offsets(v):
        T = ListOffsetsRequest.ListOffsetsTopic
        return ListOffsetsRequest[v](replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[
            T(name=TOPIC, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2,
                                                              max_num_offsets=1)])])

    def metadata(v):
        topics = [MetadataRequest.MetadataRequestTopic(name=TOPIC)]
        return MetadataRequest[v](topics=topics, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False, include_topic_authorized_operations=False)

    def create_topics(v):
        T = admin_api.CreateTopicsRequest.CreatableTopic
        return admin_api.CreateTopicsRequest[v](topics=[T(name=f"created-v{v}", num_partitions=1, replication_factor=1,
                                                          assignments=[], configs=[])], timeout_ms=5000,
                                                validate_only=False)

    def delete_topics(v):
        if v >= 6:
            T = admin_api.DeleteTopicsRequest.DeleteTopicState
            return admin_api.DeleteTopicsRequest[v](topics=[T(name=f"created-v{v + 1}")], timeout_ms=5000)
        return admin_api.DeleteTopicsRequest[v](topic_names=[f"created-v{v + 1}"], timeout_ms=5000)

    def create_partitions(v):
        T = admin_api.CreatePartitionsRequest.CreatePartitionsTopic
        return admin_api.CreatePartitionsRequest[v](topics=[T(name=TOPIC, count=2, assignments=None)], timeout_ms=5000,
                                                    validate_only=True)

    def describe_configs(v):
        R = admin_api.DescribeConfigsRequest.DescribeConfigsResource
        return admin_api.DescribeConfigsRequest[v](resources=[R(resource_type=2, resource_name=TOPIC,
                                                                configuration_keys=None)],
                                                   include_synonyms=True, include_documentation=False)

    def alter_configs(v):
        R = admin_api.IncrementalAlterConfigsRequest.AlterConfigsResource
        return admin_api.IncrementalAlterConfigsRequest[v](resources=[R(resource_type=2, resource_name=TOPIC, configs=[
            R.AlterableConfig(name="retention.ms", config_operation=0, value="86400000")])], validate_only=True)

    def legacy_alter_configs(v):
        R = admin_api.AlterConfigsRequest.AlterConfigsResource
        return admin_api.AlterConfigsRequest[v](resources=[R(resource_type=2, resource_name=TOPIC, configs=[
            R.AlterableConfig(name="retention.ms", value="86400000")])], validate_only=True)

    def describe_cluster(v):
        return admin_api.DescribeClusterRequest[v](include_cluster_authorized_operations=False, endpoint_type=1,
                                                   include_fenced_brokers=False)

    def describe_topic_partitions(v):
        T = admin_api.DescribeTopicPartitionsRequest.TopicRequest
        return admin_api.DescribeTopicPartitionsRequest[v](topics=[T(name=TOPIC)], response_partition_limit=10,
                                                           cursor=None)

    def init_producer_id(v):
        return InitProducerIdRequest[v](transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                        producer_epoch=-1)

    def api_versions(v):
        return ApiVersionsRequest[v](client_software_name="versions", client_software_version="1")

    def find_coordinator(v):
        return FindCoordinatorRequest[v](key="versions-group", key_type=0, coordinator_keys=["versions-group"])

    def join_group(v):
        P = group_api.JoinGroupRequest.JoinGroupRequestProtocol
        return group_api.JoinGroupRequest[v](group_id=f"join-v{v}", session_timeout_ms=10000,
                                             rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                                             protocol_type="consumer", protocols=[P(name="range", metadata=b"")],
                                             reason=None)

    def sync_group(v):
        return group_api.SyncGroupRequest[v](group_id="nobody", generation_id=1, member_id="ghost",
                                             group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                             assignments=[])

    def heartbeat(v):
        return group_api.HeartbeatRequest[v](group_id="nobody", generation_id=1, member_id="ghost",
                                             group_instance_id=None)

    def leave_group(v):
        M = group_api.LeaveGroupRequest.MemberIdentity
        return group_api.LeaveGroupRequest[v](group_id="nobody", member_id="ghost",
                                              members=[M(member_id="ghost", group_instance_id=None, reason=None)])

    def offset_commit(v):
        T = group_api.OffsetCommitRequest.OffsetCommitRequestTopic
        topic = T(name=TOPIC, partitions=[]) if v < 10 else T(topic_id=topic_id, partitions=[])
        topic.partitions = [T.OffsetCommitRequestPartition(partition_index=0, committed_offset=v,
                                                           committed_leader_epoch=-1, committed_metadata="")]
        return group_api.OffsetCommitRequest[v](group_id="committer", generation_id_or_member_epoch=-1,
                                                member_id="", group_instance_id=None, retention_time_ms=-1,
                                                topics=[topic])

    def offset_fetch(v):
        if v < 8:
            T = group_api.OffsetFetchRequest.OffsetFetchRequestTopic
            return group_api.OffsetFetchRequest[v](group_id="committer", require_stable=False,
                                                   topics=[T(name=TOPIC, partition_indexes=[0])])
        G = group_api.OffsetFetchRequest.OffsetFetchRequestGroup
        T = G.OffsetFetchRequestTopics
        topic = T(name=TOPIC, partition_indexes=[0]) if v < 10 else T(topic_id=topic_id, partition_indexes=[0])
        return group_api.OffsetFetchRequest[v](groups=[G(group_id="committer", member_id=None, member_epoch=-1,
                                                         topics=[topic])], require_stable=False)

    def txn_offset_commit(v):
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        return TxnOffsetCommitRequest[v](
            transactional_id="versions", group_id="txn-committer", producer_id=1000, producer_epoch=0,
            generation_id=-1, member_id="", group_instance_id=None, topics=[T(name=TOPIC, partitions=[
                T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=v, committed_leader_epoch=-1,
                                                  committed_metadata="")])])

    def describe_groups(v):
        return admin_api.DescribeGroupsRequest[v](groups=["committer"], include_authorized_operations=False)

    def list_groups(v):
        return admin_api.ListGroupsRequest[v](states_filter=[], types_filter=[])

    def delete_groups(v):
        return admin_api.DeleteGroupsRequest[v](groups_names=["never-existed"])

    def offset_delete(v):
        T = group_api.OffsetDeleteRequest.OffsetDeleteRequestTopic
        return group_api.OffsetDeleteRequest[v](group_id="never-existed", topics=[
            T(name=TOPIC, partitions=[T.OffsetDeleteRequestPartition(partition_index=0)])])

    def elect_leaders(v):
        T = admin_api.ElectLeadersRequest.TopicPartitions
        return admin_api.ElectLeadersRequest[v](election_type=0, timeout_ms=10000,
                                               topic_partitions=[T(topic=TOPIC, partitions=[0])])

    def offset_for_leader_epoch(v):
        T = group_api.OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        return group_api.OffsetForLeaderEpochRequest[v](replica_id=-1, topics=[T(topic=TOPIC, partitions=[
            T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])

    def alter_partition_reassignments(v):
        T = admin_api.AlterPartitionReassignmentsRequest.ReassignableTopic
        return admin_api.AlterPartitionReassignmentsRequest[v](timeout_ms=10000, topics=[
            T(name=TOPIC, partitions=[T.ReassignablePartition(partition_index=0, replicas=[1])])])

    def list_partition_reassignments(v):
        return admin_api.ListPartitionReassignmentsRequest[v](timeout_ms=10000, topics=None)

    def unregister_broker(v):
        return UnregisterBrokerRequest[v](broker_id=99)

    def sasl_handshake(v):  # on a PLAINTEXT listener: ILLEGAL_SASL_STATE
        return SaslHandshakeRequest[v](mechanism="PLAIN")

    def sasl_authenticate(v):
        return SaslAuthenticateRequest[v](auth_bytes=b"\0nobody\0secret")

    def describe_user_scram_credentials(v):
        R = admin_api.DescribeUserScramCredentialsRequest
        return R[v](users=[R.UserName(name="versions-nobody")])

    def alter_user_scram_credentials(v):
        R = admin_api.AlterUserScramCredentialsRequest
        return R[v](deletions=[R.ScramCredentialDeletion(name="versions-nobody", mechanism=1)], upsertions=[])

    def describe_client_quotas(v):
        return admin_api.DescribeClientQuotasRequest[v](components=[], strict=False)

    def alter_client_quotas(v):  # validate_only: checked, nothing written
        E = admin_api.AlterClientQuotasRequest[v].EntryData
        return admin_api.AlterClientQuotasRequest[v](validate_only=True, entries=[E(
            entity=[E.EntityData(entity_type="client-id", entity_name="versions")],
            ops=[E.OpData(key="producer_byte_rate", value=1024.0, remove=False)])])

    def describe_quorum(v):
        T = admin_api.DescribeQuorumRequest[v].TopicData
        return admin_api.DescribeQuorumRequest[v](topics=[T(topic_name="__cluster_metadata",
                                                             partitions=[T.PartitionData(partition_index=0)])])

    def describe_log_dirs(v):
        T = admin_api.DescribeLogDirsRequest[v].DescribableLogDirTopic
        return admin_api.DescribeLogDirsRequest[v](topics=[T(topic=TOPIC, partitions=[0])])

    def delete_records(v):
        T = admin_api.DeleteRecordsRequest[v].DeleteRecordsTopic
        # Offset 0: nothing is deleted, and the topic keeps what the other requests read.
        return admin_api.DeleteRecordsRequest[v](topics=[T(name=TOPIC, partitions=[
            T.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=5000)

    def add_partitions_to_txn(v):
        R = txn_api.AddPartitionsToTxnRequest
        topics = [R.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])]
        if v < 4:
            return R[v](v3_and_below_transactional_id="versions-txn", v3_and_below_producer_id=424242,
                        v3_and_below_producer_epoch=0, v3_and_below_topics=topics)
        return R[v](transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id="versions-txn", producer_id=424242, producer_epoch=0, verify_only=True, topics=topics)])

    def add_offsets_to_txn(v):
        return txn_api.AddOffsetsToTxnRequest[v](transactional_id="versions-txn", producer_id=424242,
                                                 producer_epoch=0, group_id="committer")

    def end_txn(v):
        return txn_api.EndTxnRequest[v](transactional_id="versions-txn", producer_id=424242, producer_epoch=0,
                                        committed=False)

    def write_txn_markers(v):
        M = txn_api.WriteTxnMarkersRequest.WritableTxnMarker
        # An ABORT marker of a producer that never wrote here: Kafka writes it all the same.
        return txn_api.WriteTxnMarkersRequest[v](markers=[M(
            producer_id=424242 + v, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[M.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])], transaction_version=1)])

    def describe_producers(v):
        T = admin_api.DescribeProducersRequest.TopicRequest
        return admin_api.DescribeProducersRequest[v](topics=[T(name=TOPIC, partition_indexes=[0])])

    def describe_transactions(v):
        return admin_api.DescribeTransactionsRequest[v](transactional_ids=["nobody"])

    def list_transactions(v):
        return admin_api.ListTransactionsRequest[v](state_filters=["Ongoing"], producer_id_filters=[])

    def consumer_group_describe(v):
        return ConsumerGroupDescribeRequest[v](group_ids=["never-existed"], include_authorized_operations=True)

    def share_group_heartbeat(v):
        return ShareGroupHeartbeatRequest[v](group_id="no-such-share-group", member_id="member", member_epoch=1,
                                             rack_id=None, subscribed_topic_names=None)

    def share_group_describe(v):
        return ShareGroupDescribeRequest[v](group_ids=["no-such-share-group"], include_authorized_operations=False)

    def consumer_group_heartbeat(v):
        # A heartbeat of a member of a group that does not exist.
        return ConsumerGroupHeartbeatRequest[v](group_id="versions-cg", member_id="member", member_epoch=1)

    def share_fetch(v):
        T = ShareFetchRequest.FetchTopic
        # Opens the share session that share_acknowledge goes on with. Of a topic id nobody has: the
        # share-state requests after it meet __share_group_state as never used.
        return ShareFetchRequest[v](group_id="versions-share-fetch", member_id="versions-member", share_session_epoch=0,
                                    max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
                                    topics=[T(topic_id=uuid.UUID(int=1), partitions=[T.FetchPartition(
                                        partition_index=0, acknowledgement_batches=[])])],
                                    forgotten_topics_data=[])

    def share_acknowledge(v):
        return ShareAcknowledgeRequest[v](group_id="versions-share-fetch", member_id="versions-member",
                                          share_session_epoch=1, topics=[])

    def describe_acls(v):
        return admin_api.DescribeAclsRequest[v](resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                                principal_filter=None, host_filter=None, operation=1, permission_type=1)

    def create_acls(v):
        C = admin_api.CreateAclsRequest.AclCreation
        return admin_api.CreateAclsRequest[v](creations=[C(resource_type=2, resource_name=TOPIC, resource_pattern_type=3,
                                                           principal="User:alice", host="*", operation=3,
                                                           permission_type=3)])

    def delete_acls(v):
        F = admin_api.DeleteAclsRequest.DeleteAclsFilter
        return admin_api.DeleteAclsRequest[v](filters=[F(resource_type_filter=1, resource_name_filter=None,
                                                         pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                         operation=1, permission_type=1)])

    def share_state(api, **partition_fields):
        def build(v):
            return api.REQUEST[v](group_id="versions-share", topics=[api.TOPIC(topic_id=topic_id, partitions=[
                api.PARTITION(partition=0, **partition_fields)])])
        return build, api.RESPONSE

    def describe_share_group_offsets_(v):
        R = describe_share_group_offsets.REQUEST
        G = R.DescribeShareGroupOffsetsRequestGroup
        return R[v](groups=[G(group_id="versions-share", topics=[
            G.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[0])])])

    def alter_share_group_offsets_(v):
        R = alter_share_group_offsets.REQUEST
        T = R.AlterShareGroupOffsetsRequestTopic
        return R[v](group_id="versions-share", topics=[T(topic_name=TOPIC, partitions=[
            T.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])])

    def delete_share_group_offsets_(v):
        R = delete_share_group_offsets.REQUEST
        return R[v](group_id="versions-share", topics=[R.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC,
                                                                                              partitions=[0])])

    return {
        68: (consumer_group_heartbeat, ConsumerGroupHeartbeatResponse),
        83: share_state(initialize_share_group_state, state_epoch=0, start_offset=0),
        84: share_state(read_share_group_state, leader_epoch=0),
        85: share_state(write_share_group_state, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[]),
        86: share_state(delete_share_group_state),
        87: share_state(read_share_group_state_summary, leader_epoch=0),
        90: (describe_share_group_offsets_, describe_share_group_offsets.RESPONSE),
        91: (alter_share_group_offsets_, alter_share_group_offsets.RESPONSE),
        92: (delete_share_group_offsets_, delete_share_group_offsets.RESPONSE),
        24: (add_partitions_to_txn, txn_api.AddPartitionsToTxnResponse),
        25: (add_offsets_to_txn, txn_api.AddOffsetsToTxnResponse), 26: (end_txn, txn_api.EndTxnResponse),
        27: (write_txn_markers, txn_api.WriteTxnMarkersResponse),
        0: (produce, ProduceResponse), 1: (fetch, FetchResponse), 2: (list_offsets, ListOffsetsResponse),
        3: (metadata, MetadataResponse), 18: (api_versions, ApiVersionsResponse),
        19: (create_topics, admin_api.CreateTopicsResponse), 20: (delete_topics, admin_api.DeleteTopicsResponse),
        37: (create_partitions, admin_api.CreatePartitionsResponse),
        32: (describe_configs, admin_api.DescribeConfigsResponse),
        44: (alter_configs, admin_api.IncrementalAlterConfigsResponse),
        33: (legacy_alter_configs, admin_api.AlterConfigsResponse),
        60: (describe_cluster, admin_api.DescribeClusterResponse),
        75: (describe_topic_partitions, admin_api.DescribeTopicPartitionsResponse),
        22: (init_producer_id, InitProducerIdResponse),
        10: (find_coordinator, FindCoordinatorResponse), 11: (join_group, group_api.JoinGroupResponse),
        14: (sync_group, group_api.SyncGroupResponse), 12: (heartbeat, group_api.HeartbeatResponse),
        13: (leave_group, group_api.LeaveGroupResponse), 8: (offset_commit, group_api.OffsetCommitResponse),
        9: (offset_fetch, group_api.OffsetFetchResponse), 28: (txn_offset_commit, TxnOffsetCommitResponse),
        15: (describe_groups, admin_api.DescribeGroupsResponse),
        16: (list_groups, admin_api.ListGroupsResponse), 42: (delete_groups, admin_api.DeleteGroupsResponse),
        47: (offset_delete, group_api.OffsetDeleteResponse),
        43: (elect_leaders, admin_api.ElectLeadersResponse),
        23: (offset_for_leader_epoch, group_api.OffsetForLeaderEpochResponse),
        45: (alter_partition_reassignments, admin_api.AlterPartitionReassignmentsResponse),
        46: (list_partition_reassignments, admin_api.ListPartitionReassignmentsResponse),
        64: (unregister_broker, UnregisterBrokerResponse),
        17: (sasl_handshake, SaslHandshakeResponse), 36: (sasl_authenticate, SaslAuthenticateResponse),
        50: (describe_user_scram_credentials, admin_api.DescribeUserScramCredentialsResponse),
        51: (alter_user_scram_credentials, admin_api.AlterUserScramCredentialsResponse),
        48: (describe_client_quotas, admin_api.DescribeClientQuotasResponse),
        49: (alter_client_quotas, admin_api.AlterClientQuotasResponse),
        21: (delete_records, admin_api.DeleteRecordsResponse),
        35: (describe_log_dirs, admin_api.DescribeLogDirsResponse),
        61: (describe_producers, admin_api.DescribeProducersResponse),
        65: (describe_transactions, admin_api.DescribeTransactionsResponse),
        66: (list_transactions, admin_api.ListTransactionsResponse),
        69: (consumer_group_describe, ConsumerGroupDescribeResponse),
        76: (share_group_heartbeat, ShareGroupHeartbeatResponse), 77: (share_group_describe, ShareGroupDescribeResponse),
        78: (share_fetch, ShareFetchResponse), 79: (share_acknowledge, ShareAcknowledgeResponse),
        29: (describe_acls, admin_api.DescribeAclsResponse), 30: (create_acls, admin_api.CreateAclsResponse),
        31: (delete_acls, admin_api.DeleteAclsResponse),
        55: (describe_quorum, admin_api.DescribeQuorumResponse),
    }


# The error each request above is built to get: requests about groups that do not exist
# must be answered with Kafka's code for that, in the layout of their version.
EXPECTED_ERRORS = {
    11: {0, 79},  # JoinGroup: joined (v0-3), or MEMBER_ID_REQUIRED first (v4+)
    14: {25}, 12: {25}, 13: {0, 25},  # UNKNOWN_MEMBER_ID
    42: {69}, 47: {69}, 68: {69}, 69: {69}, 76: {69}, 77: {69},  # GROUP_ID_NOT_FOUND
    43: {0, 84},  # ElectLeaders: the only replica already leads: ELECTION_NOT_NEEDED
    17: {34}, 36: {34},  # the SASL APIs on a PLAINTEXT listener: ILLEGAL_SASL_STATE
    50: {0, 91}, 51: {91},  # SCRAM credentials of a user that has none: RESOURCE_NOT_FOUND (the top level: 0)
    64: {102},  # UnregisterBroker of a node id nobody registered: BROKER_ID_NOT_REGISTERED
    # No transaction coordinator has loaded anything yet, or the producer id is unknown to it.
    24: {0, 16, 49}, 25: {16, 49}, 26: {16, 49},
    65: {16, 105},  # DescribeTransactions: no coordinator loaded yet, or the id is unknown to it
    # The share-state RPCs before anything created __share_group_state: no coordinator for them.
    83: {16}, 84: {16}, 85: {16}, 86: {16}, 87: {16},
    90: {69}, 91: {69}, 92: {69},  # the offset admin APIs of a group that is no share group
    29: {54}, 30: {54}, 31: {54},  # the ACL APIs of a cluster with no authorizer: SECURITY_DISABLED
    78: {0, 100},  # ShareFetch of a topic id nobody has: UNKNOWN_TOPIC_ID (nothing to acknowledge: 0)
}


def error_codes(response) -> list[int]:
    """Every error_code anywhere in a decoded response."""
    found = []

    def walk(value):
        if isinstance(value, list):
            for item in value:
                walk(item)
        elif hasattr(value, "_struct"):
            for name in value._struct.fields:
                child = getattr(value, name, None)
                if name == "error_code":
                    found.append(child)
                else:
                    walk(child)
    walk(response)
    return found


def test_every_advertised_version_round_trips(node):
    host, port, topic_id = node
    versions = advertised(host, port)
    builders = requests_for(versions, topic_id)
    assert set(versions) == set(builders), "a handler is advertised without a version test, or the reverse"
    checked = 0
    with socket.create_connection((host, port), timeout=10) as sock:
        # Clients find the coordinator before any group request; that creates __consumer_offsets.
        assert exchange(sock, builders[10][0](0), FindCoordinatorResponse, 0).error_code == 0
        for api_key, (low, high) in sorted(versions.items()):
            build, response_class = builders[api_key]
            for version in range(low, high + 1):
                response = exchange(sock, build(version), response_class, version)
                assert set(error_codes(response)) <= EXPECTED_ERRORS.get(api_key, {0}), (api_key, version, response)
                checked += 1
    assert checked > 130
    # The offsets committed at each OffsetCommit version are what OffsetFetch returned.
    with socket.create_connection((host, port), timeout=10) as sock:
        fetched = exchange(sock, builders[9][0](8), group_api.OffsetFetchResponse, 8)
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == versions[8][1]


def test_the_finalized_features_epoch_follows_the_metadata_log(node):
    """The answer is kept encoded; a v3 one must still name the metadata offset of the moment."""
    host, port, _ = node

    def features_now():
        with socket.create_connection((host, port), timeout=10) as sock:
            answer = exchange(sock, ApiVersionsRequest[3](client_software_name="tests", client_software_version="1"),
                              ApiVersionsResponse, 3)
        assert answer.error_code == 0
        assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
            ("metadata.version", 19, 19)]
        return answer.finalized_features_epoch, {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    epoch_before, keys_before = features_now()
    with socket.create_connection((host, port), timeout=10) as sock:
        created = exchange(sock, admin_api.CreateTopicsRequest[4](topics=[admin_api.CreateTopicsRequest.CreatableTopic(
            name="versions-epoch", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10000, validate_only=False), admin_api.CreateTopicsResponse, 4)
    assert created.topics[0].error_code == 0
    epoch_after, keys_after = features_now()
    assert epoch_before >= 0 and epoch_after > epoch_before
    assert keys_after == keys_before == advertised(host, port)
