"""DescribeClientQuotas v0-1: the quotas of the entities that match a filter, from this node's image.

Each filter component names an entity type (user, client-id, ip) and matches an exact name (0), the
default (1) or any name (2); with strict, only entities of exactly the filter's types match. A
malformed filter (an empty or repeated type, a match string where none belongs or missing where one
does, ip beside user or client-id) is answered with INVALID_REQUEST, an unknown entity type with
UNSUPPORTED_VERSION, as Kafka's ClientQuotasImage answers; entries is then null.

With an authorizer (node.security.authorizer), the request needs DESCRIBE_CONFIGS on the cluster;
what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Same as Kafka.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse

from cluster.formats.acls import DESCRIBE_CONFIGS
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeClientQuotasRequest
RESPONSE = DescribeClientQuotasResponse
VERSIONS = (0, 1)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_TYPES = ("user", "client-id", "ip")


class FilterRefused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


async def handle(broker, header, request):
    response = RESPONSE[header.api_version]
    if not authorizer.allowed(broker, header, DESCRIBE_CONFIGS):
        return response(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                        entries=None)
    try:
        exact, specified = _filter(request.components)
    except FilterRefused as exc:
        return response(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), entries=None)
    Entry = response.EntryData
    entries = [Entry(entity=[Entry.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
                     values=[Entry.ValueData(key=key, value=value) for key, value in sorted(quotas.items())])
               for entity, quotas in sorted(broker.image.client_quotas.items(), key=_sort_key)
               if _matches(dict(entity), exact, specified, request.strict)]
    return response(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


def _filter(components) -> tuple[dict, set]:
    exact: dict = {}
    specified: set = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise FilterRefused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise FilterRefused(ErrorCode.INVALID_REQUEST, f"Entity type {kind} cannot appear more than once in "
                                                           f"the filter.")
        if kind not in _TYPES:
            raise FilterRefused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise FilterRefused(ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match "
                                                               "string to null.")
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise FilterRefused(ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also "
                                                               "specified a match string.")
            exact[kind] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise FilterRefused(ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also "
                                                               "specified a match string.")
            specified.add(kind)
        else:
            raise FilterRefused(ErrorCode.INVALID_REQUEST, f"Unknown match type {component.match_type}")
    kinds = set(exact) | specified
    if "ip" in kinds and kinds & {"user", "client-id"}:
        raise FilterRefused(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                       "component should not be used with user or clientId filter "
                                                       "component.")
    return exact, specified


def _matches(entity: dict, exact: dict, specified: set, strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(specified):
        return False
    return (all(kind in entity and entity[kind] == name for kind, name in exact.items())
            and all(kind in entity for kind in specified))


def _sort_key(item) -> tuple:
    return tuple((kind, name is not None, name or "") for kind, name in item[0])
