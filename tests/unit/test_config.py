from cluster.config import BrokerConfig, parse_listener, parse_properties


def test_server_properties_parsing():
    props = parse_properties("# comment\n! also\nnode.id=3\nlisteners = PLAINTEXT://0.0.0.0:9092\nlog.dirs: /data\n\n")
    assert props == {"node.id": "3", "listeners": "PLAINTEXT://0.0.0.0:9092", "log.dirs": "/data"}


def test_broker_config_defaults_and_listeners():
    config = BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:0", "controller.quorum.bootstrap.servers": "localhost:9093"})
    assert config.node_id == 1
    assert config.advertised_listener(4567) == ("PLAINTEXT", "127.0.0.1", 4567)
    assert config.controller_address() == ("localhost", 9093)
    assert config.topic_defaults()["retention.ms"] == "604800000"
    assert parse_listener("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)
