"""pytest plugin: a running kraftwerk cluster for any test suite, with one fixture argument.

    def test_orders(kraftwerk_cluster):
        producer = KafkaProducer(bootstrap_servers=kraftwerk_cluster.bootstrap_servers)

    @pytest.mark.kraftwerk(nodes=1, config={"auto.create.topics.enable": "false"})
    def test_small(kraftwerk_cluster): ...

    @pytest.mark.kraftwerk(backend="docker")  # every process in its own container
    def test_partition(kraftwerk_cluster): ...

    @pytest.mark.kraftwerk(controllers=3)  # a KRaft quorum of three controllers
    def test_failover(kraftwerk_cluster):
        kraftwerk_cluster.kill_controller(kraftwerk_cluster.active_controller_id())

    @pytest.mark.kraftwerk(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", users=["alice"])
    def test_secured(kraftwerk_cluster):
        config = {"bootstrap.servers": kraftwerk_cluster.bootstrap_servers,
                  **kraftwerk_cluster.client_config("alice")}  # librdkafka's property names

The import stays light (the launcher loads on first use) because pytest loads this plugin
in every run of every project where kraftwerk is installed.
"""
from __future__ import annotations

import pytest


SECURITY_OPTIONS = ("security_protocol", "sasl_mechanism", "super_user", "tls", "users")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "kraftwerk(nodes=3, controllers=1, config=None, racks=None, backend='process', "
        "security_protocol=None, sasl_mechanism=None, super_user=None, users=(), tls=False): size, controllers "
        "(1, or a quorum of 3 or 5), broker config, {node id: broker.rack}, backend (process or docker), and "
        "security (as kraftwerk up's options) of the kraftwerk_cluster fixture")


@pytest.fixture
def kraftwerk_cluster(request, tmp_path):
    """A cluster on free ports, started for this test and stopped (every process killed) after it."""
    from cluster.launch.cluster import cluster_class
    from cluster.launch.security import Security

    marker = request.node.get_closest_marker("kraftwerk")
    options = marker.kwargs if marker else {}
    kind = cluster_class(options.get("backend", "process"))
    security = Security.of(**{key: options[key] for key in SECURITY_OPTIONS if key in options})
    with kind(nodes=options.get("nodes", 3), data_dir=tmp_path / "kraftwerk", node_config=options.get("config"),
              racks=options.get("racks"), controllers=options.get("controllers", 1),
              **({"security": security} if security.secured else {})) as cluster:
        yield cluster
