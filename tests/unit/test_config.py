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
    assert config.controller_addresses() == [("localhost", 9093)]
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
    assert config.controller_addresses() == [("localhost", 9093)]
    assert str(config.metadata_log_dir) == "/tmp/kraft-combined-logs"


def test_every_controller_of_a_quorum_is_an_address_a_node_tries():
    voters = "3000@c1.example:9093,3001@[::1]:9094,3002@c3.example:9095"
    assert BrokerConfig({"controller.quorum.voters": voters}).quorum_voters() == [
        (3000, "c1.example", 9093), (3001, "::1", 9094), (3002, "c3.example", 9095)]
    assert BrokerConfig({"controller.quorum.voters": voters}).controller_addresses() == [
        ("c1.example", 9093), ("::1", 9094), ("c3.example", 9095)]
    # Kafka's bootstrap servers come before the voters, kraftwerk's own controller.address (--controller) before both.
    assert BrokerConfig({"controller.quorum.voters": voters,
                         "controller.quorum.bootstrap.servers": " b1:9093, b2:9093 "}).controller_addresses() == [
        ("b1", 9093), ("b2", 9093)]
    assert BrokerConfig({"controller.quorum.voters": voters, "controller.quorum.bootstrap.servers": "b1:9093",
                         "controller.address": "127.0.0.1:41001,127.0.0.1:41002"}).controller_addresses() == [
        ("127.0.0.1", 41001), ("127.0.0.1", 41002)]
    assert BrokerConfig({}).controller_addresses() == []


def test_a_dedicated_controller_of_a_quorum_starts_with_every_voter():
    from node.__main__ import controller_command

    config = BrokerConfig({"process.roles": "controller", "node.id": "3001", "listeners": "CONTROLLER://:9094",
                           "controller.quorum.voters": "3000@h:9093,3001@h:9094,3002@h:9095"})
    config.check_roles()
    command = controller_command(config)
    assert command[command.index("--voters") + 1] == "3000@h:9093,3001@h:9094,3002@h:9095"
    assert command[command.index("--node-id") + 1] == "3001" and command[command.index("--port") + 1] == "9094"
    single = BrokerConfig({"process.roles": "controller", "listeners": "CONTROLLER://:9093",
                           "controller.quorum.voters": "1@h:9093"})
    assert "--voters" not in controller_command(single)  # the only voter: as before


@pytest.mark.parametrize("values, message", [
    ({"controller.quorum.voters": "a:9093"}, "is not id@host:port"),
    ({"controller.quorum.voters": "1@a:9093,1@b:9093"}, "names a voter id more than once"),
    ({"controller.quorum.bootstrap.servers": "a:9093,b"}, "'b' is not host:port"),
    ({"process.roles": "broker,controller", "controller.quorum.voters": "1@a:9093,2@b:9093,3@c:9093",
      "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"},
     "names 3 voters: kraftwerk runs combined mode .* with this node's controller as the only voter"),
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
