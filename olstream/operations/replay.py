"""`olstream replay`: the lineage topic, or a time range of it, delivered again to a receiver under a
consumer group of its own, with the sink's transports, retries, per-run order and dead-letter rules
(`connectors.sink.bounded.BoundedSink`).

1. The range is planned (`connectors.sink.bounds.plan_bounds`): resolved now with offsets-for-times,
   or, when the group has commits of an earlier run (and no `--restart`), the range stored in
   their metadata, from where they stand.
2. A new range is committed at its start offsets first, its range as the commit metadata, so a
   replay stopped at any moment goes on where it stopped, over the same range.
3. The bounded sink delivers, commits as the sink does (every commit keeps the metadata), and ends
   once every partition is delivered and committed to its end offset.

A dry run plans the same way and reads the range without a group's commit (nothing is sent or
committed), counting what would be sent by event type.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from olstream.connectors.sink.bounded import BoundedSink, ReplayProgress, Selection, event_type_of
from olstream.connectors.sink.bounds import ReplayBounds, plan_bounds
from olstream.connectors.sink.run import consumer_config
from olstream.connectors.sink.transports import make_transport
from olstream.operations.replay_settings import ReplaySettings
from olstream.shared.errors import ConfigError, InfrastructureError
from olstream.shared.kafka_admin import check_connection, ensure_topic, retrying, topic_partitions
from olstream.shared.kafka_clients import producer_config
from olstream.shared.topic_read import messages_to_end

log = logging.getLogger(__name__)

LEFT_OUT = "--job, --namespace, or a timestamp outside the range"
LOOKUP_TIMEOUT = 30.0  # s for each of Kafka's answers the plan needs (a new topic's may take a moment)


@dataclass(frozen=True)
class ReplayOutcome:
    lines: tuple[str, ...]
    complete: bool  # the range was gone through to its end (false: stopped by a signal)


def selection_of(settings: ReplaySettings, bounds: ReplayBounds) -> Selection:
    return Selection(bounds.times, settings.job, settings.namespace)


def plan(settings: ReplaySettings, consumer: Consumer) -> ReplayBounds:
    """The range this run goes through (a missing topic: `ConfigError`)."""
    sink = settings.sink
    count = topic_partitions(sink.connection, sink.topic, LOOKUP_TIMEOUT)
    if count is None:
        raise ConfigError(f"topic {sink.topic} does not exist")
    return plan_bounds(
        consumer,
        sink.topic,
        list(range(count)),
        settings.times,
        settings.group,
        settings.restart,
        LOOKUP_TIMEOUT,
    )


def describe_bounds(settings: ReplaySettings, bounds: ReplayBounds) -> str:
    how = "resumed from the commits of" if bounds.resumed else "group"
    return (
        f"{settings.sink.topic} {bounds.times.describe()} (message timestamps, not eventTime) -> "
        f"{settings.sink.destination}, {how} {settings.group}: {bounds.remaining:,} offsets to go through"
    )


def count_range(consumer: Consumer, bounds: ReplayBounds, selection: Selection) -> tuple[Counter[str], int]:
    """What a replay of `bounds` would send, by event type, and how many the selection leaves; the
    range is read with `assign`: no group joined, nothing committed."""
    spans = {p.partition: (p.start, p.end) for p in bounds.partitions if p.size}
    counted: Counter[str] = Counter()
    left = 0
    deadline = time.monotonic() + LOOKUP_TIMEOUT * 4
    read = messages_to_end(
        consumer, bounds.topic, spans, batch=500, wait=0.5, deadline=deadline, error_text=KafkaError.str
    )
    for _partition, _offset, message in read:
        if selection.takes_message(message):
            counted[event_type_of(message.headers(), message.value() or b"")] += 1
        else:
            left += 1
    return counted, left


def commit_start(consumer: Consumer, bounds: ReplayBounds, group: str) -> None:
    """The range's start offsets committed with its metadata: from now on the group resumes it."""
    metadata = bounds.metadata()
    offsets = [
        TopicPartition(bounds.topic, p.partition, p.start, metadata=metadata[(bounds.topic, p.partition)])
        for p in bounds.partitions
    ]
    try:
        retrying(
            lambda: consumer.commit(offsets=offsets, asynchronous=False),
            f"committing the start of the range for group {group}",
            LOOKUP_TIMEOUT,
        )
    except InfrastructureError as e:
        raise ConfigError(f"cannot commit for group {group} (is another replay of it running?): {e}") from e


def by_type(counts: Counter[str] | tuple[tuple[str, int], ...]) -> str:
    items = sorted(dict(counts).items())
    return ", ".join(f"{kind} {n:,}" for kind, n in items) or "none"


async def run_replay(
    settings: ReplaySettings, report: Callable[[ReplayProgress], None] | None = None
) -> ReplayOutcome:
    """Plan the range, then count it (dry run) or deliver it; the summary lines."""
    sink = replace(settings.sink, group=settings.group, instance_id=None, metrics_port=0, dry_run=False)
    check_connection(sink.connection, timeout=LOOKUP_TIMEOUT)
    consumer = Consumer(consumer_config(sink))
    try:
        bounds = plan(settings, consumer)
    except BaseException:
        consumer.close()
        raise
    selection = selection_of(settings, bounds)
    if bounds.remaining == 0:
        consumer.close()
        if bounds.resumed:
            return ReplayOutcome(
                (
                    f"nothing left: group {settings.group} has replayed {sink.topic} "
                    f"{bounds.times.describe()} to its end (--restart replays it again)",
                ),
                True,
            )
        raise ConfigError(f"no message of {sink.topic} has a timestamp in {bounds.times.describe()}")
    log.info("replay: %s", describe_bounds(settings, bounds))
    if settings.dry_run:
        try:
            counted, left = count_range(consumer, bounds, selection)
        finally:
            consumer.close()
        return ReplayOutcome(
            (
                f"dry run: would send {sum(counted.values()):,} events of {sink.topic} "
                f"{bounds.times.describe()} to {sink.destination}: {by_type(counted)}; "
                f"{left:,} in the range left out ({LEFT_OUT})",
            ),
            True,
        )
    log.warning(
        "replaying older events into %s: a receiver that holds newer ones may show them rolled back "
        "(Marquez: a job's current version, a run's state) until newer events reach it again",
        sink.destination,
    )
    if not bounds.resumed:
        commit_start(consumer, bounds, settings.group)
    dlq = None
    try:
        partitions = topic_partitions(sink.connection, sink.topic) or 1
        ensure_topic(sink.connection, sink.dlq_topic, partitions, replication=sink.replication)
        dlq = Producer(producer_config(sink.connection, {"linger.ms": 5}))
    except (InfrastructureError, KafkaException):
        consumer.close()
        raise
    bounded = BoundedSink(sink, make_transport(sink), consumer, dlq, bounds, selection, settings.rate, report)
    started = time.monotonic()
    await bounded.run()
    if report is not None:
        report(bounded.progress())  # the bar at where it ended
    return summary(
        settings, bounds, bounded.progress(), time.monotonic() - started, bounded.stopping.is_set()
    )


def summary(
    settings: ReplaySettings, bounds: ReplayBounds, done: ReplayProgress, seconds: float, stopped: bool
) -> ReplayOutcome:
    rate = done.delivered / seconds if seconds > 0 else 0.0
    lines = [
        f"{'stopped: ' if stopped else ''}replayed {settings.sink.topic} {bounds.times.describe()} to "
        f"{settings.sink.destination} in {seconds:.1f} s ({rate:,.0f} events/s), group {settings.group}",
        f"delivered {done.delivered:,} ({by_type(done.by_type)}); dead-lettered {done.dead_lettered:,} "
        f"to {settings.sink.dlq_topic}; {done.left:,} in the range left out ({LEFT_OUT})",
    ]
    if stopped:
        lines.append("run the same command again to go on where it stopped (--restart starts over)")
    return ReplayOutcome(tuple(lines), not stopped)
