"""UnregisterBroker v0: take a node out of the cluster's metadata, as `kafka-cluster.sh unregister` does.

Forwarded to the controller, which writes an UnregisterBrokerRecord (with the node's ISR places
and leaderships moved in the same batch); Metadata and DescribeCluster stop listing the node. A
node id that is not registered is answered with BROKER_ID_NOT_REGISTERED. Meant for a node that
has been drained and stopped: a running node would register again. (kafka-python carries no
schema for this API: node/apis/schemas holds it.)

With an authorizer (node.security.authorizer), the request needs ALTER on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from cluster.formats.acls import ALTER
from cluster.formats.errors import ErrorCode
from node.apis import schemas
from node.metadata_sync import ControllerUnavailable
from node.security import authorizer


class UnregisterBrokerRequest(ApiMessage, load_json=schemas):
    pass


class UnregisterBrokerResponse(ApiMessage, load_json=schemas):
    pass


REQUEST = UnregisterBrokerRequest
RESPONSE = UnregisterBrokerResponse
VERSIONS = (0, 0)


async def handle(broker, header, request):
    refusal = authorizer.refusal(broker, header, request, RESPONSE, ALTER)
    if refusal is not None:
        return refusal
    try:
        reply = await broker.call_controller("unregister_broker", node_id=request.broker_id)
    except ControllerUnavailable as exc:
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                            error_message=str(exc))
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=reply["error_code"],
                                        error_message=reply["error_message"])
