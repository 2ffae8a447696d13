"""DescribeAcls v0-3: the ACLs a filter matches, from this node's metadata image, grouped by resource.

The caller needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); with no
authorizer configured the answer is SECURITY_DISABLED. The filter matches as Kafka's
AclBindingFilter does: ANY codes and null strings match anything, MATCH selects the ACLs that apply
to a resource name. A filter with an UNKNOWN code is INVALID_REQUEST.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse

from cluster.formats.acls import DESCRIBE, AclFilter
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeAclsRequest
RESPONSE = DescribeAclsResponse
VERSIONS = (0, 3)

Resource = RESPONSE.DescribeAclsResource
Description = Resource.AclDescription


async def handle(broker, header, request):
    refused = authorizer.acl_api_refusal(broker, header, DESCRIBE, "No Authorizer is configured on the broker")
    if refused is not None:
        return _refused(header, *refused)
    acl_filter = AclFilter(**authorizer.filter_fields(header, request))
    error = acl_filter.unknown_error()
    if error is not None:
        return _refused(header, ErrorCode.INVALID_REQUEST, error)
    resources: dict[tuple, list] = {}
    for acl in broker.image.acls.values():
        if acl_filter.matches(acl):
            resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                Description(principal=acl.principal, host=acl.host, operation=acl.operation,
                            permission_type=acl.permission_type))
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=0, error_message=None, resources=[
        Resource(resource_type=kind, resource_name=name, pattern_type=pattern, acls=acls)
        for (kind, name, pattern), acls in sorted(resources.items())])


def _refused(header, code: int, message: str):
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=code, error_message=message, resources=[])
