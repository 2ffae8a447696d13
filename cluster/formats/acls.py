"""ACLs in Kafka's terms: the codes of resource types, pattern types, operations and permission
types, binding filters as DescribeAcls and DeleteAcls match them, and the checks CreateAcls makes.

An ACL binding is a resource pattern (type, name, pattern type) and an entry (principal, host,
operation, permission). Kept as AccessControlEntryRecords in the metadata log, and in the image as
AclBindings keyed by their record's id.
"""
from __future__ import annotations

from dataclasses import dataclass

from cluster.formats.errors import ErrorCode

# org.apache.kafka.common.resource.ResourceType
RESOURCE_UNKNOWN, RESOURCE_ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = range(8)
RESOURCE_TYPES = {"UNKNOWN": RESOURCE_UNKNOWN, "ANY": RESOURCE_ANY, "TOPIC": TOPIC, "GROUP": GROUP,
                  "CLUSTER": CLUSTER, "TRANSACTIONAL_ID": TRANSACTIONAL_ID,
                  "DELEGATION_TOKEN": DELEGATION_TOKEN, "USER": USER}

# org.apache.kafka.common.resource.PatternType
PATTERN_UNKNOWN, PATTERN_ANY, MATCH, LITERAL, PREFIXED = range(5)
PATTERN_TYPES = {"UNKNOWN": PATTERN_UNKNOWN, "ANY": PATTERN_ANY, "MATCH": MATCH, "LITERAL": LITERAL,
                 "PREFIXED": PREFIXED}

# org.apache.kafka.common.acl.AclOperation
(OPERATION_UNKNOWN, OPERATION_ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
 DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(15)
OPERATIONS = {"UNKNOWN": OPERATION_UNKNOWN, "ANY": OPERATION_ANY, "ALL": ALL, "READ": READ, "WRITE": WRITE,
              "CREATE": CREATE, "DELETE": DELETE, "ALTER": ALTER, "DESCRIBE": DESCRIBE,
              "CLUSTER_ACTION": CLUSTER_ACTION, "DESCRIBE_CONFIGS": DESCRIBE_CONFIGS,
              "ALTER_CONFIGS": ALTER_CONFIGS, "IDEMPOTENT_WRITE": IDEMPOTENT_WRITE,
              "CREATE_TOKENS": CREATE_TOKENS, "DESCRIBE_TOKENS": DESCRIBE_TOKENS}

# org.apache.kafka.common.acl.AclPermissionType
PERMISSION_UNKNOWN, PERMISSION_ANY, DENY, ALLOW = range(4)
PERMISSION_TYPES = {"UNKNOWN": PERMISSION_UNKNOWN, "ANY": PERMISSION_ANY, "DENY": DENY, "ALLOW": ALLOW}

ANY = 1  # the code of ANY in each of the four enums

# The one name a CLUSTER resource has, and the name and host that match any.
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# The operations an ALLOW of another operation implies (Kafka's StandardAuthorizerData).
IMPLIES_DESCRIBE = frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS})

# The operations each resource type has, as Kafka's AclEntry.supportedOperations lists them; an
# answer's authorized-operations bit field is made of these.
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
    DELEGATION_TOKEN: (DESCRIBE,),
    USER: (CREATE_TOKENS, DESCRIBE_TOKENS),
}


def name_of(codes: dict[str, int], code: int) -> str:
    for name, value in codes.items():
        if value == code:
            return name
    return "UNKNOWN"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry, as CreateAcls carries it."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' filter and each of DeleteAcls' (Kafka's AclBindingFilter); a None string
    field matches anything, as do the ANY codes."""
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def matches(self, acl: AclBinding) -> bool:
        """Whether this filter selects an ACL."""
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl) -> bool:
        if self.resource_type not in (RESOURCE_ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PATTERN_ANY, MATCH, acl.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PATTERN_ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        # MATCH: the ACLs that would apply to a resource of this name
        if acl.pattern_type == LITERAL:
            return acl.resource_name in (self.resource_name, WILDCARD)
        if acl.pattern_type == PREFIXED:
            return self.resource_name.startswith(acl.resource_name)
        return False

    def _matches_entry(self, acl) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (OPERATION_ANY, acl.operation)
                and self.permission_type in (PERMISSION_ANY, acl.permission_type))

    def unknown_error(self) -> str | None:
        """Kafka's AclControlManager.validateFilter: a filter with an UNKNOWN code (or one Kafka does
        not know, which it reads as UNKNOWN) is refused."""
        if not (_known(self.resource_type, RESOURCE_TYPES) and _known(self.pattern_type, PATTERN_TYPES)):
            return "Unknown patternFilter."
        if not (_known(self.operation, OPERATIONS) and _known(self.permission_type, PERMISSION_TYPES)):
            return "Unknown entryFilter."
        return None


def _known(code: int, codes: dict[str, int]) -> bool:
    return code != codes["UNKNOWN"] and code in codes.values()


class InvalidAcl(Exception):
    """An ACL CreateAcls refuses, with Kafka's error code and message."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST):
        super().__init__(message)
        self.code = code
        self.message = message


def check_new_acl(acl: AclBinding) -> None:
    """The checks of Kafka's AclApis and AclControlManager.validateNewAcl, in their order."""
    if acl.resource_type == CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.resource_name:
        raise InvalidAcl("Invalid empty resource name")
    if acl.resource_type not in SUPPORTED_OPERATIONS:
        raise InvalidAcl(f"Invalid resourceType {name_of(RESOURCE_TYPES, acl.resource_type)}")
    if acl.pattern_type not in (LITERAL, PREFIXED):
        raise InvalidAcl(f"Invalid patternType {name_of(PATTERN_TYPES, acl.pattern_type)}")
    if acl.operation not in OPERATIONS.values() or acl.operation in (OPERATION_UNKNOWN, OPERATION_ANY):
        raise InvalidAcl(f"Invalid operation {name_of(OPERATIONS, acl.operation)}")
    if acl.permission_type not in (DENY, ALLOW):
        raise InvalidAcl(f"Invalid permissionType {name_of(PERMISSION_TYPES, acl.permission_type)}")
    if not _is_principal(acl.principal):
        raise InvalidAcl(f"Could not parse principal from `{acl.principal}` (no colon is present separating "
                         f"the principal type from the principal name)")


def _is_principal(principal: str) -> bool:
    kind, colon, name = principal.partition(":")
    return bool(kind and colon)
