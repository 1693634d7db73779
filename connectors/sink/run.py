"""Starts the sink: its Kafka consumer and DLQ producer, its transport, and the delivery loop."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, Producer

from olstream.connectors.sink.lag import LagGauge
from olstream.connectors.sink.repeats import Repeats
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.connectors.sink.transports import make_transport
from olstream.contract import topics
from olstream.shared import kafka_clients
from olstream.shared.errors import ExitCode, InfrastructureError, KafkaAuthError
from olstream.shared.kafka_admin import (
    check_connection,
    ensure_topic,
    topic_max_message_bytes,
    topic_partitions,
)
from olstream.shared.kafka_clients import producer_config
from olstream.shared.metrics import serve_metrics

log = logging.getLogger(__name__)
CONNECT_CHECK_SECONDS = 30.0  # how long the first answer of the cluster (or its refusal) may take


async def run_sink(settings: SinkSettings) -> int:
    """Deliver until stopped (or, with --until-idle, until everything is delivered); the exit code.

    With OPENLINEAGE_DISABLED=true it returns OK at once, before Kafka is touched: no group joined,
    nothing consumed or committed, so the backlog waits for a sink that is enabled (committing
    without sending, as a disabled openlineage-python client drops events, would lose it for good).
    """
    if settings.disabled:
        log.warning(
            "OPENLINEAGE_DISABLED=true: the sink delivers nothing and commits nothing; the events of %s "
            "wait in Kafka for group %s (unset OPENLINEAGE_DISABLED to deliver them)",
            settings.topic,
            settings.group,
        )
        return ExitCode.OK
    if settings.metrics_port:
        serve_metrics(settings.metrics_port, settings.metrics_host)
    log.info(
        "sink: %s -> %s (group %s, concurrency %d%s%s)",
        settings.topic,
        settings.destination,
        settings.group,
        settings.concurrency,
        ", gzip" if settings.compression else "",
        ", dry run" if settings.dry_run else "",
    )
    try:
        check_connection(settings.connection, timeout=CONNECT_CHECK_SECONDS)
    except KafkaAuthError:
        raise
    except InfrastructureError as e:  # not fatal here; reading the topic's partitions fails next
        log.warning("%s; waiting for it", e)
    dlq = None
    if not settings.dry_run:
        partitions = topic_partitions(settings.connection, settings.topic) or 1
        # a dead letter is any event of the topic plus the dead-letter headers: the DLQ this creates
        # and its producer accept what the topic accepts (an existing DLQ keeps its own settings)
        largest = topic_max_message_bytes(settings.connection, settings.topic) or topics.MAX_MESSAGE_BYTES
        ensure_topic(
            settings.connection,
            settings.dlq_topic,
            partitions,
            topics.size_config(largest),
            replication=settings.replication,
        )
        dlq = Producer(
            producer_config(settings.connection, {"linger.ms": 5, **topics.producer_size_config(largest)})
        )
    consumer = Consumer(consumer_config(settings))
    transport = make_transport(settings)
    sink = Sink(settings, transport, consumer, dlq, LagGauge(consumer), Repeats.for_transport(transport))
    return await sink.run()


def consumer_config(settings: SinkSettings) -> dict[str, Any]:
    """Manual commits only (`enable.auto.commit=false`): offsets move when the sink says so."""
    extra: dict[str, Any] = {
        "client.id": "olstream-sink",
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
    }
    if settings.instance_id:
        extra["group.instance.id"] = settings.instance_id  # static membership: a restart takes over at once
    return kafka_clients.consumer_config(settings.connection, settings.group, extra)
