"""`kraftwerk quota set|list`: client quotas, in the words of `kafka-configs.sh --entity-type users|clients|ips`.

    kraftwerk quota set --user alice --client-id app producer_byte_rate=1048576
    kraftwerk quota set --client-id-default consumer_byte_rate=2097152
    kraftwerk quota set --ip 10.0.0.7 connection_creation_rate=10
    kraftwerk quota set --user alice --delete producer_byte_rate
    kraftwerk quota list

Sent as AlterClientQuotas and DescribeClientQuotas through kafka-python's admin client.
"""
from __future__ import annotations

import click
from rich.table import Table

from cluster.cli.app import admin_client, bootstrap_option, console, data_dir_option, json_option, parse_pairs, \
    print_json
from cluster.cli.errors import fail

DEFAULT = "<default>"  # how Kafka's tools print a default entity


@click.group()
def quota():
    """Set and list client quotas (users, client ids, IPs)."""


@quota.command("set")
@click.argument("quotas", nargs=-1, metavar="KEY=VALUE...")
@click.option("--user", default=None, help="the user's quota (with --client-id: that client of the user)")
@click.option("--user-default", is_flag=True, help="the default of every user")
@click.option("--client-id", default=None, help="the client id's quota")
@click.option("--client-id-default", is_flag=True, help="the default of every client id")
@click.option("--ip", default=None, help="an IP address's connection_creation_rate")
@click.option("--ip-default", is_flag=True, help="the default of every IP address")
@click.option("--delete", "deleted", multiple=True, metavar="KEY", help="remove this quota (repeatable)")
@click.option("--validate-only", is_flag=True, help="check the change, write nothing")
@data_dir_option
@bootstrap_option
def quota_set(quotas, user, user_default, client_id, client_id_default, ip, ip_default, deleted, validate_only,
              data_dir, bootstrap_server):
    """Set quotas KEY=VALUE (producer_byte_rate, consumer_byte_rate, request_percentage,
    controller_mutation_rate, connection_creation_rate) of one entity, or --delete them."""
    entity = entity_of(user, user_default, client_id, client_id_default, ip, ip_default)
    try:
        values = {key: float(value) for key, value in parse_pairs(quotas, "KEY=VALUE").items()}
    except ValueError as exc:
        raise click.BadParameter(f"a quota's value must be a number ({exc})", param_hint="KEY=VALUE") from None
    if not values and not deleted:
        raise click.UsageError("nothing to set: give KEY=VALUE or --delete KEY")
    ops = [(key, value, False) for key, value in values.items()] + [(key, 0.0, True) for key in deleted]
    with admin_client(data_dir, bootstrap_server) as admin:
        results = alter_client_quotas(admin, [(entity, ops)], validate_only)
    _, code, message = results[0]
    if code:
        fail(f"quota of {entity_text(entity)} refused: {message}")
    click.echo(f"{'checked' if validate_only else 'set'} quota of {entity_text(entity)}")


@quota.command("list")
@data_dir_option
@bootstrap_option
@json_option
def quota_list(data_dir, bootstrap_server, as_json):
    """Every client quota the cluster holds."""
    with admin_client(data_dir, bootstrap_server) as admin:
        described = describe_client_quotas(admin)
    if as_json:
        print_json([{"entity": {kind: name for kind, name in entity}, "quotas": values}
                    for entity, values in described])
        return
    table = Table("entity", "quotas")
    for entity, values in described:
        table.add_row(entity_text(entity), ", ".join(f"{key}={_number(value)}" for key, value in values.items()))
    console.print(table)


def entity_of(user, user_default, client_id, client_id_default, ip, ip_default) -> list[tuple[str, str | None]]:
    """The quota entity as (type, name) pairs; a name of None is the default."""
    entity = []
    for kind, name, default in (("user", user, user_default), ("client-id", client_id, client_id_default),
                                ("ip", ip, ip_default)):
        if name is not None and default:
            raise click.UsageError(f"--{kind} and --{kind}-default name different entities")
        if name is not None or default:
            entity.append((kind, name))
    if not entity:
        raise click.UsageError("name the entity: --user, --client-id or --ip (or their -default)")
    return entity


def entity_text(entity) -> str:
    return " ".join(f"{kind}={DEFAULT if name is None else name}" for kind, name in entity)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def alter_client_quotas(admin, alterations: list, validate_only: bool = False) -> list[tuple[list, int, str | None]]:
    """AlterClientQuotas: alterations are (entity, [(key, value, remove)]); returns (entity, error code,
    message) per entity."""
    from kafka.protocol.admin import AlterClientQuotasRequest

    E = AlterClientQuotasRequest[1].EntryData
    request = AlterClientQuotasRequest[1](validate_only=validate_only, entries=[E(
        entity=[E.EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
        ops=[E.OpData(key=key, value=value, remove=remove) for key, value, remove in ops])
        for entity, ops in alterations])
    response = admin._manager.run(admin._send_request_to_controller, request)
    return [([(e.entity_type, e.entity_name) for e in entry.entity], entry.error_code, entry.error_message)
            for entry in response.entries]


def describe_client_quotas(admin, components: list | None = None, strict: bool = False) -> list:
    """DescribeClientQuotas: [(entity as (type, name) pairs, {key: value})]; components are
    (entity type, match type, match) as Kafka's filter takes them (none: every entity)."""
    from kafka.protocol.admin import DescribeClientQuotasRequest

    C = DescribeClientQuotasRequest[1].ComponentData
    request = DescribeClientQuotasRequest[1](strict=strict, components=[
        C(entity_type=kind, match_type=match_type, match=match) for kind, match_type, match in components or ()])
    response = admin._manager.run(admin._send_request_to_controller, request)
    if response.error_code:
        fail(f"DescribeClientQuotas: {response.error_message}")
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in response.entries]
