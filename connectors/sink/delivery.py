"""Delivery bookkeeping, free of I/O: contiguous commits, per-run order, outcomes, retries.

- `ContiguousCommitTracker`: one per owned partition; the committable offset only moves over a
  contiguous prefix of finished (delivered or dead-lettered) events.
- `KeyedQueues`: events of one run leave strictly one after another (`PendingEvent.order_key`);
  only a run's head is ever handed out, and its successor only once the head is finished. Events
  of different runs go out concurrently.
- `classify`: HTTP status -> delivered / retry / reject (DLQ) / misconfigured (retry, loudly).
- `Backoff`: exponential with jitter, 0.5 s .. ~5 min, reset on any delivery; Retry-After wins.
  One per failing event (its own retries), and one for the receiver as a whole: the circuit, open
  while everything fails (`Retries`).
- `Retries`: which failures are one event's (retried on its own, dead-lettered as
  `retries_exhausted` after the retry timeout) and which are the receiver's (an outage: the
  circuit opens, everything waits, nothing is dead-lettered).
- `LatestTerminals` (in `job_versions`) keeps each job at its latest run's version.
"""

from __future__ import annotations

import enum
import json
import random
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from confluent_kafka import TopicPartition

EventId = tuple[str, int, int]  # topic, partition, offset
JobKey = tuple[str, str]  # (job namespace, job name)


@dataclass(frozen=True, slots=True)
class Terminal:
    """A terminal event's job and rank: a later `eventTime` is a later run; ties go to the greater runId."""

    job: JobKey
    rank: tuple[datetime, str]  # (eventTime, runId)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """One consumed record on its way to the receiver."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    epoch: int  # the assignment epoch of its partition; stale after a revocation
    run: str | None = None  # the event's runId (`run_of`)
    terminal: Terminal | None = None  # set for a terminal event (`job_versions.terminal_of`)
    repeat: bool = False  # a repeat of a delivered terminal event (`LatestTerminals`), not a record
    redrive: tuple[tuple[str, bytes], ...] = ()  # its `olstream errors redrive` headers, if re-driven

    @property
    def order_key(self) -> Hashable:
        """Events sharing this are delivered strictly in offset order: one run's events of a partition.

        An event whose run cannot be read is ordered with its Kafka key's events (keyless: alone).
        """
        if self.run is not None:
            return (self.topic, self.partition, "run", self.run)
        if self.key is None:
            return (self.topic, self.partition, self.offset)
        return (self.topic, self.partition, "key", self.key)

    @property
    def ident(self) -> EventId:
        return (self.topic, self.partition, self.offset)

    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def run_of(header: bytes | None, value: bytes) -> str | None:
    """The event's runId: the worker's `olstream.run_id` header, else `run.runId` in its JSON."""
    if header:
        try:
            return header.decode("ascii")
        except UnicodeDecodeError:
            pass
    try:
        doc = json.loads(value)
        run_id = doc["run"]["runId"]
    except (ValueError, TypeError, KeyError):
        return None
    return run_id if isinstance(run_id, str) else None


class Outcome(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # connection error, timeout, 408, 429, 5xx
    REJECTED = "rejected"  # 400, 413, 422: dead-lettered
    MISCONFIGURED = "misconfigured"  # 401, 403, 404 and other 4xx/3xx: retried, logged loudly


REJECT_STATUSES = frozenset({400, 413, 422})
RETRY_STATUSES = frozenset({408, 429})


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in REJECT_STATUSES:
        return Outcome.REJECTED
    if status in RETRY_STATUSES or status >= 500:
        return Outcome.RETRY
    return Outcome.MISCONFIGURED


@dataclass(frozen=True)
class DeliveryResult:
    outcome: Outcome
    status: int | None = None
    detail: str = ""  # first 1 KiB of the response body, or the connection error
    retry_after: float | None = None  # seconds, from a Retry-After header


DELIVERED = DeliveryResult(Outcome.DELIVERED)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent/bad."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, delta)


class Backoff:
    """Receiver-wide backoff: exponential with jitter, reset the moment anything is delivered.

    Failures of requests started before the current wait began do not escalate it again, so
    a burst of concurrent failures from one outage counts as one step.
    """

    def __init__(
        self,
        initial: float = 0.5,
        maximum: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self.rng = rng
        self.attempt = 0
        self.generation = 0  # bumped each time a wait is scheduled
        self.until = 0.0
        self.last_delay = 0.0

    def delay_for(self, attempt: int) -> float:
        """Jittered exponential delay: uniform in [0.8 d, 1.2 d], d = initial * 2**attempt, capped."""
        base = min(self.maximum, self.initial * (2.0 ** min(attempt, 30)))
        return base * (0.8 + 0.4 * self.rng())

    def failed(self, generation: int, retry_after: float | None = None) -> float:
        """Register a retriable failure of a request started in `generation`; return the wait."""
        if generation != self.generation:
            # started before the current wait was scheduled: the same outage, no escalation
            if retry_after is not None and retry_after > self.remaining():
                self.until = self.clock() + retry_after
                self.last_delay = retry_after
            return self.remaining()
        delay = max(0.0, retry_after) if retry_after is not None else self.delay_for(self.attempt)
        self.attempt += 1
        self.generation += 1
        self.last_delay = delay
        self.until = self.clock() + delay
        return delay

    def succeeded(self) -> None:
        self.attempt = 0
        self.until = 0.0

    def remaining(self) -> float:
        return max(0.0, self.until - self.clock())

    @property
    def active(self) -> bool:
        return self.clock() < self.until


class ContiguousCommitTracker:
    """Offsets of one partition in consumption order; commit only over a finished prefix."""

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._finished: set[int] = set()
        self._next: int | None = None  # next offset to commit (last finished prefix offset + 1)
        self.committed: int | None = None

    def add(self, offset: int) -> None:
        if self._pending and offset <= self._pending[-1]:
            raise ValueError(f"offset {offset} is not after {self._pending[-1]}")
        self._pending.append(offset)

    def finish(self, offset: int) -> None:
        self._finished.add(offset)
        pending, finished = self._pending, self._finished
        while pending and pending[0] in finished:
            done = pending.popleft()
            finished.discard(done)
            self._next = done + 1

    def committable(self) -> int | None:
        """The offset to commit now, or None when nothing new finished since the last commit."""
        if self._next is None or self._next == self.committed:
            return None
        return self._next

    def mark_committed(self, offset: int) -> None:
        self.committed = offset

    def passed(self, position: int) -> None:
        """The consumer's position is `position` with nothing of this partition pending: the offsets
        up to it were never delivered (transaction markers, aborted records), so the next commit may
        move there."""
        if not self._pending and position > (self._next if self._next is not None else -1):
            self._next = position

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    @property
    def next_offset(self) -> int | None:
        return self._next


def pass_undelivered(
    consumer: Any,
    trackers: Mapping[tuple[str, int], ContiguousCommitTracker],
    positions: Sequence[TopicPartition] | None = None,
) -> None:
    """Move each idle partition's next commit to its consumer's position: a topic written in
    transactions (the worker's events under exactly_once) has offsets no consumer is given, the
    marker of every transaction among them, so a commit of the last delivered offset + 1 would leave
    the group's lag at least 1 for ever. `positions`: the consumer's, when they were asked already
    (a revocation asks on the thread that polls the consumer)."""
    if positions is None:
        idle = [TopicPartition(*tp) for tp, tracker in trackers.items() if not tracker.outstanding]
        positions = consumer.position(idle) if idle else ()
    for position in positions:
        tracker = trackers.get((position.topic, position.partition))
        if position.offset >= 0 and tracker is not None and not tracker.outstanding:
            tracker.passed(position.offset)


class KeyedQueues:
    """Per-key FIFO queues; `add` / `finish` return the event that may be sent now (or None)."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[PendingEvent]] = {}

    def add(self, event: PendingEvent) -> PendingEvent | None:
        """Queue the event; return it when its key was idle (it may go now)."""
        key = event.order_key
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = deque((event,))
            return event
        queue.append(event)
        return None

    def finish(self, event: PendingEvent) -> PendingEvent | None:
        """The key's head is done; return the key's next event, if any."""
        key = event.order_key
        queue = self._queues.get(key)
        if not queue or queue[0] is not event:
            return None
        queue.popleft()
        if queue:
            return queue[0]
        del self._queues[key]
        return None

    def drop_partitions(self, partitions: set[tuple[str, int]]) -> int:
        """Forget every queued event of these partitions (revoked); return how many."""
        dropped = 0
        for key in [k for k, q in self._queues.items() if (q[0].topic, q[0].partition) in partitions]:
            dropped += len(self._queues.pop(key))
        return dropped

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())


@dataclass
class EventRetry:
    """One failing event's retries: its own backoff, and since when it fails while others get through."""

    backoff: Backoff
    failing_since: float | None = None
    circuit: int = -1  # the circuit generation `failing_since` was taken in


CIRCUIT_THRESHOLD = 3
"""Distinct events failing with no delivery between them: the receiver is failing, not an event."""


class Retries:
    """Tells one event's failures from the receiver's, and when a failing event is given up.

    - A failure counts against the receiver (the circuit: `circuit`, a `Backoff` every sender waits
      for) once `CIRCUIT_THRESHOLD` distinct events failed with no delivery between them, or for
      429 (the receiver asks everyone to slow down). Otherwise only the event waits: its own
      backoff, while the rest flows.
    - An event is dead-lettered (`expired`) once it has kept failing for `timeout` seconds while
      the receiver accepted other events, and the circuit is closed. Its clock restarts whenever
      the circuit opens: what fails during an outage is never given up.
    """

    def __init__(
        self,
        circuit: Backoff,
        timeout: float,
        initial: float,
        maximum: float,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.circuit = circuit
        self.rng = rng
        self.timeout = timeout
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self.events: dict[EventId, EventRetry] = {}
        self.failing: set[EventId] = set()  # distinct events failed since the last delivery
        self.last_delivery = float("-inf")

    def delivered(self, ident: EventId) -> None:
        self.events.pop(ident, None)
        self.failing.clear()
        self.last_delivery = self.clock()
        self.circuit.succeeded()

    def forget(self, ident: EventId) -> None:
        """The event is finished otherwise (dead-lettered) or no longer ours (revoked)."""
        self.events.pop(ident, None)
        self.failing.discard(ident)

    def failed(self, ident: EventId, result: DeliveryResult, generation: int) -> tuple[float, bool]:
        """Register a failure of a request started in circuit `generation`: (its wait, receiver-wide)."""
        now = self.clock()
        retry = self.events.get(ident)
        if retry is None:
            retry = self.events[ident] = EventRetry(Backoff(self.initial, self.maximum, self.clock, self.rng))
        self.failing.add(ident)
        global_failure = len(self.failing) >= CIRCUIT_THRESHOLD or result.status == 429
        if global_failure:
            wait = self.circuit.failed(generation, result.retry_after)
        else:
            wait = retry.backoff.failed(retry.backoff.generation, result.retry_after)
        if retry.failing_since is None or retry.circuit != self.circuit.generation:
            retry.failing_since, retry.circuit = now, self.circuit.generation
        return wait, global_failure

    def expired(self, ident: EventId) -> bool:
        """True when the event has failed alone for the retry timeout: dead-letter it."""
        retry = self.events.get(ident)
        if self.timeout <= 0 or retry is None or retry.failing_since is None or self.circuit.active:
            return False
        if retry.circuit != self.circuit.generation:
            return False  # the circuit opened since: an outage, not this event
        now = self.clock()
        return now - retry.failing_since >= self.timeout and self.last_delivery > retry.failing_since

    def drop_partitions(self, partitions: set[tuple[str, int]]) -> None:
        for ident in [i for i in self.events if (i[0], i[1]) in partitions]:
            self.forget(ident)
