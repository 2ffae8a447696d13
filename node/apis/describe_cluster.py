"""DescribeCluster v0-2: the cluster id and its brokers (fenced ones too when asked, v2+).

With an authorizer (node.security.authorizer): nothing; the cluster's authorized operations are
filled in when asked for.

Differs from Kafka: the node names itself as the controller id, where Kafka's brokers name a
random live broker (clients cannot reach the KRaft controller either way). Only broker endpoints
are served: asking for controller endpoints (KIP-919) gets UNSUPPORTED_VERSION. No ACLs, so
authorized operations are never filled in.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from cluster.formats.acls import CLUSTER
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeClusterRequest
RESPONSE = DescribeClusterResponse
VERSIONS = (0, 2)
BROKER_ENDPOINT_TYPE = 1
AUTHORIZED_OPERATIONS_OMITTED = None  # encoded as Kafka's "not requested" value, -2147483648


async def handle(broker, header, request):
    if request.endpoint_type != BROKER_ENDPOINT_TYPE:
        return RESPONSE[header.api_version](
            throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="only broker endpoints are served here", endpoint_type=request.endpoint_type,
            cluster_id=broker.cluster_id or "", controller_id=-1, brokers=[],
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    include_fenced = header.api_version >= 2 and request.include_fenced_brokers
    brokers = []
    for node_id in sorted(set(broker.image.brokers) | {broker.node_id}):
        registered = broker.image.brokers.get(node_id)
        fenced = node_id != broker.node_id and (registered is None or registered.fenced)
        if fenced and not include_fenced:
            continue
        if node_id == broker.node_id:
            endpoint = broker.endpoint_of(node_id, header.session.listener.name)
        else:
            endpoint = next(((e.host, e.port, registered.rack) for e in registered.endpoints
                             if e.name == header.session.listener.name), None)
        if endpoint is None:  # (as Kafka leaves out a broker without the client's listener)
            continue
        host, port, rack = endpoint
        brokers.append(RESPONSE.DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=rack,
                                                      is_fenced=fenced))
    return RESPONSE[header.api_version](
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, endpoint_type=BROKER_ENDPOINT_TYPE,
        cluster_id=broker.cluster_id or "", controller_id=broker.node_id, brokers=brokers,
        authorized_operations=authorizer.authorized_operations(broker, header, CLUSTER)
        if request.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED)
