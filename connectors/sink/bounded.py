"""The sink over a bounded range of its topic (`olstream replay`): the same delivery, retries, per-run
order and dead-letter rules (`sink.Sink`), but it only delivers the events of its range
(`bounds.ReplayBounds`) that its selection takes (`Selection`), paced to a rate, and ends by itself
once every partition is delivered and committed to its end offset.

Events inside the offsets of the range that the selection leaves (another job or namespace, a
timestamp outside the range on a topic whose timestamps are not in offset order) are finished
without being sent, so the group's commits move over them. Messages past a partition's end are
never admitted: the partition is paused there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from olstream.connectors.sink.bounds import ReplayBounds, TimeRange
from olstream.connectors.sink.delivery import DeliveryResult, EventId, Outcome, PendingEvent
from olstream.connectors.sink.settings import SinkSettings
from olstream.connectors.sink.sink import Sink
from olstream.connectors.sink.transports import SinkTransport
from olstream.contract import wire

TP = tuple[str, int]
PROGRESS_EVERY = 0.25  # s between progress reports
NOT_SENT = DeliveryResult(Outcome.RETRY, None, "not sent: the replay is stopping")


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _doc(value: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(value)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def event_type_of(headers: Any, value: bytes) -> str:
    """The event's `eventType`: the worker's header, else its JSON; `(none)` when it has none."""
    found = _text(wire.header_value(headers, wire.HEADER_EVENT_TYPE))
    if found is None:
        kind = _doc(value).get("eventType")
        found = kind if isinstance(kind, str) else None
    return found or "(none)"


def job_of(headers: Any, value: bytes) -> tuple[str | None, str | None]:
    """(job namespace, job name): the worker's headers, else the event's JSON."""
    namespace = _text(wire.header_value(headers, wire.HEADER_JOB_NAMESPACE))
    name = _text(wire.header_value(headers, wire.HEADER_JOB_NAME))
    if namespace is None or name is None:
        job = _doc(value).get("job")
        if isinstance(job, dict):
            namespace = job.get("namespace") if isinstance(job.get("namespace"), str) else None
            name = job.get("name") if isinstance(job.get("name"), str) else None
    return namespace, name


@dataclass(frozen=True, slots=True)
class Selection:
    """Which messages of the range a replay sends: a timestamp in the range, and the job's."""

    times: TimeRange = field(default_factory=TimeRange)
    job: str | None = None  # the job's name
    namespace: str | None = None  # the job's namespace

    def takes(self, timestamp_ms: int | None, headers: Any, value: bytes) -> bool:
        if not self.times.contains(timestamp_ms):
            return False
        if self.job is None and self.namespace is None:
            return True
        namespace, name = job_of(headers, value)
        return (self.job is None or name == self.job) and (
            self.namespace is None or namespace == self.namespace
        )

    def takes_message(self, message: Message) -> bool:
        _kind, timestamp = message.timestamp()
        return self.takes(timestamp, message.headers(), message.value() or b"")


class Pace:
    """At most `rate` events a second (0: no limit), in order of asking; no bursts."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self.next_at = 0.0

    def delay(self, events: int) -> float:
        """Reserve the next slot for `events` events; how long to wait for it."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        slot = max(now, self.next_at)
        self.next_at = slot + events / self.rate
        return slot - now


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    done: int  # offsets of the range gone through: sent, dead-lettered or left by the selection
    total: int  # offsets of the range when the replay started
    delivered: int
    dead_lettered: int
    left: int  # in the range, left out by the selection
    by_type: tuple[tuple[str, int], ...] = ()  # delivered events by eventType


class BoundedSink(Sink):
    def __init__(
        self,
        settings: SinkSettings,
        transport: SinkTransport,
        consumer: Consumer,
        dlq: Producer | None,
        bounds: ReplayBounds,
        selection: Selection,
        rate: float = 0.0,
        report: Callable[[ReplayProgress], None] | None = None,
    ) -> None:
        super().__init__(replace(settings, until_idle=True, dry_run=False), transport, consumer, dlq)
        self.bounds = bounds
        self.selection = selection
        self.pace = Pace(rate)
        self.report = report
        self.range_ends: dict[TP, int] = {(bounds.topic, p.partition): p.end for p in bounds.partitions}
        self.commit_metadata = bounds.metadata()
        self.done: set[TP] = {(bounds.topic, p.partition) for p in bounds.partitions if p.size == 0}
        self.held: set[TP] = set()  # done partitions paused for good
        self.delivered = 0
        self.finished = 0
        self.left = 0
        self.by_type: Counter[str] = Counter()
        self.types: dict[EventId, str] = {}  # event type of each admitted event until it is finished
        self._last_report = 0.0

    def progress(self) -> ReplayProgress:
        return ReplayProgress(
            min(self.finished + self.left, self.bounds.remaining),
            self.bounds.remaining,
            self.delivered,
            self.finished - self.delivered,
            self.left,
            tuple(sorted(self.by_type.items())),
        )

    # -- the range -------------------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        super()._assigned(partitions)
        self.held.clear()

    def _admit(self, message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if message.error() is not None or topic is None or partition is None or offset is None:
            return super()._admit(message)
        tp = (topic, partition)
        end = self.range_ends.get(tp)
        tracker = self.trackers.get(tp)
        if tracker is None:
            return  # a partition we no longer own
        if end is None or offset >= end:
            self.done.add(tp)  # past the range: paused in `_apply_pause`
            return
        if self.selection.takes_message(message):
            self.types[(topic, partition, offset)] = event_type_of(message.headers(), message.value() or b"")
            super()._admit(message)
        else:
            tracker.add(offset)
            tracker.finish(offset)
            self.lag.started(tp, offset)
            self.finished_since_commit += 1
            self.left += 1
        if offset + 1 >= end:
            self.done.add(tp)

    def _apply_pause(self) -> None:
        was_paused = bool(self.pauses.paused)
        super()._apply_pause()
        if was_paused and not self.pauses.paused:
            self.held.clear()  # the sink resumed everything it had paused
        hold = (self.done & set(self.epochs)) - self.held
        if hold:
            self.consumer.pause([TopicPartition(*tp) for tp in sorted(hold)])
            self.held |= hold
        now = time.monotonic()
        if self.report is not None and now - self._last_report >= PROGRESS_EVERY:
            self._last_report = now
            self.report(self.progress())

    def _pass_undelivered(self, positions: list[TopicPartition] | None = None) -> None:
        """A replay's commits stay within its range (`_at_end` passes markers by the position)."""

    def _at_end(self) -> bool:
        """True once every owned partition of the range is gone through to its end and committed."""
        if not self._idle():
            return False
        owned = [tp for tp in self.trackers if tp in self.range_ends]
        left = [tp for tp in owned if tp not in self.done]
        if left:  # a transactional topic's markers are never delivered: the position passes them
            for p in self.consumer.position([TopicPartition(*tp) for tp in left]):
                if p.offset >= self.range_ends[(p.topic, p.partition)]:
                    self.done.add((p.topic, p.partition))
        return bool(owned) and all(tp in self.done for tp in owned)

    # -- sending ---------------------------------------------------------------------------
    async def _send(self, batch: list[PendingEvent]) -> list[DeliveryResult]:
        """Sent at the pace; a stop while waiting for it sends nothing (the events stay uncommitted)."""
        wait = self.pace.delay(len(batch))
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), wait)
        if self.stopping.is_set():
            return [NOT_SENT] * len(batch)
        return await super()._send(batch)

    def _settle(self, event: PendingEvent, result: DeliveryResult, generation: int) -> None:
        if result is NOT_SENT:
            if event.repeat:
                self.ready.put_nowait(event)  # posted at the stop, as the sink's workers leave them
            return  # neither delivered nor failed: left uncommitted, the next run sends it
        if result.outcome is Outcome.DELIVERED and not event.repeat and not self._stale(event):
            self.delivered += 1
            self.by_type[self.types.get(event.ident) or event_type_of(None, event.value)] += 1
        super()._settle(event, result, generation)

    def _finish(self, event: PendingEvent) -> None:
        if not self._stale(event) and (event.topic, event.partition) in self.trackers:
            self.finished += 1
            self.types.pop(event.ident, None)
        super()._finish(event)
