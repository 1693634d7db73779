"""The standby copies' hand-over (olstream.streams.runtime.standby), without Kafka or RocksDB: a fake
consumer and fake stores; the thread's rounds are called one by one."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from olstream.cli.main import build_parser
from olstream.shared.kafka_clients import KafkaConnection
from olstream.streams.runtime import run_store
from olstream.streams.runtime.run_store import NoStandby, RunStore
from olstream.streams.runtime.standby import StandbyStates, standby_states
from olstream.streams.settings import WorkerSettings
from tests.support.cli_settings import build_settings
from tests.support.fake_message import FakeMessage

CHANGELOG = "app-runs-changelog"


class FakeStore:
    def __init__(self, path: Path, next_offset: int = 0, events: list[str] | None = None) -> None:
        self.path = path
        self.next = next_offset
        self.rows: dict[bytes, bytes | None] = {}
        self.closed = False
        self.events = events if events is not None else []
        self.block: threading.Event | None = None  # a write waits for it (to hold the lock)
        self.writing = threading.Event()

    @property
    def next_changelog_offset(self) -> int:
        return self.next

    def write(self, writes: Any, next_changelog_offset: int | None) -> None:
        assert not self.closed, f"a write to the closed store {self.path}"
        self.writing.set()
        if self.block is not None:
            self.block.wait(5)
        self.rows.update(writes)
        if next_changelog_offset is not None:
            self.next = next_changelog_offset
        self.events.append(f"write {self.path.name}")

    def close(self) -> None:
        self.closed = True
        self.events.append(f"close {self.path.name}")


def msg(partition: int, offset: int, key: bytes, value: bytes | None = b"v") -> FakeMessage:
    return FakeMessage(partition, offset, key=key, value=value)


class FakeConsumer:
    def __init__(self, bounds: dict[int, tuple[int, int]]) -> None:
        self.bounds = bounds
        self.assigned: dict[int, int] = {}
        self.on_watermarks: Any = None  # called inside get_watermark_offsets (a release meanwhile)

    def incremental_assign(self, tps: list[Any]) -> None:
        for tp in tps:
            assert tp.topic == CHANGELOG and tp.partition not in self.assigned
            self.assigned[tp.partition] = tp.offset

    def incremental_unassign(self, tps: list[Any]) -> None:
        for tp in tps:
            del self.assigned[tp.partition]

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False) -> tuple[int, int]:
        if self.on_watermarks is not None:
            self.on_watermarks(tp.partition)
        return self.bounds.get(tp.partition, (0, 0))

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        return []

    def position(self, tps: list[Any]) -> list[Any]:
        return tps


class Copies:
    """A `StandbyStates` over fake stores (one per path, kept across opens as RocksDB keeps files)."""

    def __init__(self, tmp: Path, partitions: int = 4, kept: dict[int, int] | None = None) -> None:
        self.events: list[str] = []
        self.opened: dict[int, list[FakeStore]] = {}
        self.kept = dict(kept or {})  # partition -> the next offset its files hold

        def open_store(path: Path) -> Any:
            p = int(path.name)
            assert not any(not s.closed for s in self.opened.get(p, [])), f"{path} opened twice"
            store = FakeStore(path, self.kept.get(p, 0), self.events)
            self.opened.setdefault(p, []).append(store)
            return store

        self.standby = StandbyStates(
            KafkaConnection("127.0.0.1:1"), "app", CHANGELOG, str(tmp), partitions, open_store=open_store
        )
        self.standby._thread = threading.Thread()  # follow_others must not start the real thread

    def store(self, p: int) -> FakeStore:
        return self.opened[p][-1]


def test_copies_are_kept_of_every_partition_the_worker_does_not_own_from_each_ones_next_offset(
    tmp_path: Path,
) -> None:
    c = Copies(tmp_path, kept={0: 7, 2: 40})
    consumer = FakeConsumer({0: (0, 10), 1: (5, 10), 2: (0, 50)})
    c.standby.follow_others({3})
    c.standby.step(consumer)
    # a copy resumes at its next offset; one below the log's start from the start
    assert consumer.assigned == {0: 7, 1: 5, 2: 40}
    assert all(c.store(p).path == tmp_path / "run-states" / CHANGELOG / str(p) for p in (0, 1, 2))


def test_committed_writes_are_applied_with_the_next_offset_and_repeats_skipped(tmp_path: Path) -> None:
    c = Copies(tmp_path, kept={0: 3})
    consumer = FakeConsumer({0: (0, 10)})
    c.standby.follow_others({1, 2, 3})
    c.standby.reconcile(consumer)
    applied = c.standby.apply([msg(0, 2, b"old"), msg(0, 3, b"a"), msg(0, 5, b"b", None)])
    assert applied == 2
    assert c.store(0).rows == {b"a": b"v", b"b": None} and c.store(0).next == 6


def test_release_closes_the_copy_and_a_batch_fetched_before_it_writes_nothing(tmp_path: Path) -> None:
    c = Copies(tmp_path)
    consumer = FakeConsumer({0: (0, 10), 1: (0, 10)})
    c.standby.follow_others({2, 3})
    c.standby.reconcile(consumer)
    fetched = [msg(0, 0, b"a"), msg(1, 0, b"b")]
    c.standby.release([0])
    assert c.store(0).closed  # the worker may open its path now
    c.standby.apply(fetched)  # the batch the thread had in hand
    assert c.store(0).rows == {} and c.store(1).rows == {b"b": b"v"}
    c.standby.reconcile(consumer)
    assert consumer.assigned == {1: 0}


def test_release_waits_for_a_write_in_progress_and_closes_after_it(tmp_path: Path) -> None:
    c = Copies(tmp_path)
    consumer = FakeConsumer({0: (0, 10)})
    c.standby.follow_others({1, 2, 3})
    c.standby.reconcile(consumer)
    store = c.store(0)
    store.block = threading.Event()
    writer = threading.Thread(target=c.standby.apply, args=([msg(0, 0, b"a")],))
    writer.start()
    assert store.writing.wait(5)
    released = threading.Thread(target=c.standby.release, args=([0],))
    released.start()
    time.sleep(0.1)
    assert released.is_alive() and not store.closed  # held by the write
    store.block.set()
    released.join(5)
    writer.join(5)
    assert c.events[-2:] == ["write 0", "close 0"]


def test_a_partition_released_while_the_broker_answers_is_not_opened(tmp_path: Path) -> None:
    c = Copies(tmp_path)
    consumer = FakeConsumer({0: (0, 10), 1: (0, 10)})
    consumer.on_watermarks = lambda p: c.standby.release([0]) if p == 0 else None
    c.standby.follow_others({2, 3})
    c.standby.reconcile(consumer)
    assert 0 not in c.opened and consumer.assigned == {1: 0}


def test_a_partition_revoked_from_the_worker_is_adopted_from_where_the_worker_left_it(
    tmp_path: Path,
) -> None:
    c = Copies(tmp_path, partitions=2)
    consumer = FakeConsumer({0: (0, 100), 1: (0, 100)})
    c.standby.follow_others({0})  # the worker owns 0
    c.standby.reconcile(consumer)
    c.standby.release({1})  # now it owns both
    c.standby.reconcile(consumer)
    assert consumer.assigned == {}
    c.kept[0] = 60  # what the worker's own store applied
    c.standby.follow_others({1})  # 0 was revoked
    c.standby.reconcile(consumer)
    assert consumer.assigned == {0: 60}


def test_a_copy_past_its_changelogs_end_is_wiped_and_copied_from_the_start(tmp_path: Path) -> None:
    c = Copies(tmp_path, kept={0: 500})
    consumer = FakeConsumer({0: (0, 20)})
    c.standby.follow_others({1, 2, 3})
    c.standby.reconcile(consumer)
    assert consumer.assigned[0] == 0 and c.opened[0][0].closed and not c.store(0).closed


def test_run_store_hands_over_before_it_opens_and_takes_the_others_back_after_its_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    class Recorder:
        def release(self, partitions: Any) -> None:
            events.append(f"release {sorted(partitions)}")

        def follow_others(self, owned: Any) -> None:
            events.append(f"follow all but {sorted(owned)}")

        def close(self) -> None:
            pass

    monkeypatch.setattr(run_store, "PartitionStore", lambda path: FakeStore(path, events=events))
    store = RunStore(KafkaConnection("127.0.0.1:1"), str(tmp_path), CHANGELOG, "app", Recorder())
    monkeypatch.setattr(store, "_restore", lambda partitions: events.append(f"restore {partitions}"))
    store.assign([0, 1])
    store.assign([1, 2])
    assert events == [
        "release [0, 1]",
        "restore [0, 1]",
        "follow all but [0, 1]",
        "release [1, 2]",
        "close 0",
        "restore [1, 2]",
        "follow all but [1, 2]",
    ]


def test_standby_states_are_off_by_default_and_on_with_the_setting() -> None:
    assert isinstance(RunStore(KafkaConnection("x:1"), "d", CHANGELOG, "app").standby, NoStandby)
    assert isinstance(standby_states(WorkerSettings(), CHANGELOG, 6), NoStandby)
    parser = build_parser()
    assert not build_settings(parser.parse_args(["worker"])).standby_states
    on = build_settings(parser.parse_args(["worker", "--standby-states", "on"]))
    assert on.standby_states and isinstance(standby_states(on, CHANGELOG, 6), StandbyStates)


def test_a_copy_opened_but_not_assigned_is_assigned_on_the_next_round(tmp_path: Path) -> None:
    c = Copies(tmp_path, kept={0: 4})
    consumer = FakeConsumer({0: (0, 10)})
    real, calls = consumer.incremental_assign, []

    def fail_once(tps: list[Any]) -> None:
        calls.append(tps)
        if len(calls) == 1:
            raise RuntimeError("local: erroneous state")
        real(tps)

    consumer.incremental_assign = fail_once  # type: ignore[method-assign]
    c.standby.follow_others({1, 2, 3})
    with pytest.raises(RuntimeError):
        c.standby.reconcile(consumer)
    c.standby.reconcile(consumer)
    assert consumer.assigned == {0: 4} and len(c.opened[0]) == 1
