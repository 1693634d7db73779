"""Small Kafka admin helpers (confluent-kafka): topics are created explicitly, never auto-created."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

# ConfigResource and ResourceType are public at runtime but missing from the stubs
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
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


def topic_max_message_bytes(bootstrap: str, name: str, timeout: float = 10.0) -> int | None:
    """The topic's effective `max.message.bytes` (its own or the broker's default); None if unknown."""
    admin = AdminClient(client_config(bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as e:
        log.warning("could not read the settings of topic %s: %s", name, e)
        return None
    entry = configs.get("max.message.bytes")
    try:
        return None if entry is None or entry.value is None else int(entry.value)
    except ValueError:
        return None


def fit_limit(bootstrap: str, topic: str, limit: int, headroom: int, setting: str) -> int:
    """`limit`, or less when an existing topic accepts less than `limit` + `headroom` (logged once).

    A topic olstream creates accepts the limit; one created before, or by someone else, keeps its
    own settings (never changed here), and a value it would refuse must go to the errors topic
    instead of failing the producer.
    """
    accepted = topic_max_message_bytes(bootstrap, topic)
    if accepted is None or accepted >= limit + headroom:
        return limit
    fitted = max(0, accepted - headroom)
    log.warning(
        "topic %s accepts messages up to %d bytes (max.message.bytes), less than %s %d plus %d bytes of "
        "headroom: values above %d bytes go to the errors topic as too_large (raise the topic's "
        "max.message.bytes to allow more)",
        topic,
        accepted,
        setting,
        limit,
        headroom,
        fitted,
    )
    return fitted
