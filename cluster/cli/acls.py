"""`kraftwerk acl add|list|remove`: ACLs in the words of kafka-acls.sh (--allow-principal, --topic,
--operation, --producer, ...), printed as it prints them; cluster/tools/acls.py does the work.

Without --bootstrap-server the ACLs go through the controller's channel of the cluster in --data-dir,
which needs no ACL of its own (the way to give the first principal its rights); with it, through
that node's Kafka admin API, as kafka-acls.sh does.
"""
from __future__ import annotations

import itertools

import click

from cluster.cli.app import admin_client, attached, bootstrap_option, data_dir_option, json_option, print_json
from cluster.formats.acls import (
    ALL, ALLOW, ANY, CLUSTER, CLUSTER_NAME, CREATE, DENY, DESCRIBE, GROUP, IDEMPOTENT_WRITE, LITERAL, OPERATIONS,
    PATTERN_TYPES, PERMISSION_TYPES, PREFIXED, READ, RESOURCE_TYPES, SUPPORTED_OPERATIONS, TOPIC, TRANSACTIONAL_ID,
    WRITE, AclBinding, AclFilter, name_of,
)
from cluster.tools.acls import AdminAcls, ControllerAcls
from cluster.tools.errors import ClusterError

# kafka-acls.sh's operation names (Read, ClusterAction, ...), and Kafka's own (READ, CLUSTER_ACTION).
_OPERATION_WORDS = {name.replace("_", "").lower(): code for name, code in OPERATIONS.items()
                    if name not in ("UNKNOWN", "ANY")}


def _operation(ctx, param, values) -> tuple[int, ...]:
    codes = []
    for value in values:
        code = _OPERATION_WORDS.get(value.replace("_", "").replace("-", "").lower())
        if code is None:
            raise click.BadParameter(f"{value!r} is not one of Read, Write, Create, Delete, Alter, Describe, "
                                     f"ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All")
        codes.append(code)
    return tuple(codes)


def resource_options(command):
    for option in reversed([
        click.option("--topic", "topics", multiple=True, help="a topic (repeatable); * is every topic"),
        click.option("--group", "groups", multiple=True, help="a consumer group (repeatable); * is every group"),
        click.option("--transactional-id", "transactional_ids", multiple=True,
                     help="a transactional id (repeatable); * is every one"),
        click.option("--cluster", "cluster_resource", is_flag=True, help="the cluster (kafka-cluster)"),
        click.option("--resource-pattern-type", default="LITERAL", show_default=True,
                     type=click.Choice(["ANY", "MATCH", "LITERAL", "PREFIXED"], case_sensitive=False),
                     help="how the resource names match: add takes LITERAL or PREFIXED; list and remove also "
                          "ANY and MATCH (every ACL that applies to the names)"),
        data_dir_option, bootstrap_option,
    ]):
        command = option(command)
    return command


def _resources(topics, groups, transactional_ids, cluster_resource) -> list[tuple[int, str]]:
    return ([(TOPIC, name) for name in topics] + [(GROUP, name) for name in groups]
            + [(TRANSACTIONAL_ID, name) for name in transactional_ids]
            + ([(CLUSTER, CLUSTER_NAME)] if cluster_resource else []))


def _channel(data_dir: str, bootstrap: str | None):
    """The ACLs' way in: a context manager giving ControllerAcls or AdminAcls."""
    if bootstrap is not None:
        return _admin_channel(data_dir, bootstrap)
    return _controller_channel(data_dir)


class _controller_channel:
    def __init__(self, data_dir: str):
        self.data_dir = data_dir

    def __enter__(self):
        return ControllerAcls(attached(self.data_dir))

    def __exit__(self, *exc):
        return False


class _admin_channel:
    def __init__(self, data_dir: str, bootstrap: str):
        self.context = admin_client(data_dir, bootstrap)

    def __enter__(self):
        return AdminAcls(self.context.__enter__())

    def __exit__(self, *exc):
        return self.context.__exit__(*exc)


def pattern_text(kind: int, name: str, pattern: int) -> str:
    """As Kafka's ResourcePattern.toString."""
    return (f"ResourcePattern(resourceType={name_of(RESOURCE_TYPES, kind)}, name={name}, "
            f"patternType={name_of(PATTERN_TYPES, pattern)})")


def entry_text(acl: AclBinding) -> str:
    """As Kafka's AccessControlEntry.toString."""
    return (f"(principal={acl.principal}, host={acl.host}, operation={name_of(OPERATIONS, acl.operation)}, "
            f"permissionType={name_of(PERMISSION_TYPES, acl.permission_type)})")


def print_by_resource(heading: str, acls: list[AclBinding]) -> None:
    """kafka-acls.sh's listing: each resource's pattern, then its entries, a tab before each."""
    by_resource: dict[tuple, list[AclBinding]] = {}
    for acl in acls:
        by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    for resource, entries in sorted(by_resource.items()):
        click.echo(f"{heading} `{pattern_text(*resource)}`: ")
        click.echo("\n".join(f" \t{entry_text(acl)} " for acl in sorted(entries, key=entry_text)))
        click.echo("")


def _as_json(acls: list[AclBinding]) -> list[dict]:
    return [{"resource_type": name_of(RESOURCE_TYPES, a.resource_type), "resource_name": a.resource_name,
             "pattern_type": name_of(PATTERN_TYPES, a.pattern_type), "principal": a.principal, "host": a.host,
             "operation": name_of(OPERATIONS, a.operation),
             "permission_type": name_of(PERMISSION_TYPES, a.permission_type)} for a in acls]


@click.group()
def acl():
    """Add, list and remove ACLs, as kafka-acls.sh does (the cluster's nodes need authorizer.class.name)."""


@acl.command("add")
@resource_options
@click.option("--allow-principal", "allow_principals", multiple=True, metavar="PRINCIPAL",
              help="User:NAME to allow (repeatable); User:* is everyone")
@click.option("--deny-principal", "deny_principals", multiple=True, metavar="PRINCIPAL",
              help="User:NAME to deny (repeatable)")
@click.option("--allow-host", "allow_hosts", multiple=True, help="a host the allowed principals may come from "
                                                                  "[default: *]")
@click.option("--deny-host", "deny_hosts", multiple=True, help="a host the denied principals are denied from "
                                                                "[default: *]")
@click.option("--operation", "operations", multiple=True, callback=_operation,
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                   "IdempotentWrite or All (repeatable) [default: All]")
@click.option("--producer", is_flag=True, help="what a producer needs: WRITE, DESCRIBE and CREATE on the topics, "
                                               "WRITE and DESCRIBE on the transactional ids")
@click.option("--consumer", is_flag=True, help="what a consumer needs: READ and DESCRIBE on the topics, READ on "
                                               "the groups")
@click.option("--idempotent", is_flag=True, help="with --producer: IDEMPOTENT_WRITE on the cluster")
def acl_add(topics, groups, transactional_ids, cluster_resource, resource_pattern_type, data_dir, bootstrap_server,
            allow_principals, deny_principals, allow_hosts, deny_hosts, operations, producer, consumer, idempotent):
    """Add ACLs: each principal, host and operation on each resource named."""
    pattern = PATTERN_TYPES[resource_pattern_type.upper()]
    if pattern not in (LITERAL, PREFIXED):
        raise click.UsageError("add takes --resource-pattern-type LITERAL or PREFIXED")
    if not allow_principals and not deny_principals:
        raise click.UsageError("add needs --allow-principal or --deny-principal")
    wanted = _wanted_operations(topics, groups, transactional_ids, cluster_resource, operations, producer,
                                consumer, idempotent)
    if not wanted:
        raise click.UsageError("add needs a resource: --topic, --group, --transactional-id or --cluster")
    bindings = [AclBinding(kind, name, pattern, principal, host, operation, permission)
                for (kind, name), resource_operations in wanted.items()
                for permission, principals, hosts in ((ALLOW, allow_principals, allow_hosts or ("*",)),
                                                      (DENY, deny_principals, deny_hosts or ("*",)))
                for principal, host, operation in itertools.product(principals, hosts, resource_operations)]
    for binding in bindings:
        _check_principal(binding.principal)
    try:
        with _channel(data_dir, bootstrap_server) as channel:
            channel.add(bindings)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    print_by_resource("Adding ACLs for resource", bindings)


def _wanted_operations(topics, groups, transactional_ids, cluster_resource, operations, producer, consumer,
                       idempotent) -> dict[tuple[int, str], tuple[int, ...]]:
    """The operations to grant on each resource, as kafka-acls.sh works them out."""
    if producer or consumer:
        wanted: dict[tuple[int, str], tuple[int, ...]] = {}
        for name in topics:
            wanted[(TOPIC, name)] = ((WRITE, DESCRIBE, CREATE) if producer else ()) + \
                ((READ, DESCRIBE) if consumer else ())
        for name in groups if consumer else ():
            wanted[(GROUP, name)] = (READ,)
        for name in transactional_ids if producer else ():
            wanted[(TRANSACTIONAL_ID, name)] = (WRITE, DESCRIBE)
        if producer and idempotent:
            wanted[(CLUSTER, CLUSTER_NAME)] = (IDEMPOTENT_WRITE,)
        return {resource: tuple(dict.fromkeys(ops)) for resource, ops in wanted.items()}
    wanted = {}
    for kind, name in _resources(topics, groups, transactional_ids, cluster_resource):
        unsupported = [op for op in operations if op != ALL and op not in SUPPORTED_OPERATIONS[kind]]
        if unsupported:
            raise click.UsageError(
                f"ResourceType {name_of(RESOURCE_TYPES, kind)} only supports operations "
                f"{', '.join(name_of(OPERATIONS, op) for op in SUPPORTED_OPERATIONS[kind])}")
        wanted[(kind, name)] = operations or (ALL,)
    return wanted


def _check_principal(principal: str) -> None:
    kind, colon, _ = principal.partition(":")
    if not (kind and colon):
        raise click.BadParameter(f"{principal!r} is not TYPE:NAME (User:alice)", param_hint="principal")


@acl.command("list")
@resource_options
@click.option("--principal", default=None, help="only the ACLs of this principal")
@json_option
def acl_list(topics, groups, transactional_ids, cluster_resource, resource_pattern_type, data_dir, bootstrap_server,
             principal, as_json):
    """The ACLs of the resources named (every ACL when none is), by resource."""
    pattern = PATTERN_TYPES[resource_pattern_type.upper()]
    resources = _resources(topics, groups, transactional_ids, cluster_resource)
    filters = [AclFilter(kind, name, pattern, principal, None, ANY, ANY) for kind, name in resources] or \
        [AclFilter(ANY, None, ANY, principal, None, ANY, ANY)]
    found: list[AclBinding] = []
    try:
        with _channel(data_dir, bootstrap_server) as channel:
            for acl_filter in filters:
                found += [a for a in channel.list(acl_filter) if a not in found]
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        print_json(_as_json(found))
    else:
        print_by_resource("Current ACLs for resource", found)


@acl.command("remove")
@resource_options
@click.option("--allow-principal", "allow_principals", multiple=True, metavar="PRINCIPAL")
@click.option("--deny-principal", "deny_principals", multiple=True, metavar="PRINCIPAL")
@click.option("--allow-host", "allow_hosts", multiple=True)
@click.option("--deny-host", "deny_hosts", multiple=True)
@click.option("--operation", "operations", multiple=True, callback=_operation)
@click.option("--force", is_flag=True, help="accepted for kafka-acls.sh's sake: nothing is asked anyway")
def acl_remove(topics, groups, transactional_ids, cluster_resource, resource_pattern_type, data_dir,
               bootstrap_server, allow_principals, deny_principals, allow_hosts, deny_hosts, operations, force):
    """Remove the ACLs named; with no principal, every ACL of the resources named."""
    pattern = PATTERN_TYPES[resource_pattern_type.upper()]
    resources = _resources(topics, groups, transactional_ids, cluster_resource)
    if not resources:
        raise click.UsageError("remove needs a resource: --topic, --group, --transactional-id or --cluster")
    if allow_principals or deny_principals:
        filters = [AclFilter(kind, name, pattern, principal, host, operation, permission)
                   for kind, name in resources
                   for permission, principals, hosts in ((ALLOW, allow_principals, allow_hosts or ("*",)),
                                                         (DENY, deny_principals, deny_hosts or ("*",)))
                   for principal, host, operation in itertools.product(principals, hosts, operations or (ALL,))]
    else:
        filters = [AclFilter(kind, name, pattern, None, None, ANY, ANY) for kind, name in resources]
    try:
        with _channel(data_dir, bootstrap_server) as channel:
            removed = channel.remove(filters)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    print_by_resource("Removed ACLs for resource", removed)
