"""Kafka's StandardAuthorizer over the ACLs of the node's metadata image.

On only when `authorizer.class.name` names it (org.apache.kafka.metadata.authorizer.StandardAuthorizer,
or the ZooKeeper-era kafka.security.authorizer.AclAuthorizer, taken as the same); then
`broker.authorizer` is an Authorizer, else None and every check below costs one attribute test.

A principal in `super.users` (semicolon-separated, "User:admin;User:broker") may do anything. Else
the ACLs that apply to the resource decide: those on its exact name (LITERAL), on the wildcard `*`
(LITERAL) and on every prefix of its name (PREFIXED); of those, the ones whose principal is the
client's or `User:*`, whose host is `*` or the client's address, and whose operation is the one
asked, ALL, or (ALLOW only) one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE,
ALTER_CONFIGS implies DESCRIBE_CONFIGS. A matching DENY beats any ALLOW. With no matching ACL the
answer is no, unless the resource has no ACL at all and `allow.everyone.if.no.acl.found` is true.

The ACLs are indexed by (resource type, name) for LITERAL ones and by (resource type, prefix) for
PREFIXED ones, with the distinct prefix lengths of each resource type, so finding the ACLs of a
resource costs a few dict lookups however many ACLs there are (Kafka's StandardAuthorizerData walks a
sorted set to the same end), and what was found is kept per resource: a check of a resource asked
about before costs one. The index is rebuilt when the image has applied an ACL record since it was
built.

API modules call `allowed`, `denied` (the names of several resources refused), `denied_topic_ids`,
`refusal` (the whole request answered with the resource type's *_AUTHORIZATION_FAILED, as Kafka's
getErrorResponse), `config_refusal`, `allowed_by_type` and `authorized_operations` with the
request's header; that is all they know of ACLs. The ACL APIs themselves share `acl_api_refusal`,
`forward_acl_change` and `filter_fields`. The principal is the header's session's
(User:ANONYMOUS on a PLAINTEXT listener), the host its client's address.
"""
from __future__ import annotations

import logging

from cluster.formats.acls import (
    ALL, ALLOW, ALTER, CLUSTER, CLUSTER_NAME, DESCRIBE, DESCRIBE_CONFIGS, GROUP, IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS, LITERAL, OPERATIONS, PREFIXED, RESOURCE_TYPES, SUPPORTED_OPERATIONS, TOPIC,
    TRANSACTIONAL_ID, WILDCARD, WILDCARD_PRINCIPAL, name_of,
)
from cluster.formats.config import ConfigError
from cluster.formats.errors import ErrorCode
from node.faults import error_response
from node.security.session import ANONYMOUS

log = logging.getLogger(__name__)

AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
})
NO_ACLS: tuple = ()
APPLYING_KEPT = 100_000  # resources whose applying ACLs an index keeps, at most
# The error a request refused on a resource of each type gets.
FAILED = {TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED, GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
          CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
          TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


class AclIndex:
    """The image's ACLs by what a check looks them up by."""

    def __init__(self, acls):
        self.literal: dict[tuple[int, str], list] = {}
        self.prefixed: dict[tuple[int, str], list] = {}
        lengths: dict[int, set[int]] = {}
        for acl in acls:
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == LITERAL:
                self.literal.setdefault(key, []).append(acl)
            elif acl.pattern_type == PREFIXED:
                self.prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
        self.prefix_lengths = {kind: tuple(sorted(found)) for kind, found in lengths.items()}
        self._applying: dict[tuple[int, str], tuple] = {}

    def applying_to(self, resource_type: int, name: str) -> tuple:
        """Every ACL whose pattern covers this resource (Kafka's checkSection, twice); kept per
        resource, as the same resources are asked about again and again."""
        key = (resource_type, name)
        found = self._applying.get(key)
        if found is None:
            if len(self._applying) >= APPLYING_KEPT:
                self._applying.clear()
            found = self._applying[key] = self._find(resource_type, name)
        return found

    def _find(self, resource_type: int, name: str) -> tuple:
        found = list(self.literal.get((resource_type, name), NO_ACLS))
        if name != WILDCARD:
            found += self.literal.get((resource_type, WILDCARD), NO_ACLS)
        for length in self.prefix_lengths.get(resource_type, NO_ACLS):
            if length > len(name):
                break
            found += self.prefixed.get((resource_type, name[:length]), NO_ACLS)
        return tuple(found)

    def of_type(self, resource_type: int):
        for (kind, _), acls in (*self.literal.items(), *self.prefixed.items()):
            if kind == resource_type:
                yield from acls


class Authorizer:
    def __init__(self, super_users: frozenset[str], allow_if_no_acl: bool):
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._index = AclIndex(())
        self._built_at = 0  # the image's acl_changes the index was built at

    @classmethod
    def from_config(cls, config) -> "Authorizer | None":
        name = config.get("authorizer.class.name").strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise ConfigError(f"authorizer.class.name={name}: kraftwerk serves only "
                             f"{' and '.join(sorted(AUTHORIZER_CLASSES))}")
        super_users = frozenset(p.strip() for p in config.get("super.users").split(";") if p.strip())
        return cls(super_users, config.get_bool("allow.everyone.if.no.acl.found"))

    def index(self, image) -> AclIndex:
        if image.acl_changes != self._built_at:
            self._built_at = image.acl_changes
            self._index = AclIndex(image.acls.values())
        return self._index

    def allows(self, image, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.index(image).applying_to(resource_type, name)
        verdict = _verdict(acls, principal, host, operation)
        if verdict is None:
            verdict = self.allow_if_no_acl and not acls
        if not verdict:
            log.debug("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s",
                      principal, name_of(OPERATIONS, operation), host, name_of(RESOURCE_TYPES, resource_type), name)
        return verdict

    def allows_some(self, image, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do this to some resource
        of the type, i.e. does an ALLOW apply that no DENY covers?"""
        if self.allows(image, principal, host, operation, resource_type, "hardcode"):
            return True
        acls = [acl for acl in self.index(image).of_type(resource_type)
                if _entry_matches(acl, principal, host, operation)]
        denies = [acl for acl in acls if acl.permission_type != ALLOW]
        return any(not any(_covers(deny, allow) for deny in denies)
                   for allow in acls if allow.permission_type == ALLOW)


def _verdict(acls, principal: str, host: str, operation: int) -> bool | None:
    """False when a DENY matches, True when only ALLOWs do, None when none does."""
    verdict = None
    for acl in acls:
        if _entry_matches(acl, principal, host, operation):
            if acl.permission_type != ALLOW:
                return False
            verdict = True
    return verdict


def _entry_matches(acl, principal: str, host: str, operation: int) -> bool:
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return False
    if acl.host != WILDCARD and acl.host != host:
        return False
    if acl.operation == ALL or acl.operation == operation:
        return True
    if acl.permission_type != ALLOW:
        return False  # a DENY of READ does not deny DESCRIBE
    if operation == DESCRIBE:
        return acl.operation in IMPLIES_DESCRIBE
    if operation == DESCRIBE_CONFIGS:
        return acl.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


def _covers(deny, allow) -> bool:
    """Whether a DENY's pattern covers every resource an ALLOW's does."""
    if deny.pattern_type == LITERAL:
        return deny.resource_name == WILDCARD or (
            allow.pattern_type == LITERAL and allow.resource_name == deny.resource_name)
    return allow.resource_name.startswith(deny.resource_name)


# --- what API modules call ---

def _who(header) -> tuple[str, str]:
    session = header.session
    return (session.principal, session.client_host) if session is not None else (ANONYMOUS, "")


def allowed(broker, header, operation: int, resource_type: int = CLUSTER, name: str = CLUSTER_NAME) -> bool:
    """May the request's principal do `operation` to this resource (the cluster by default)?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    principal, host = _who(header)
    return authorizer.allows(broker.image, principal, host, operation, resource_type, name)


def denied(broker, header, operation: int, resource_type: int, names) -> set[str]:
    """Of these resource names, those the request's principal may not act on (none without an authorizer)."""
    authorizer = broker.authorizer
    if authorizer is None:
        return set()
    principal, host = _who(header)
    image = broker.image
    return {name for name in set(names)
            if not authorizer.allows(image, principal, host, operation, resource_type, name)}


def allowed_by_type(broker, header, operation: int, resource_type: int) -> bool:
    """May the request's principal do `operation` to some resource of this type?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    principal, host = _who(header)
    return authorizer.allows_some(broker.image, principal, host, operation, resource_type)


def authorized_operations(broker, header, resource_type: int, name: str = CLUSTER_NAME) -> set[int]:
    """The operations of the resource the principal may do, as kafka-python's bit-field fields take them."""
    return {operation for operation in SUPPORTED_OPERATIONS[resource_type]
            if allowed(broker, header, operation, resource_type, name)}


def bit_field(operations: set[int]) -> int:
    """An authorized-operations field as an int32: bit n set when operation n is allowed."""
    return sum(1 << operation for operation in operations)


def refusal(broker, header, request, response_class, operation: int, resource_type: int = CLUSTER,
            name: str = CLUSTER_NAME):
    """None when the principal may do `operation` to the resource; else the whole request's answer,
    as Kafka's getErrorResponse gives it with the resource type's *_AUTHORIZATION_FAILED: the
    top-level error code alone where the version has one, else every entry's."""
    if allowed(broker, header, operation, resource_type, name):
        return None
    code, version = FAILED[resource_type], header.api_version
    if "error_code" in {field.name for field in response_class._struct.untagged_fields(version)}:
        return response_class[version](throttle_time_ms=0, error_code=code)
    return error_response(response_class, request, version, code)


# DescribeConfigs' and AlterConfigs' resource types (TOPIC 2, BROKER 4, BROKER_LOGGER 8, GROUP 32)
# and the ACL resource each is authorized on.
_CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER, 8: CLUSTER, 32: GROUP}


def config_refusal(broker, header, operation: int, config_resource_type: int, name: str) -> ErrorCode | None:
    """The *_AUTHORIZATION_FAILED of a config resource the principal may not DESCRIBE_CONFIGS or
    ALTER_CONFIGS (a broker's configs are the cluster's); None when allowed."""
    resource_type = _CONFIG_RESOURCES.get(config_resource_type)
    if broker.authorizer is None or resource_type is None:
        return None
    if allowed(broker, header, operation, resource_type, CLUSTER_NAME if resource_type == CLUSTER else name):
        return None
    return FAILED[resource_type]


def denied_topic_ids(broker, header, operation: int, topic_ids) -> set:
    """Of these topic ids, those of topics the principal may not act on (none without an authorizer)."""
    if broker.authorizer is None:
        return set()
    names = {topic_id: info.name for topic_id in set(topic_ids) if (info := broker.topic_by_id(topic_id))}
    denied_names = denied(broker, header, operation, TOPIC, names.values())
    return {topic_id for topic_id, name in names.items() if name in denied_names}


# --- what CreateAcls, DescribeAcls and DeleteAcls share (Kafka's AclApis) ---

NO_AUTHORIZER = "No Authorizer is configured."


def acl_api_refusal(broker, header, operation: int, disabled_message: str = NO_AUTHORIZER) -> tuple[int, str] | None:
    """The error and message a whole ACL request is answered with, in Kafka's order:
    CLUSTER_AUTHORIZATION_FAILED when the principal may not do `operation` to the cluster, then
    SECURITY_DISABLED when no authorizer is configured; None when neither."""
    if not allowed(broker, header, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, disabled_message
    return None


async def forward_acl_change(broker, header, op: str, **args) -> dict:
    """A CreateAcls or DeleteAcls (which need ALTER on the cluster) forwarded to the controller as `op`:
    its reply, or {"error_code", "error_message"} when the whole request is refused, here or by the
    controller (REQUEST_TIMED_OUT when it cannot be reached)."""
    refused = acl_api_refusal(broker, header, ALTER)
    if refused is not None:
        code, message = refused
        return {"error_code": code, "error_message": message}
    try:
        return await broker.call_controller(op, **args)
    except Exception as exc:
        return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(exc)}


def filter_fields(header, acl_filter) -> dict:
    """A DescribeAcls request's filter, or one of a DeleteAcls', in AclFilter's fields (v0 filters
    have no pattern type: LITERAL)."""
    return {"resource_type": acl_filter.resource_type_filter, "resource_name": acl_filter.resource_name_filter,
            "pattern_type": acl_filter.pattern_type_filter if header.api_version >= 1 else LITERAL,
            "principal": acl_filter.principal_filter, "host": acl_filter.host_filter,
            "operation": acl_filter.operation, "permission_type": acl_filter.permission_type}
