"""The worker and its input topic's partition count: never a crash because the input grew.

The run-state table's changelog has one partition per input partition, and a state is written to
the changelog partition of the record being processed (faust's default without a partitioner). In
a copy that MirrorMaker 2 grows, a log partition keeps its Kafka partition number (MirrorMaker 2
copies a record to the same partition number), so the partitions the input gains hold records no
state was written for yet. (An input the source writes is different: its records are keyed, and a
grown topic moves log partitions; docs/limits.md.) Hence:

- at start, a changelog with fewer partitions than the input is grown to match
  (`match_changelog`): the states already written stay on the partitions they belong to. Replicas
  restarted together all try it; the one the broker refuses (INVALID_PARTITIONS: another one grew it
  first) reads the count again and goes on when the changelog has at least the input's partitions;
- while running, an assignment that holds an input partition beyond the count the worker started
  with (`check_assignment`) stops the worker with `ExitCode.INPUT_GREW`, before it processes a
  record of it, with one line that names the topic, both counts and what to do (restart it: the
  start grows the changelog).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import replace

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

from olstream.contract import topics
from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError
from olstream.shared.kafka_admin import (
    admin_client,
    check_connection,
    ensure_topic,
    fit_limit,
    topic_partitions,
)
from olstream.shared.kafka_clients import Kafka, librdkafka_only
from olstream.shared.kafka_settings import Replication
from olstream.streams.settings import WorkerSettings

log = logging.getLogger(__name__)

TABLE_NAME = "runs"
REREADS = 10  # reads of the changelog's count after INVALID_PARTITIONS, REREAD_PAUSE s apart: a
REREAD_PAUSE = 0.5  # broker's metadata can lag the controller that refused the growth for a moment


def changelog_topic(app_id: str) -> str:
    """faust's name of the run-state table's changelog: `<app id>-runs-changelog`."""
    return f"{app_id}-{TABLE_NAME}-changelog"


def match_changelog(kafka: Kafka, app_id: str, input_topic: str, input_partitions: int) -> None:
    """Grow an existing changelog to the input's partition count; a larger one is a ConfigError.

    Idempotent and safe when replicas start at once: a changelog that another replica grew in the
    meantime (to the input's count or more) is success, not an error.
    """
    changelog = changelog_topic(app_id)
    current = topic_partitions(kafka, changelog)
    if current is None or current == input_partitions:
        return
    if current > input_partitions:
        raise ConfigError(
            f"the input topic {input_topic} has {input_partitions} partitions, fewer than the "
            f"{current} of this worker's state changelog {changelog}: the input was recreated or is "
            "another topic; start with a new --app-id (it processes the input from its start)"
        )
    log.warning(
        "the input topic %s has %d partitions, its state changelog %s has %d: growing the changelog "
        "to %d (the states written stay on their partitions; the new ones start empty)",
        input_topic,
        input_partitions,
        changelog,
        current,
        input_partitions,
    )
    admin = admin_client(kafka)  # kept until the result is in: a destroyed handle fails the call
    futures = admin.create_partitions([NewPartitions(changelog, input_partitions)])
    try:
        futures[changelog].result(timeout=30)
    except KafkaException as e:
        grown = _partitions_after_refusal(kafka, changelog, input_partitions, e)
        if grown is None:
            raise InfrastructureError(
                f"cannot grow the changelog {changelog} to {input_partitions}: {e}"
            ) from e
        log.info(
            "the state changelog %s has %d partitions already (another replica grew it): going on",
            changelog,
            grown,
        )


def _partitions_after_refusal(kafka: Kafka, changelog: str, wanted: int, error: KafkaException) -> int | None:
    """The changelog's partition count when the broker refused to grow it because it has `wanted` or
    more already (INVALID_PARTITIONS: another replica grew it first); None for any other failure."""
    if not (error.args and isinstance(error.args[0], KafkaError)):
        return None
    if error.args[0].code() != KafkaError.INVALID_PARTITIONS:
        return None
    for attempt in range(REREADS):
        if attempt:
            time.sleep(REREAD_PAUSE)
        current = topic_partitions(kafka, changelog)
        if current is not None and current >= wanted:
            return current
    return None


def grown_partitions(assigned: Iterable[int], started_with: int) -> list[int]:
    """The assigned input partitions the worker did not know at start (the input grew since)."""
    return sorted(p for p in assigned if p >= started_with)


def check_assignment(input_topic: str, assigned: Iterable[int], started_with: int) -> None:
    """Leave at once (INPUT_GREW) when the assignment holds partitions the input did not have at start."""
    grown = grown_partitions(assigned, started_with)
    if not grown:
        return
    log.critical(
        "the input topic %s grew from %d partitions to at least %d while this worker ran (assigned "
        "%s): the worker leaves without processing them or committing anything (exit %d); restart "
        "it, and the start grows the state changelog to match",
        input_topic,
        started_with,
        grown[-1] + 1,
        grown,
        int(ExitCode.INPUT_GREW),
    )
    logging.shutdown()
    os._exit(ExitCode.INPUT_GREW)


CHANGELOG_CONFIG = {"cleanup.policy": "compact"}  # and the size of `topics.size_config`


def prepare_topics(settings: WorkerSettings) -> tuple[int, WorkerSettings]:
    """Create the input/output/errors topics when missing; the input's partition count, and the
    settings with `max_event_bytes` fitted to what an existing output topic accepts and the
    replication resolved for this cluster (faust's changelog takes it too).

    Topics it creates accept messages of `--max-event-bytes` (`topics.size_config`); the output
    gets `--output-partitions`, whatever the input has.
    """
    kafka = settings.connection
    brokers = check_connection(kafka)
    replication = Replication(*settings.replication.resolved(brokers))
    sized = topics.size_config(settings.max_event_bytes)
    ensure_topic(kafka, settings.input_topic, settings.default_partitions, sized, replication=replication)
    partitions = topic_partitions(kafka, settings.input_topic)
    if partitions is None:
        raise RuntimeError(f"input topic {settings.input_topic!r} does not exist after creating it")
    match_changelog(kafka, settings.app_id, settings.input_topic, partitions)
    changelog = {**CHANGELOG_CONFIG, **sized}
    ensure_topic(kafka, changelog_topic(settings.app_id), partitions, changelog, replication=replication)
    ensure_topic(kafka, settings.output_topic, settings.output_partitions, sized, replication=replication)
    ensure_topic(kafka, settings.errors_topic, 1, sized, replication=replication)
    if ignored := librdkafka_only(kafka):
        log.info("Kafka properties for librdkafka clients only (faust's aiokafka ignores them): %s", ignored)
    limit = fit_limit(
        kafka,
        settings.output_topic,
        settings.max_event_bytes,
        topics.MESSAGE_HEADROOM_BYTES,
        "--max-event-bytes",
    )
    return partitions, replace(settings, max_event_bytes=limit, replication=replication)
