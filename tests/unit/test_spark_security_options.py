"""The Java client's security settings a Spark job passes as kafka.* options, as librdkafka takes them."""
import pytest

from spark_jobs.options import OptionError, client_config

BOOTSTRAP = {"kafka.bootstrap.servers": "localhost:9092"}


def test_a_scram_jaas_config_and_a_pem_truststore_become_librdkafka_settings():
    config = client_config({**BOOTSTRAP, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                                      'required username="alice" password="p\\"w";',
                            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/data/ca.pem"})
    assert config == {"bootstrap.servers": "localhost:9092", "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": 'p"w',
                      "ssl.ca.location": "/data/ca.pem"}


def test_an_unsecured_oauthbearer_login_and_pem_keystores():
    config = client_config({**BOOTSTRAP, "kafka.sasl.mechanism": "OAUTHBEARER",
                            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                                                      'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="bob";',
                            "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": "/data/bob.pem",
                            "kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----..."})
    assert config["sasl.oauthbearer.config"] == "principal=bob"
    assert config["enable.sasl.oauthbearer.unsecure.jwt"] == "true"
    assert (config["ssl.certificate.location"], config["ssl.key.location"]) == ("/data/bob.pem", "/data/bob.pem")
    assert config["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE")
    assert "ssl.keystore.location" not in config and "sasl.jaas.config" not in config


def test_a_jks_truststore_is_refused_with_what_to_give_instead():
    with pytest.raises(OptionError, match="ssl.truststore.type=JKS' is not supported: give the CA certificates as PEM"):
        client_config({**BOOTSTRAP, "kafka.ssl.truststore.location": "/data/truststore.jks"})
