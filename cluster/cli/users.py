"""`kraftwerk user add|list|remove`: SCRAM users, kept by the cluster as UserScramCredentialRecords,
through the AlterUserScramCredentials and DescribeUserScramCredentials admin APIs (what
`kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users` does).
The password never leaves this machine: the client sends the salted password, as Kafka's do."""
from __future__ import annotations

import secrets

import click

from cluster.cli.app import admin_client, bootstrap_option, data_dir_option, json_option, print_json
from cluster.cli.errors import fail
from cluster.formats.scram import MAX_ITERATIONS, MECHANISM_CODES, MECHANISM_NAMES, MIN_ITERATIONS

GENERATED_PASSWORD_BYTES = 18


@click.group()
def user():
    """Add, list and remove SCRAM users (SCRAM-SHA-256 / SCRAM-SHA-512 credentials)."""


@user.command("add")
@click.argument("name")
@click.option("--password", default=None, help="the user's password (default: a generated one, printed)")
@click.option("--mechanism", type=click.Choice(sorted(MECHANISM_CODES)), default="SCRAM-SHA-256", show_default=True)
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=MIN_ITERATIONS,
              show_default=True)
@data_dir_option
@bootstrap_option
@json_option
def user_add(name, password, mechanism, iterations, data_dir, bootstrap_server, as_json):
    """Add user NAME, or give it a new password for the mechanism."""
    from kafka.admin import UserScramCredentialUpsertion

    generated = password is None
    password = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES) if generated else password
    with admin_client(data_dir, bootstrap_server) as admin:
        upsertion = UserScramCredentialUpsertion(name, MECHANISM_CODES[mechanism], password, iterations=iterations)
        errors = admin.alter_user_scram_credentials([upsertion])
    if errors.get(name):
        fail(f"user '{name}': {errors[name]}")
    if as_json:
        print_json({"user": name, "mechanism": mechanism, "iterations": iterations, "password": password})
    else:
        click.echo(f"Added user '{name}' ({mechanism}, {iterations} iterations)."
                   + (f" Password: {password}" if generated else ""))


@user.command("list")
@data_dir_option
@bootstrap_option
@json_option
def user_list(data_dir, bootstrap_server, as_json):
    """Every SCRAM user with its mechanisms and iteration counts."""
    with admin_client(data_dir, bootstrap_server) as admin:
        rows = _credentials(admin)
    if as_json:
        print_json(rows)
        return
    width = max([len("USER"), *(len(r["user"]) for r in rows)])
    click.echo(f"{'USER'.ljust(width)}  {'MECHANISM'.ljust(13)}  ITERATIONS")
    for row in rows:
        click.echo(f"{row['user'].ljust(width)}  {row['mechanism'].ljust(13)}  {row['iterations']}")


@user.command("remove")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(sorted(MECHANISM_CODES)), default=None,
              help="remove only this credential (default: every one the user has)")
@data_dir_option
@bootstrap_option
def user_remove(name, mechanism, data_dir, bootstrap_server):
    """Remove user NAME's SCRAM credentials."""
    from kafka.admin import UserScramCredentialDeletion

    with admin_client(data_dir, bootstrap_server) as admin:
        held = [r["mechanism"] for r in _credentials(admin) if r["user"] == name]
        wanted = [mechanism] if mechanism else held
        if not held or (mechanism and mechanism not in held):
            fail(f"user '{name}' has no {mechanism or 'SCRAM'} credential.")
        errors = {}
        for each in wanted:  # one request each: Kafka refuses two alterations of one user in a request
            errors.update({u: e for u, e in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(name, MECHANISM_CODES[each])]).items() if e})
    if errors.get(name):
        fail(f"user '{name}': {errors[name]}")
    click.echo(f"Removed user '{name}' ({', '.join(wanted)}).")


def _credentials(admin) -> list[dict]:
    described = admin.describe_user_scram_credentials()
    return [{"user": name, "mechanism": MECHANISM_NAMES[int(info["mechanism"])], "iterations": info["iterations"]}
            for name, found in sorted(described.items()) for info in found["credential_infos"]]
