"""What every `kraftwerk` command shares: the root group, the console, the common options and the
ways to reach the cluster in --data-dir and its brokers."""
from __future__ import annotations

import json
from contextlib import contextmanager

import click
from rich.console import Console

from cluster.cli.errors import CommandLine, fail, kafka_exception_text
from cluster.launch.cluster import Cluster, ClusterError

DEFAULT_DATA_DIR = "./.kraftwerk"
console = Console()

data_dir_option = click.option("--data-dir", default=DEFAULT_DATA_DIR, show_default=True, type=click.Path(),
                               help="where the cluster keeps its data, logs and cluster.json")
bootstrap_option = click.option("--bootstrap-server", default=None,
                                help="host:port of a node (default: the cluster in --data-dir)")
json_option = click.option("--json", "as_json", is_flag=True, help="print the same facts as JSON, for scripts")


def print_json(document) -> None:
    click.echo(json.dumps(document, indent=2))


def parse_pairs(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=what)
        parsed[key.strip()] = value.strip()
    return parsed


# The client settings (kafka-python's names) of the cluster this command talks to: its
# cluster.json's client_config, read once the command knows its --data-dir.
_client_security: dict = {}


def attached(data_dir: str) -> Cluster:
    try:
        cluster = Cluster.attach(data_dir)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    if not cluster.running():
        raise click.ClickException(f"the cluster in {data_dir} is not running (kraftwerk up starts it)")
    _client_security.update(_kafka_python_config(cluster))
    return cluster


def bootstrap_servers(data_dir: str, bootstrap: str | None) -> str:
    """--bootstrap-server, else the cluster's in --data-dir; either way, the command connects with the
    client settings of the cluster in --data-dir (TLS, SASL) when it has some."""
    if bootstrap is None:
        return attached(data_dir).bootstrap_servers
    try:
        _client_security.update(_kafka_python_config(Cluster.attach(data_dir)))
    except ClusterError:
        pass  # a cluster kraftwerk did not start: plaintext
    return bootstrap


def _kafka_python_config(cluster: Cluster) -> dict:
    try:
        return cluster.kafka_python_config()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(cls=CommandLine)
@click.version_option(package_name="kraftwerk")
def main():
    """kraftwerk: a Kafka-compatible cluster on one machine."""


# How long a command tries to reach a broker before it says it cannot (kafka-python waits 30 s).
BOOTSTRAP_TIMEOUT_MS = 10_000


def connect_failure(bootstrap: str, exc: Exception) -> str:
    return f"cannot reach a Kafka broker at {bootstrap} ({kafka_exception_text(exc)})"


def connected(client_class, bootstrap: str, **config):
    """A kafka-python producer or consumer for the CLI; a cluster it cannot reach is a one-line error."""
    from kafka.errors import KafkaError

    try:
        return client_class(bootstrap_servers=bootstrap, client_id="kraftwerk-cli",
                            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS, **_client_security, **config)
    except KafkaError as exc:
        fail(connect_failure(bootstrap, exc))


@contextmanager
def admin_client(data_dir: str, bootstrap: str | None):
    """A Kafka admin client for the cluster; a cluster it cannot reach is a one-line CLI error."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    servers = bootstrap_servers(data_dir, bootstrap)
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, client_id="kraftwerk-cli",
                                 bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS, **_client_security)
    except KafkaError as exc:
        fail(connect_failure(servers, exc))
    try:
        yield admin
    finally:
        admin.close()
