"""Small Kafka admin helpers (confluent-kafka): topics are created explicitly, never auto-created.

`check_connection` is every service's first call: it tells a refused login or certificate
(`KafkaAuthError`, exit 77) from a cluster that does not answer. `ensure_topic` creates a missing
topic with the command's replication (`kafka_settings.Replication`: by default min(3, brokers)
replicas and min.insync.replicas one less, at least 1) and reports, never changes, an existing
topic whose replication differs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

# ConfigResource and ResourceType are public at runtime but missing from the stubs
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from olstream.shared.errors import ConfigError, InfrastructureError, KafkaAuthError
from olstream.shared.kafka_clients import Kafka, as_connection, client_config
from olstream.shared.kafka_settings import Replication

log = logging.getLogger(__name__)
T = TypeVar("T")
_quiet = logging.getLogger(__name__ + ".librdkafka")  # connection chatter of short-lived admin clients
_quiet.setLevel(logging.CRITICAL)

_AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
_TLS_WORDS = ("SSL handshake failed", "certificate verify failed", "SSL routines", "Certificate")


def admin_client(kafka: Kafka, errors: list[KafkaError] | None = None) -> AdminClient:
    """An AdminClient of the connection; librdkafka's errors go to `errors` when given."""
    extra: dict[str, Any] = {"logger": _quiet}
    if errors is not None:
        extra["error_cb"] = errors.append
    try:
        return AdminClient(client_config(kafka, extra))
    except KafkaException as e:  # an unknown or invalid librdkafka property
        raise ConfigError(f"invalid Kafka client property: {e.args[0].str() if e.args else e}") from e


def refusal(errors: list[KafkaError]) -> str | None:
    """The text of the first authentication or TLS failure librdkafka reported, if any."""
    for err in errors:
        text = err.str()
        if err.code() in _AUTH_CODES or "Authentication failed" in text:
            return f"authentication failed: {text}"
        if err.code() == KafkaError._SSL or any(word in text for word in _TLS_WORDS):
            return f"TLS failed: {text}"
    return None


def check_connection(kafka: Kafka, timeout: float = 30.0) -> int:
    """The number of brokers, once the cluster answered this connection's login.

    A refused login (wrong user or password, wrong SASL mechanism) or certificate (an untrusted CA,
    a host name the broker's certificate does not carry) is `KafkaAuthError`, as soon as librdkafka
    reports it; no answer within `timeout` is `InfrastructureError`.
    """
    connection = as_connection(kafka)
    errors: list[KafkaError] = []
    admin = admin_client(connection, errors)
    deadline = time.monotonic() + timeout
    while True:  # short steps: a refusal is reported in well under a second, no answer takes `timeout`
        step = max(0.1, min(1.0, deadline - time.monotonic()))
        try:
            meta = admin.list_topics(timeout=step)
            break
        except KafkaException as e:
            admin.poll(0)  # serves librdkafka's error callbacks (list_topics does not)
            refused = refusal(errors)
            if refused:
                raise KafkaAuthError(
                    f"Kafka at {connection.summary()} refused the connection: {refused}"
                ) from e
            if time.monotonic() >= deadline:
                raise InfrastructureError(
                    f"Kafka at {connection.summary()} did not answer within {timeout:g} s: {e}"
                ) from e
    return len(meta.brokers)


# errors of a partition whose leader is moving or not elected yet (a new topic, a broker failing
# over): worth asking again, as the client's retriable errors are
_NOT_READY = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader whose high watermark has not caught up yet
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
}


def not_ready(error: KafkaError) -> bool:
    """Whether a partition's error passes once its leader is elected (or the client says it retries)."""
    return bool(error.retriable()) or error.code() in _NOT_READY


RETRY_PAUSE = 0.5  # s between attempts of a look-up the broker may answer a moment later
# answers that pass a moment later: a look-up timing out, and the group coordinator moving or not
# loaded yet (the first group commit on a new broker answers NOT_COORDINATOR, not marked retriable)
_RETRIED = {
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.UNSTABLE_OFFSET_COMMIT,  # a transaction holding the group's offsets is still open
}


def passes_soon(error: KafkaError) -> bool:
    """Whether Kafka would likely answer a moment later: a partition's leader moving (`not_ready`),
    a look-up timing out, the group coordinator moving or loading."""
    return not_ready(error) or error.code() in _RETRIED


def retrying(call: Callable[[], T], what: str, timeout: float) -> T:
    """`call()`, asked again while Kafka answers with a retriable error (a leader not elected yet,
    a look-up timing out right after a topic was created), for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            worth = error is not None and passes_soon(error)
            if not worth or time.monotonic() >= deadline:
                raise InfrastructureError(f"{what}: {error.str() if error else e}") from e
            log.debug("%s: %s; asking again", what, error.str() if error else e)
        time.sleep(RETRY_PAUSE)


def ensure_topic(
    kafka: Kafka,
    name: str,
    partitions: int,
    config: dict[str, str] | None = None,
    timeout: float = 30.0,
    replication: Replication | None = None,
) -> bool:
    """Create the topic if it is missing; True when this call created it.

    An existing topic is left as it is; a replication factor or min.insync.replicas other than
    this command's is logged as a warning.
    """
    admin = admin_client(kafka)
    meta = admin.list_topics(timeout=timeout)
    factor, min_insync = (replication or Replication()).resolved(len(meta.brokers))
    existing = meta.topics.get(name)
    if existing is not None and existing.error is None:
        _report_replication(admin, name, existing, factor, min_insync, timeout)
        return False
    settings = {"min.insync.replicas": str(min_insync), **(config or {})}
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=factor, config=settings)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as e:
        if e.args and getattr(e.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
            _wait_until_served(admin, name, None, timeout)  # another process just created it
            return False
        raise InfrastructureError(f"cannot create topic {name!r}: {e}") from e
    log.info(
        "created topic %s with %d partitions, replication factor %d, min.insync.replicas %d",
        name,
        partitions,
        factor,
        min_insync,
    )
    _wait_until_served(admin, name, partitions, timeout)
    return True


def _wait_until_served(admin: AdminClient, name: str, partitions: int | None, timeout: float) -> None:
    """Wait until the cluster's metadata shows the new topic with every partition led (and with
    `partitions` partitions; None: as many as its creator gave it).

    A created topic reaches the other brokers' metadata a moment later. A client that asks one of
    them first caches what it answered (a topic that does not exist yet, or without some of its
    partitions) until its next metadata refresh, minutes later: on a 3-broker cluster a worker
    found its just-created input missing, and a source could not read a new partition's watermarks.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            meta = admin.list_topics(topic=name, timeout=max(0.1, deadline - time.monotonic()))
            topic = meta.topics.get(name)
        except KafkaException:
            topic = None
        if (
            topic is not None
            and topic.error is None
            and topic.partitions
            and (partitions is None or len(topic.partitions) == partitions)
            and all(p.leader >= 0 and p.error is None for p in topic.partitions.values())
        ):
            return
        if time.monotonic() >= deadline:
            log.warning("topic %s: created, but its partitions are not all served yet", name)
            return
        time.sleep(0.1)


def _report_replication(
    admin: AdminClient, name: str, topic: Any, factor: int, min_insync: int, timeout: float
) -> None:
    replicas = min((len(p.replicas) for p in topic.partitions.values()), default=0)
    actual = _config_value(admin, name, "min.insync.replicas", timeout)
    if replicas == factor and (actual is None or actual == min_insync):
        return
    log.warning(
        "topic %s exists with replication factor %d and min.insync.replicas %s; this command creates "
        "topics with %d and %d: left as it is (change it with kafka-reassign-partitions / "
        "kafka-configs if it should match)",
        name,
        replicas,
        "unknown" if actual is None else actual,
        factor,
        min_insync,
    )


def _config_value(admin: AdminClient, topic: str, key: str, timeout: float) -> int | None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as e:
        log.warning("could not read the settings of topic %s: %s", topic, e)
        return None
    entry = configs.get(key)
    try:
        return None if entry is None or entry.value is None else int(entry.value)
    except ValueError:
        return None


def topic_partitions(kafka: Kafka, name: str, timeout: float = 10.0) -> int | None:
    """The topic's partition count, or None when it does not exist."""
    meta = admin_client(kafka).list_topics(topic=name, timeout=timeout)
    t = meta.topics.get(name)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)


def topic_identity(kafka: Kafka, name: str, timeout: float = 10.0) -> str:
    """``{cluster id}/{topic id}``: what tells a topic from one deleted and recreated under its name,
    or from its copy on another cluster."""
    from confluent_kafka import TopicCollection

    admin = admin_client(kafka)

    def ask() -> str:
        cluster_id = admin.list_topics(topic=name, timeout=timeout).cluster_id  # the metadata's
        described = admin.describe_topics(TopicCollection([name]), request_timeout=timeout)[name]
        return f"{cluster_id}/{described.result(timeout=timeout).topic_id}"

    return retrying(ask, f"reading the ids of topic {name} and its cluster", 6 * timeout)


def topic_retention_ms(kafka: Kafka, name: str, timeout: float = 10.0) -> int | None:
    """The topic's effective `retention.ms` (-1: kept forever); None if unknown."""
    return _config_value(admin_client(kafka), name, "retention.ms", timeout)


def topic_max_message_bytes(kafka: Kafka, name: str, timeout: float = 10.0) -> int | None:
    """The topic's effective `max.message.bytes` (its own or the broker's default); None if unknown."""
    return _config_value(admin_client(kafka), name, "max.message.bytes", timeout)


def fit_limit(kafka: Kafka, topic: str, limit: int, headroom: int, setting: str) -> int:
    """`limit`, or less when an existing topic accepts less than `limit` + `headroom` (logged once).

    A topic olstream creates accepts the limit; one created before, or by someone else, keeps its
    own settings (never changed here), and a value it would refuse must go to the errors topic
    instead of failing the producer.
    """
    accepted = topic_max_message_bytes(kafka, topic)
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
