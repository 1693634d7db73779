"""The one Kafka client-configuration builder: what every client of every service gets."""

from __future__ import annotations

import logging

from olstream.shared.kafka_clients import (
    LIBRDKAFKA_LOG,
    client_config,
    consumer_config,
    faust_broker,
    producer_config,
)


def test_every_client_gets_the_bootstrap_and_its_role_on_top() -> None:
    assert client_config("k:1") == {"bootstrap.servers": "k:1", "logger": LIBRDKAFKA_LOG}
    assert client_config("k:1", {"logger": None}) == {"bootstrap.servers": "k:1", "logger": None}


def test_every_client_logs_through_the_projects_logging() -> None:
    # librdkafka's lines become log records of the command, at its level, not raw lines on stderr
    assert isinstance(client_config("k:1")["logger"], logging.Logger)
    assert LIBRDKAFKA_LOG.name == "librdkafka" and LIBRDKAFKA_LOG.level == logging.NOTSET  # the root's level
    assert producer_config("k:1")["logger"] is consumer_config("k:1", "g")["logger"] is LIBRDKAFKA_LOG


def test_a_producer_is_idempotent_and_waits_for_all_replicas_unless_told_otherwise() -> None:
    config = producer_config("k:1", {"linger.ms": 5})
    assert config == {
        "bootstrap.servers": "k:1",
        "logger": LIBRDKAFKA_LOG,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }


def test_a_consumer_never_commits_on_its_own() -> None:
    config = consumer_config("k:1", "g", {"auto.offset.reset": "earliest"})
    assert config == {
        "bootstrap.servers": "k:1",
        "logger": LIBRDKAFKA_LOG,
        "group.id": "g",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }


def test_faust_gets_the_same_servers() -> None:
    assert faust_broker("a:1") == "kafka://a:1"
    assert faust_broker("a:1, b:2,") == "kafka://a:1;b:2"
