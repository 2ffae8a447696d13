import pytest

from cluster.formats.config import BrokerConfig, ConfigError, parse_listener, parse_properties
from cluster.formats.listeners import ListenerSpec, advertised_listeners, broker_listeners


def test_server_properties_parsing():
    props = parse_properties("# comment\n! also\nnode.id=3\nlisteners = PLAINTEXT://0.0.0.0:9092\nlog.dirs: /data\n\n")
    assert props == {"node.id": "3", "listeners": "PLAINTEXT://0.0.0.0:9092", "log.dirs": "/data"}


def test_broker_config_defaults_and_listeners():
    config = BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:0", "controller.quorum.bootstrap.servers": "localhost:9093"})
    assert config.node_id == 1
    assert advertised_listeners(config, {"PLAINTEXT": 4567}) == [ListenerSpec("PLAINTEXT", "127.0.0.1", 4567, "PLAINTEXT")]
    assert config.controller_address() == ("localhost", 9093)
    assert config.topic_defaults()["retention.ms"] == "604800000"
    assert parse_listener("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)


def test_kafka_quickstart_combined_roles_and_listeners():
    config = BrokerConfig({
        "process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": "1@localhost:9093",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/tmp/kraft-combined-logs"})
    config.check_roles()
    assert config.process_roles == {"broker", "controller"}
    assert broker_listeners(config) == [ListenerSpec("PLAINTEXT", "", 9092, "PLAINTEXT")]
    assert config.controller_listener() == ("CONTROLLER", "", 9093)
    assert advertised_listeners(config, {"PLAINTEXT": 9092}) == [ListenerSpec("PLAINTEXT", "localhost", 9092, "PLAINTEXT")]
    assert config.controller_address() == ("localhost", 9093)
    assert str(config.metadata_log_dir) == "/tmp/kraft-combined-logs"


@pytest.mark.parametrize("values, message", [
    ({"controller.quorum.voters": "1@a:9093,2@b:9093"}, "names 2 voters; kraftwerk runs a single controller"),
    ({"controller.quorum.bootstrap.servers": "a:9093,b:9093"}, "names 2 controllers"),
    ({"controller.quorum.voters": "a:9093"}, "is not id@host:port"),
    ({"process.roles": "broker"}, "either controller.quorum.bootstrap.servers must contain"),
    ({"process.roles": "controller", "controller.quorum.voters": "2@a:9093",
      "listeners": "CONTROLLER://:9093"}, "the node id 1 must be included in the set of voters"),
    ({"process.roles": "controller", "controller.quorum.voters": "1@a:9093"}, "a controller needs a listener named"),
    ({"process.roles": "zookeeper"}, "each role must be broker or controller"),
])
def test_role_settings_kafka_refuses_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(values).check_roles()


@pytest.mark.parametrize("values, message", [
    ({"replica.fetch.wait.max.ms": "40000"}, "replica.socket.timeout.ms should always be at least replica.fetch"),
    ({"replica.fetch.wait.max.ms": "2000", "replica.lag.time.max.ms": "1500"},
     "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms"),
])
def test_replica_fetch_timings_kafka_refuses_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(values).check_replica_fetch()


def test_replica_fetchers_take_their_timings_from_the_config(tmp_path):
    from node.broker import Broker

    BrokerConfig({}).check_replica_fetch()  # Kafka's defaults pass
    broker = Broker(BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path), "replica.fetch.wait.max.ms": "100",
                                  "replica.socket.timeout.ms": "2500"}))
    assert (broker.fetchers.max_wait_ms, broker.fetchers.socket_timeout_s) == (100, 2.5)


def test_several_listeners_with_their_security_protocols_and_the_inter_broker_one():
    from cluster.formats.listeners import inter_broker_listener_name

    config = BrokerConfig({
        "listeners": "INTERNAL://0.0.0.0:9091,external://:9092,SASL_SSL://:9093,CONTROLLER://:9094",
        "advertised.listeners": "EXTERNAL://kafka.example:19092",
        "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL"})
    assert broker_listeners(config) == [ListenerSpec("INTERNAL", "0.0.0.0", 9091, "SSL"),
                                        ListenerSpec("EXTERNAL", "", 9092, "SASL_PLAINTEXT"),
                                        ListenerSpec("SASL_SSL", "", 9093, "SASL_SSL")]
    assert advertised_listeners(config, {"INTERNAL": 9091, "EXTERNAL": 9092, "SASL_SSL": 9093}) == [
        ListenerSpec("INTERNAL", "127.0.0.1", 9091, "SSL"), ListenerSpec("EXTERNAL", "kafka.example", 19092, "SASL_PLAINTEXT"),
        ListenerSpec("SASL_SSL", "127.0.0.1", 9093, "SASL_SSL")]
    assert inter_broker_listener_name(config) == "INTERNAL"
    # security.inter.broker.protocol names a listener; one the node lacks falls back to the first
    assert inter_broker_listener_name(BrokerConfig({"listeners": "SSL://:1,PLAINTEXT://:2"})) == "PLAINTEXT"
    assert inter_broker_listener_name(BrokerConfig({"listeners": "SSL://:1"})) == "SSL"


@pytest.mark.parametrize("values, message", [
    ({"listeners": "EXTERNAL://:9092"}, "listener EXTERNAL has no security protocol"),
    ({"listeners": "A://:1", "listener.security.protocol.map": "A:TLS"}, "is not NAME:PROTOCOL"),
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "names PLAINTEXT twice"),
    ({"listeners": "PLAINTEXT://:1", "inter.broker.listener.name": "INTERNAL"}, "is not among listeners"),
])
def test_listener_settings_that_cannot_work_are_refused(values, message):
    from cluster.formats.listeners import inter_broker_listener_name

    with pytest.raises(ConfigError, match=message):
        inter_broker_listener_name(BrokerConfig(values))
