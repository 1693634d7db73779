"""Kafka client security: the --kafka-config file, the --kafka-* settings, and what each client gets."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from olstream.cli.main import main as olstream_main
from olstream.connectors.sink.settings import build_settings
from olstream.connectors.source.settings import resolve_source_settings
from olstream.shared.config import resolve
from olstream.shared.errors import ConfigError
from olstream.shared.java_properties import parse_properties
from olstream.shared.kafka_clients import (
    LIBRDKAFKA_LOG,
    KafkaConnection,
    client_config,
    consumer_config,
    faust_broker,
    faust_credentials,
    librdkafka_only,
    producer_config,
)
from olstream.shared.kafka_settings import (
    KAFKA_CLIENT_SETTINGS,
    TOPIC_SETTINGS,
    Replication,
    connection_of,
    from_java,
    replication_of,
)
from olstream.shared.logs import redact
from olstream.streams.settings import resolve_worker_settings


def _connection(flags: dict[str, str], env: dict[str, str] | None = None) -> KafkaConnection:
    from olstream.shared.config import BOOTSTRAP

    return connection_of(resolve("worker", (BOOTSTRAP, *KAFKA_CLIENT_SETTINGS), flags, env or {}))


def test_java_properties_are_read_as_java_reads_them() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "ssl.ca.location /etc/kafka/ca.pem\n"
        "topics = olstream\\\\.eventlog\n"
        "long.value = one,\\\n"
        "    two\n"
        "  spaced.key=  value with spaces  \n"
    )
    props = parse_properties(text, "test")  # the one reader of Java properties (olstream.shared)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "topics": "olstream\\.eventlog",
        "long.value": "one,two",
        "spaced.key": "value with spaces  ",
    }


def test_a_java_jaas_config_becomes_librdkafka_user_and_password() -> None:
    props = from_java(
        {
            "security.protocol": "SASL_SSL",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="olstream" password="p\\"w";',
        },
        "client.properties",
    )
    assert props == {"security.protocol": "SASL_SSL", "sasl.username": "olstream", "sasl.password": 'p"w'}


def test_a_login_module_librdkafka_cannot_use_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="login module"):
        from_java({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "f")


def test_the_settings_win_over_the_file_and_every_client_gets_them(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    file = tmp_path / "client.properties"
    file.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=from-file\n"
        f"sasl.password=file-secret\nssl.ca.location={ca}\nbootstrap.servers=ignored:1\n"
        "socket.keepalive.enable=true\n"
    )
    kafka = _connection(
        {"kafka_config": str(file), "kafka_sasl_mechanism": "scram-sha-256", "bootstrap": "b1:9093,b2:9093"},
        {"OLSTREAM_KAFKA_SASL_USERNAME": "from-env"},
    )
    expected = {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "from-env",
        "sasl.password": "file-secret",
        "ssl.ca.location": str(ca),
        "socket.keepalive.enable": "true",
        "logger": LIBRDKAFKA_LOG,
    }
    assert client_config(kafka) == expected
    assert producer_config(kafka)["sasl.username"] == "from-env"
    assert consumer_config(kafka, "g")["security.protocol"] == "SASL_SSL"
    assert faust_broker(kafka) == "kafka://b1:9093;b2:9093"
    assert librdkafka_only(kafka) == ["socket.keepalive.enable"]
    assert kafka.describe()["sasl.password"] == "***"
    assert "file-secret" not in kafka.summary() and "from-env" in kafka.summary()
    assert redact("the password is file-secret") == "the password is ***"  # registered with the redactor


def test_a_plain_bootstrap_string_is_plaintext() -> None:
    assert client_config("h:9092", {"acks": "all"}) == {
        "bootstrap.servers": "h:9092",
        "logger": LIBRDKAFKA_LOG,
        "acks": "all",
    }
    assert faust_credentials("h:9092") is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"kafka_security_protocol": "sasl_ssl"}, "needs sasl.mechanism"),
        ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "PLAIN"}, "sasl.username and"),
        ({"kafka_security_protocol": "TLS"}, "must be one of"),
        ({"kafka_ssl_ca": "/no/such/ca.pem"}, "does not exist"),
        ({"kafka_config": "/no/such/file.properties"}, "cannot read"),
    ],
)
def test_an_incomplete_security_setting_is_a_config_error(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _connection(flags)


def test_faust_gets_scram_over_tls_with_hostname_verification(tmp_path: Path) -> None:
    kafka = KafkaConnection(
        "h:9093",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
        },
    )
    credentials = faust_credentials(kafka)
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_SSL"
    assert (credentials.username, credentials.password) == ("u", "p")
    assert isinstance(credentials.ssl_context, ssl.SSLContext) and credentials.ssl_context.check_hostname
    off = KafkaConnection("h:9093", {**kafka.properties, "ssl.endpoint.identification.algorithm": "none"})
    assert faust_credentials(off).ssl_context.check_hostname is False
    plain = KafkaConnection("h:9092", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    assert faust_credentials(plain).protocol.value == "SASL_PLAINTEXT"


def test_faust_refuses_a_ca_file_that_is_not_pem(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="TLS files"):
        faust_credentials(KafkaConnection("h:1", {"security.protocol": "SSL", "ssl.ca.location": str(bad)}))


def test_librdkafka_probe_of_the_system_cas_is_the_default_trust_store_for_faust() -> None:
    probe = KafkaConnection("h:1", {"security.protocol": "SSL", "ssl.ca.location": "probe"})
    context = faust_credentials(probe).context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats() == ssl.create_default_context().cert_store_stats()


@pytest.mark.parametrize(
    ("brokers", "given", "expected"),
    [(1, Replication(), (1, 1)), (2, Replication(), (2, 1)), (3, Replication(), (3, 2)),
     (5, Replication(), (3, 2)), (5, Replication(5), (5, 4)), (3, Replication(3, 3), (3, 3))],
)  # fmt: skip
def test_replication_defaults_to_min_3_brokers_and_one_less_in_sync(
    brokers: int, given: Replication, expected: tuple[int, int]
) -> None:
    assert given.resolved(brokers) == expected


def test_min_insync_above_the_replication_factor_is_a_config_error() -> None:
    r = resolve("worker", TOPIC_SETTINGS, {"replication_factor": "2", "min_insync_replicas": "3"}, {})
    with pytest.raises(ConfigError, match="above the replication factor"):
        replication_of(r)


def test_every_service_takes_the_settings_and_never_prints_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "client.properties"
    file.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=svc\nsasl.password=pw-in-file\n"
    )
    env = {"OLSTREAM_KAFKA_CONFIG": str(file), "OLSTREAM_REPLICATION_FACTOR": "3"}
    worker, _ = resolve_worker_settings({}, env)
    source, _ = resolve_source_settings({"log_url": "sqlite:///x.db"}, env)
    sink = build_settings({"console": True}, env, tmp_path, tmp_path)
    for settings in (worker, source, sink):
        assert settings.connection.properties["sasl.username"] == "svc"
        assert settings.replication == Replication(3, None)
    assert "pw-in-file" not in repr(sink) and sink.describe()["kafka"]["sasl.password"] == "***"
    for argv in (["worker"], ["source", "--log", "sqlite:///x.db"], ["sink", "--console"], ["status"]):
        rc = olstream_main(
            [*argv, "--kafka-config", str(file), "--kafka-sasl-password", "pw-flag", "--print-config"]
        )
        out = capsys.readouterr().out
        assert rc == 0 and "pw-in-file" not in out and "pw-flag" not in out, argv
