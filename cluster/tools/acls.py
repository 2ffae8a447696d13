"""ACLs of a running cluster: add, list and remove, through the controller's channel (the operator of
the cluster in --data-dir needs no ACL of its own, as a KRaft controller's operator) or through a
node's Kafka admin API (kafka-python's create/describe/delete_acls, as kafka-acls.sh does).

Bindings and filters are cluster.formats.acls' AclBinding and AclFilter, whatever the channel.
"""
from __future__ import annotations

import dataclasses

from cluster.formats.acls import AclBinding, AclFilter
from cluster.tools.errors import ClusterError, error_name

APPLY_TIMEOUT_MS = 10_000


class AclRefused(ClusterError):
    """An ACL request refused with Kafka's error `code`."""

    def __init__(self, code: int, message: str | None):
        self.code = int(code)
        super().__init__(f"{error_name(self.code)}{': ' + message if message else ''}")


class ControllerAcls:
    """ACLs through the controller's channel; answers once every running node applied them."""

    def __init__(self, cluster):
        self.cluster = cluster

    def add(self, bindings: list[AclBinding]) -> None:
        reply = self.cluster.control("create_acls", creations=[dataclasses.asdict(b) for b in bindings])
        _raise_refused(reply)
        for result in reply["results"]:
            _raise_refused(result)
        self._until_applied()

    def list(self, acl_filter: AclFilter) -> list[AclBinding]:
        reply = self.cluster.control("describe_acls", filter=dataclasses.asdict(acl_filter))
        _raise_refused(reply)
        return [AclBinding(**acl) for acl in reply["acls"]]

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        reply = self.cluster.control("delete_acls", filters=[dataclasses.asdict(f) for f in filters])
        _raise_refused(reply)
        removed = []
        for result in reply["results"]:
            _raise_refused(result)
            removed += [AclBinding(**acl) for acl in result["matching_acls"]]
        self._until_applied()
        return removed

    def _until_applied(self) -> None:
        running = sorted(node_id for node_id, node in self.cluster.nodes.items() if node.alive())
        if running:
            self.cluster.control("wait_ready", node_ids=running, timeout_ms=APPLY_TIMEOUT_MS)


class AdminAcls:
    """ACLs through a node's Kafka admin API, with a kafka-python KafkaAdminClient."""

    def __init__(self, admin):
        self.admin = admin

    def add(self, bindings: list[AclBinding]) -> None:
        created = self.admin.create_acls([_kafka_python_acl(b) for b in bindings])
        for _, error in created["failed"]:
            raise AclRefused(error.errno, str(error))

    def list(self, acl_filter: AclFilter) -> list[AclBinding]:
        from kafka.errors import KafkaError

        try:
            found, _ = self.admin.describe_acls(_kafka_python_filter(acl_filter))
        except KafkaError as exc:
            raise AclRefused(exc.errno, exc.description) from None
        return [_binding_of(acl) for acl in found]

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        removed = []
        for _, matched, error in self.admin.delete_acls([_kafka_python_filter(f) for f in filters]):
            if error.errno:
                raise AclRefused(error.errno, error.description)
            removed += [_binding_of(acl) for acl in matched]
        return removed


def _raise_refused(reply: dict) -> None:
    if reply.get("error_code"):
        raise AclRefused(reply["error_code"], reply.get("error_message"))


def _kafka_python_acl(binding: AclBinding):
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    return ACL(principal=binding.principal, host=binding.host, operation=ACLOperation(binding.operation),
               permission_type=ACLPermissionType(binding.permission_type),
               resource_pattern=ResourcePattern(ResourceType(binding.resource_type), binding.resource_name,
                                                ACLResourcePatternType(binding.pattern_type)))


def _kafka_python_filter(acl_filter: AclFilter):
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
    from kafka.admin import ResourceType

    return ACLFilter(principal=acl_filter.principal, host=acl_filter.host,
                     operation=ACLOperation(acl_filter.operation),
                     permission_type=ACLPermissionType(acl_filter.permission_type),
                     resource_pattern=ResourcePatternFilter(ResourceType(acl_filter.resource_type),
                                                            acl_filter.resource_name,
                                                            ACLResourcePatternType(acl_filter.pattern_type)))


def _binding_of(acl) -> AclBinding:
    pattern = acl.resource_pattern
    return AclBinding(int(pattern.resource_type), pattern.resource_name, int(pattern.pattern_type), acl.principal,
                      acl.host, int(acl.operation), int(acl.permission_type))
