"""Small Kafka admin helpers (confluent-kafka): topics are created explicitly, never auto-created."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import client_config

log = logging.getLogger(__name__)


def ensure_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    config: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> bool:
    """Create the topic if it is missing; True when this call created it."""
    admin = AdminClient(client_config(bootstrap))
    meta = admin.list_topics(timeout=timeout)
    if name in meta.topics and meta.topics[name].error is None:
        return False
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as e:
        if e.args and getattr(e.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
            return False
        raise InfrastructureError(f"cannot create topic {name!r}: {e}") from e
    log.info("created topic %s with %d partitions", name, partitions)
    return True


def topic_partitions(bootstrap: str, name: str, timeout: float = 10.0) -> int | None:
    """The topic's partition count, or None when it does not exist."""
    admin = AdminClient(client_config(bootstrap))
    meta = admin.list_topics(topic=name, timeout=timeout)
    t = meta.topics.get(name)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)
