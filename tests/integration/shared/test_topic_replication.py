"""Topics olstream creates get the command's replication; an existing topic is reported, never changed."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from olstream.shared.kafka_admin import check_connection, ensure_topic
from olstream.shared.kafka_settings import Replication
from tests.conftest import MakeTopic


def _replication(bootstrap: str, topic: str) -> tuple[int, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic=topic, timeout=10)
    replicas = {len(p.replicas) for p in meta.topics[topic].partitions.values()}
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert len(replicas) == 1
    return replicas.pop(), configs["min.insync.replicas"].value


def test_a_created_topic_has_the_replication_of_a_one_broker_cluster(
    kafka_bootstrap: str, unique_topic: str
) -> None:
    assert check_connection(kafka_bootstrap, timeout=10) == 1
    assert ensure_topic(kafka_bootstrap, unique_topic, 2) is True
    assert _replication(kafka_bootstrap, unique_topic) == (1, "1")


def test_an_existing_topic_with_other_replication_is_reported_and_left_alone(
    kafka_bootstrap: str, make_topic: MakeTopic, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(1)
    before = _replication(kafka_bootstrap, topic)
    with caplog.at_level(logging.WARNING, logger="olstream.shared.kafka_admin"):
        assert ensure_topic(kafka_bootstrap, topic, 1, replication=Replication(3, 2)) is False
    assert _replication(kafka_bootstrap, topic) == before
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert topic in warning and "replication factor 1" in warning and "left as it is" in warning
