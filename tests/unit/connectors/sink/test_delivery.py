"""Delivery bookkeeping: contiguous commits, per-key queues, status classes, backoff, Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from olstream.connectors.sink.delivery import (
    Backoff,
    ContiguousCommitTracker,
    KeyedQueues,
    Outcome,
    PendingEvent,
    classify,
    parse_retry_after,
)


def event(offset: int, key: bytes | None = b"run:ns/a", partition: int = 0, epoch: int = 1) -> PendingEvent:
    return PendingEvent("t", partition, offset, key, b"{}", epoch)


def test_commit_only_over_a_contiguous_finished_prefix() -> None:
    tracker = ContiguousCommitTracker()
    for offset in (10, 11, 12, 15, 16):  # gaps in offsets (compaction, markers) are fine
        tracker.add(offset)
    assert tracker.committable() is None
    tracker.finish(11)
    tracker.finish(15)
    assert tracker.committable() is None  # 10 is still pending
    tracker.finish(10)
    assert tracker.committable() == 12  # 10 and 11 done; 12 pending
    tracker.mark_committed(12)
    assert tracker.committable() is None
    tracker.finish(12)
    assert tracker.committable() == 16  # 15 was already finished
    tracker.finish(16)
    assert tracker.committable() == 17
    assert tracker.outstanding == 0


def test_tracker_refuses_offsets_going_backwards() -> None:
    tracker = ContiguousCommitTracker()
    tracker.add(5)
    with pytest.raises(ValueError, match="not after"):
        tracker.add(5)


def test_one_event_per_key_at_a_time_in_offset_order() -> None:
    queues = KeyedQueues()
    a0, a1, a2 = event(0), event(1), event(3)
    b0 = event(2, key=b"run:ns/b")
    assert queues.add(a0) is a0  # idle key: may go now
    assert queues.add(a1) is None  # waits behind a0
    assert queues.add(b0) is b0  # another key is independent
    assert queues.add(a2) is None
    assert queues.finish(a1) is None  # not the head: ignored
    assert queues.finish(a0) is a1
    assert queues.finish(a1) is a2
    assert queues.finish(a2) is None
    assert len(queues) == 1
    assert queues.finish(b0) is None
    assert len(queues) == 0


def test_keyless_events_are_independent_and_revoked_partitions_are_dropped() -> None:
    queues = KeyedQueues()
    assert queues.add(event(0, key=None)) is not None
    assert queues.add(event(1, key=None)) is not None
    queues.add(event(2, partition=1))
    queues.add(event(3, partition=1))
    assert queues.drop_partitions({("t", 1)}) == 2
    assert len(queues) == 2


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.DELIVERED),
        (201, Outcome.DELIVERED),
        (204, Outcome.DELIVERED),
        (400, Outcome.REJECTED),
        (413, Outcome.REJECTED),
        (422, Outcome.REJECTED),
        (401, Outcome.MISCONFIGURED),
        (403, Outcome.MISCONFIGURED),
        (404, Outcome.MISCONFIGURED),
        (301, Outcome.MISCONFIGURED),
        (408, Outcome.RETRY),
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (502, Outcome.RETRY),
        (503, Outcome.RETRY),
    ],
)
def test_status_classes(status: int, outcome: Outcome) -> None:
    assert classify(status) is outcome


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 3 ", now) == 3.0
    assert parse_retry_after("Sun, 01 Mar 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Sun, 01 Mar 2026 11:00:00 GMT", now) == 0.0  # in the past: now
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("", now) is None
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("-5", now) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap_and_resets_on_delivery() -> None:
    clock = FakeClock()
    backoff = Backoff(0.5, 300.0, clock=clock, rng=lambda: 0.5)  # jitter factor 1.0
    waits = []
    for _ in range(12):
        waits.append(backoff.failed(backoff.generation))
        clock.now += waits[-1]
    assert waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert waits[-1] == 300.0 and max(waits) == 300.0
    backoff.succeeded()
    assert backoff.failed(backoff.generation) == 0.5
    low = Backoff(0.5, 300.0, clock=clock, rng=lambda: 0.0).delay_for(3)
    high = Backoff(0.5, 300.0, clock=clock, rng=lambda: 0.999999).delay_for(3)
    assert low == pytest.approx(3.2) and high == pytest.approx(4.8, rel=1e-5)


def test_concurrent_failures_of_one_outage_count_once_and_retry_after_wins() -> None:
    clock = FakeClock()
    backoff = Backoff(0.5, 300.0, clock=clock, rng=lambda: 0.5)
    started = backoff.generation  # 16 requests in flight, all fail
    assert backoff.failed(started) == 0.5
    for _ in range(15):
        assert backoff.failed(started) == pytest.approx(0.5)
    assert backoff.attempt == 1
    assert backoff.active
    clock.now += 0.5
    assert not backoff.active
    assert backoff.failed(backoff.generation, retry_after=42.0) == 42.0
    assert backoff.remaining() == 42.0
    stale = backoff.generation - 1
    assert backoff.failed(stale, retry_after=60.0) == 60.0  # a longer Retry-After extends the wait
