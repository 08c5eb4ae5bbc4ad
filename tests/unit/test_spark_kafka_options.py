"""ferrokafka.spark.kafka_options: librdkafka settings as Spark's Kafka source/sink options."""

from __future__ import annotations

import pytest

from ferrokafka.spark import kafka_options


def test_scram_credentials_become_a_jaas_config_with_quotes_escaped() -> None:
    options = kafka_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "app",
            "sasl.password": 'pa"ss\\word',
            "ssl.endpoint.identification.algorithm": "none",
            "client.id": "spark-job",
        }
    )
    assert options == {
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="app" password="pa\\"ss\\\\word";',
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.client.id": "spark-job",
    }


def test_a_password_for_a_mechanism_without_one_is_refused_without_showing_it() -> None:
    with pytest.raises(ValueError, match="OAUTHBEARER") as refused:
        kafka_options({"sasl.mechanism": "OAUTHBEARER", "sasl.password": "hunter2"})
    assert "hunter2" not in str(refused.value)
