"""The tailer: every partition in offset order, new partitions, gaps held then skipped with both ends."""

from __future__ import annotations

import logging

import pytest

from olstream.connectors.source.tailer import Gap, LogTailer, TailerSettings
from tests.support.memory_store import MemoryEventLogStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fill(store: MemoryEventLogStore, partition: int, count: int) -> None:
    store.append_many([(partition, lambda off, p=partition: f"{p}:{off}".encode()) for _ in range(count)])


def drain(tailer: LogTailer) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    while rows := tailer.read_batch():
        out.extend((r.partition, r.offset) for r in rows)
    return out


def test_reads_every_partition_in_offset_order_from_the_start_positions() -> None:
    store = MemoryEventLogStore(partitions=3)
    for p, n in ((0, 5), (1, 0), (2, 7)):
        fill(store, p, n)
    tailer = LogTailer(store, {0: 2}, TailerSettings(batch_size=2))
    got = drain(tailer)
    assert [o for p, o in got if p == 0] == [3, 4]
    assert [o for p, o in got if p == 2] == list(range(7))
    assert tailer.positions == {0: 4, 1: -1, 2: 6}
    fill(store, 1, 2)
    assert drain(tailer) == [(1, 0), (1, 1)]


def test_picks_up_partitions_that_appear_later() -> None:
    store = MemoryEventLogStore(partitions=1)
    clock = FakeClock()
    tailer = LogTailer(store, {}, TailerSettings(refresh_interval=1.0), clock=clock)
    store.rows[1] = []
    fill(store, 1, 3)
    assert drain(tailer) == []  # not yet looked at the partition list again
    clock.now = 1.5
    assert drain(tailer) == [(1, 0), (1, 1), (1, 2)]


def test_a_gap_is_held_for_the_grace_period_then_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryEventLogStore(partitions=1)
    fill(store, 0, 10)
    clock = FakeClock()
    gaps: list[Gap] = []
    tailer = LogTailer(store, {0: 2}, TailerSettings(gap_grace=1.0), on_gap=gaps.append, clock=clock)
    store.read = _reader_with_missing(store, {4, 5, 6}, total=10)  # type: ignore[method-assign]  # 4..6 lost
    assert drain(tailer) == [(0, 3)]
    assert tailer.holding_gap
    clock.now = 0.5
    assert drain(tailer) == []
    clock.now = 1.2
    with caplog.at_level(logging.WARNING):
        assert drain(tailer) == [(0, 7), (0, 8), (0, 9)]
    assert gaps == [Gap(0, 4, 6)]
    assert "offsets 4..6 are missing" in caplog.text
    assert not tailer.holding_gap


def test_a_gap_that_fills_within_the_grace_period_is_not_skipped() -> None:
    store = MemoryEventLogStore(partitions=1)
    fill(store, 0, 6)
    clock = FakeClock()
    missing = {3}
    store.read = _reader_with_missing(store, missing, total=6)  # type: ignore[method-assign]
    tailer = LogTailer(store, {}, TailerSettings(gap_grace=1.0), clock=clock)
    assert drain(tailer) == [(0, 0), (0, 1), (0, 2)]
    missing.clear()  # the writer's transaction committed
    clock.now = 0.3
    assert drain(tailer) == [(0, 3), (0, 4), (0, 5)]


def test_reset_goes_back_to_given_positions() -> None:
    store = MemoryEventLogStore(partitions=2)
    fill(store, 0, 4)
    fill(store, 1, 4)
    tailer = LogTailer(store, {})
    drain(tailer)
    tailer.reset({0: 1})
    assert drain(tailer) == [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]


def test_wait_backs_off_while_idle_and_resets_on_a_change() -> None:
    store = MemoryEventLogStore(partitions=1)
    waits: list[float] = []
    answers = [False, False, False, True, False]
    store.wait_for_change = lambda t: (waits.append(t), answers.pop(0))[1]  # type: ignore[method-assign]
    tailer = LogTailer(store, {}, TailerSettings(min_wait=0.01, max_wait=0.03))
    for _ in range(5):
        tailer.wait()
    assert waits == [0.01, 0.02, 0.03, 0.03, 0.01]


def _reader_with_missing(store: MemoryEventLogStore, missing: set[int], total: int):  # type: ignore[no-untyped-def]
    from olstream.eventlog.store import StoredRow

    def read(partition: int, after_offset: int, limit: int) -> list[StoredRow]:
        offsets = [o for o in range(after_offset + 1, total) if o not in missing][:limit]
        return [StoredRow(partition, o, b"x") for o in offsets]

    return read
