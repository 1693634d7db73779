"""Delivery bookkeeping, free of I/O: contiguous commits, per-key order, outcomes, backoff.

- `ContiguousCommitTracker`: one per owned partition; the committable offset only moves over a
  contiguous prefix of finished (delivered or dead-lettered) events.
- `KeyedQueues`: events of one key leave strictly one after another; only a key's head is ever
  handed out, and its successor only once the head is finished.
- `classify`: HTTP status -> delivered / retry / reject (DLQ) / misconfigured (retry, loudly).
- `Backoff`: exponential with jitter, 0.5 s .. ~5 min, reset on any delivery; Retry-After wins.
"""

from __future__ import annotations

import enum
import random
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """One consumed record on its way to the receiver."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    epoch: int  # the assignment epoch of its partition; stale after a revocation

    @property
    def order_key(self) -> Hashable:
        """Events sharing this are delivered strictly in offset order (keyless ones are independent)."""
        if self.key is None:
            return (self.topic, self.partition, self.offset)
        return (self.topic, self.partition, self.key)

    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


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

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    @property
    def next_offset(self) -> int | None:
        return self._next


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
