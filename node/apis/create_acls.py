"""CreateAcls v0-3: new ACLs, written by the controller as AccessControlEntryRecords.

The caller needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every ACL otherwise); with
no authorizer configured every ACL is answered SECURITY_DISABLED, as Kafka answers. Each ACL is
checked as Kafka checks it (INVALID_REQUEST: a CLUSTER resource not named kafka-cluster, an empty
name, an ANY or UNKNOWN code, a MATCH pattern type); an ACL that exists already counts as created.
The answer comes once this node has applied the records, so its next check already obeys them.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse

from cluster.formats.acls import ALTER, LITERAL
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = CreateAclsRequest
RESPONSE = CreateAclsResponse
VERSIONS = (0, 3)

Result = RESPONSE.AclCreationResult


async def handle(broker, header, request):
    if not authorizer.allowed(broker, header, ALTER):
        return _every(header, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if broker.authorizer is None:
        return _every(header, request, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    creations = [{
        "resource_type": c.resource_type, "resource_name": c.resource_name,
        "pattern_type": c.resource_pattern_type if header.api_version >= 1 else LITERAL,
        "principal": c.principal, "host": c.host, "operation": c.operation, "permission_type": c.permission_type,
    } for c in request.creations]
    try:
        reply = await broker.call_controller("create_acls", creations=creations)
    except Exception as exc:
        return _every(header, request, ErrorCode.REQUEST_TIMED_OUT, str(exc))
    if reply.get("error_code"):
        return _every(header, request, reply["error_code"], reply.get("error_message"))
    return RESPONSE[header.api_version](throttle_time_ms=0, results=[
        Result(error_code=r["error_code"], error_message=r["error_message"]) for r in reply["results"]])


def _every(header, request, code: int, message: str | None):
    return RESPONSE[header.api_version](throttle_time_ms=0, results=[
        Result(error_code=code, error_message=message) for _ in request.creations])
