"""DeleteAcls v0-3: the ACLs each filter matches, removed by the controller with
RemoveAccessControlEntryRecords.

The caller needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); with no authorizer
configured every filter is answered SECURITY_DISABLED. A filter matches as Kafka's AclBindingFilter
does: ANY codes and null strings match anything, MATCH selects the ACLs that apply to a resource
name (its LITERAL ACL, the `*` wildcard and the PREFIXED ACLs it begins with). A filter with an
UNKNOWN code is INVALID_REQUEST. Each filter is answered with the ACLs it matched.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import DeleteAclsRequest, DeleteAclsResponse

from node.security import authorizer

REQUEST = DeleteAclsRequest
RESPONSE = DeleteAclsResponse
VERSIONS = (0, 3)

FilterResult = RESPONSE.DeleteAclsFilterResult
MatchingAcl = FilterResult.DeleteAclsMatchingAcl


async def handle(broker, header, request):
    filters = [authorizer.filter_fields(header, f) for f in request.filters]
    reply = await authorizer.forward_acl_change(broker, header, "delete_acls", filters=filters)
    if reply.get("error_code"):
        return _every(header, request, reply["error_code"], reply.get("error_message"))
    return RESPONSE[header.api_version](throttle_time_ms=0, filter_results=[
        FilterResult(error_code=r["error_code"], error_message=r["error_message"],
                     matching_acls=[_matching(acl) for acl in r["matching_acls"]])
        for r in reply["results"]])


def _matching(acl: dict):
    return MatchingAcl(error_code=0, error_message=None, resource_type=acl["resource_type"],
                       resource_name=acl["resource_name"], pattern_type=acl["pattern_type"],
                       principal=acl["principal"], host=acl["host"], operation=acl["operation"],
                       permission_type=acl["permission_type"])


def _every(header, request, code: int, message: str | None):
    return RESPONSE[header.api_version](throttle_time_ms=0, filter_results=[
        FilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in request.filters])
