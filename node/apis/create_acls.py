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

from cluster.formats.acls import LITERAL
from node.security import authorizer

REQUEST = CreateAclsRequest
RESPONSE = CreateAclsResponse
VERSIONS = (0, 3)

Result = RESPONSE.AclCreationResult


async def handle(broker, header, request):
    reply = await authorizer.forward_acl_change(broker, header, "create_acls", creations=_creations(header, request))
    if reply.get("error_code"):
        return _every(header, request, reply["error_code"], reply.get("error_message"))
    return RESPONSE[header.api_version](throttle_time_ms=0, results=[
        Result(error_code=r["error_code"], error_message=r["error_message"]) for r in reply["results"]])


def _creations(header, request) -> list[dict]:
    return [{
        "resource_type": c.resource_type, "resource_name": c.resource_name,
        "pattern_type": c.resource_pattern_type if header.api_version >= 1 else LITERAL,
        "principal": c.principal, "host": c.host, "operation": c.operation, "permission_type": c.permission_type,
    } for c in request.creations]


def _every(header, request, code: int, message: str | None):
    return RESPONSE[header.api_version](throttle_time_ms=0, results=[
        Result(error_code=code, error_message=message) for _ in request.creations])
