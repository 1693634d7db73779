"""The worker's checkpoint order (``streams/runtime/agent.py``, ``checkpoint.py``): send, flush, store,
changelog flush, commit; admission; eviction.

The agent loop registered by ``attach`` runs against fakes: a faust app that only collects the agent,
its timers and its rebalance hooks, a consumer that records seeks and commits, a changelog writer that
records its writes and flushes, a dict-like table, a sender that records sends and flushes (and can fail),
and the broker's offsets as the test sets them. Every fake appends to one shared trace, so the tests
can check the order across them.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import faust
import pytest
from faust.types import TP

from olstream.contract import codec, topics, wire
from olstream.contract.records import Direction, Record
from olstream.shared import deadletter
from olstream.shared.errors import ConfigError, DeliveryError, ExitCode
from olstream.streams import input_tracker, log_marks
from olstream.streams.framed_input import InputFraming
from olstream.streams.log_marks import LogMark, loads_mark
from olstream.streams.mapping import MappingConfig
from olstream.streams.run_directory import MemoryRunStarts, RunDirectory
from olstream.streams.runtime import (
    agent,
    apply_record,
    exits,
    member_gate,
    metrics,
    worker_identity,
    worker_parts,
)
from olstream.streams.runtime import app as worker_app
from olstream.streams.runtime.app import StreamApp
from olstream.streams.runtime.transaction_errors import GenerationFenced, ProducerFenced, TransactionFailed
from olstream.streams.settings import WorkerSettings
from olstream.streams.state import RunState, state_key
from olstream.streams.state_store import loads_state
from tests.support.stream_records import T0, declared, ended, started

INPUT = "olstream.eventlog"
OUTPUT = "openlineage.events"
ERRORS = "olstream.stream.errors"
RETENTION_MS = 60_000

# one entry per observable step: ("send", topic, event type or None, engine run id or None),
# ("flush",), ("set" | "del", engine run id, input partition of the current event), ("changelog",),
# ("commit", input partition, offset), ("seek", input partition, offset)
Trace = list[tuple[Any, ...]]


# ---------------------------------------------------------------------------- fakes


@dataclass(eq=False)
class FakeMessage:
    topic: str
    partition: int
    offset: int
    key: bytes
    headers: list[tuple[str, bytes]]
    acked: bool = False

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)


@dataclass(eq=False)
class FakeEvent:
    message: FakeMessage
    value: bytes


def event_of(record: Record, input_partition: int, input_offset: int) -> FakeEvent:
    """A record as the source publishes it, at an input topic partition and offset."""
    headers = [
        ("olstream.partition", str(record.partition).encode()),
        ("olstream.offset", str(record.offset).encode()),
    ]
    key = str(record.partition).encode()
    return FakeEvent(FakeMessage(INPUT, input_partition, input_offset, key, headers), codec.encode(record))


class FakeSender:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.fail_flush = False
        self.values: list[tuple[str, bytes, dict[str, Any]]] = []  # topic, value, headers of every send

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int | None = None,
    ) -> None:
        assert value is not None
        self.values.append((topic, value, dict(headers or [])))
        if topic == OUTPUT:
            assert value is not None
            doc = json.loads(value)
            self.trace.append(
                ("send", topic, doc["eventType"], doc["run"]["facets"]["workflow"]["engineRunId"])
            )
        else:
            self.trace.append(("send", topic, None, None))

    async def flush(self, timeout: float = 60.0) -> None:
        if self.fail_flush:
            raise DeliveryError("an output send failed: broker said no")
        self.trace.append(("flush",))


class FakeTable:
    """The run store (`RunStore`): bytes keys and values, one dict for every partition (the tests' keys
    differ across partitions); `writes` records each store write's partition and changelog offset."""

    def __init__(self) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.writes: list[tuple[int, int | None]] = []
        self.assigned: list[list[int]] = []

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.rows.get(key)

    def write(self, partition: int, writes: Any, next_changelog_offset: int | None) -> None:
        for key, value in writes:
            if value is None:
                del self.rows[key]
            else:
                self.rows[key] = value
        self.writes.append((partition, next_changelog_offset))

    def items(self, partitions: Any) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.rows.items()))

    def assign(self, partitions: list[int]) -> None:
        self.assigned.append(list(partitions))

    def state(self, engine_run_id: str, log_partition: int = 0) -> RunState | None:
        raw = self.rows.get(state_key(log_partition, engine_run_id).encode())
        return None if raw is None else loads_state(raw)


class FakeChangelog:
    """The changelog writer: writes are traced with their partition; a flush is traced, and with
    `hold` set waits until the test releases it (the broker's acknowledgements). Each write gets the
    next offset of its partition; a flush answers the offset after each partition's last write."""

    topic = "olstream-stream-runs-changelog"

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.hold = False
        self.released: asyncio.Event | None = None
        self.ends: dict[int, int] = {}
        self.unflushed: dict[int, int] = {}

    def send(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.trace.append(("set" if value is not None else "del", key.decode(), partition))
        self.ends[partition] = self.unflushed[partition] = self.ends.get(partition, 0) + 1

    async def flush(self) -> dict[int, int]:
        self.trace.append(("changelog",))
        if self.hold:
            self.released = asyncio.Event()
            await self.released.wait()
        flushed, self.unflushed = self.unflushed, {}
        return flushed


class FakeTransactions:
    """`WorkerTransactions` (exactly_once): the worker's one producer; sends and changelog writes
    traced, each commit with its offsets; with `fenced` set a commit raises `fenced` (GenerationFenced
    or ProducerFenced). At a commit the store must still lack the batch (`table`)."""

    def __init__(self, trace: Trace, table: FakeTable) -> None:
        self.trace = trace
        self.table = table
        self.started = False
        self.fenced: Exception | None = None
        self.changelog_next: dict[int, int] = {}  # changelog partition -> its next offset
        self.written: set[int] = set()  # changelog partitions written in the open transaction
        self.sent = False  # whether a transaction is open
        self.rows_at_commit: list[dict[bytes, bytes]] = []

    @property
    def open(self) -> bool:
        return self.sent

    def start(self) -> None:
        if not self.started:
            self.started = True
            self.trace.append(("init",))

    def recover(self) -> None:
        self.trace.append(("txn-abort",))
        self.sent = False
        self.written.clear()

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int | None = None,
    ) -> None:
        assert value is not None
        doc = json.loads(value) if topic == OUTPUT else None
        kind = None if doc is None else doc["eventType"]
        self.trace.append(("txn-send", topic, kind))
        self.sent = True

    def send_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.trace.append(("txn-" + ("set" if value is not None else "del"), key.decode(), partition))
        self.changelog_next[partition] = self.changelog_next.get(partition, 0) + 1
        self.written.add(partition)
        self.sent = True

    def commit(self, offsets: dict[int, int]) -> dict[int, int]:
        if not self.sent and not offsets:
            return {}
        self.rows_at_commit.append(dict(self.table.rows))
        if self.fenced is not None:
            raise self.fenced
        self.trace.append(("txn-commit", tuple(sorted(offsets.items()))))
        written = {p: self.changelog_next[p] for p in self.written}
        self.written.clear()
        self.sent = False
        return written


class FakeConsumer:
    """The faust consumer's surface the worker uses: assignment, seeks, the private commit."""

    def __init__(self, trace: Trace, partitions: tuple[int, ...]) -> None:
        self.trace = trace
        self.assigned = {TP(INPUT, p) for p in partitions}
        self.commit_ok = True
        self._read_offset: Any = None  # faust_private.keep_no_read_offsets replaces it

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        for tp, offset in offsets.items():
            self.trace.append(("seek", tp.partition, offset))

    async def _commit(self, offsets: dict[TP, int]) -> bool:
        for tp, offset in sorted(offsets.items()):
            self.trace.append(("commit", tp.partition, offset))
        return self.commit_ok


class FakeStream:
    def __init__(self) -> None:
        self.pending: list[FakeEvent] = []

    async def events(self) -> AsyncIterator[FakeEvent]:
        pending, self.pending = self.pending, []
        for event in pending:
            yield event


@dataclass
class FakeInputOffsets:
    """The broker's view: committed offsets, and the first record at or after an offset."""

    committed_offsets: dict[int, int] = field(default_factory=dict)
    first_from: dict[tuple[int, int], int | None] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    low_offsets: dict[int, int] = field(default_factory=dict)

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        return {p: o for p, o in self.committed_offsets.items() if p in partitions}

    def group_metadata(self) -> object:
        return object()

    async def first_offset_from(self, partition: int, offset: int) -> int | None:
        return self.first_from[(partition, offset)]

    async def bounds(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: (self.low_offsets.get(p, 0), self.end_offsets.get(p, 0)) for p in partitions}


class FakeSignal:
    def __init__(self) -> None:
        self.receivers: list[Callable[..., Awaitable[None]]] = []

    def connect(self, fn: Callable[..., Awaitable[None]]) -> None:
        self.receivers.append(fn)


class FakeApp:
    """Only what attach() touches: it registers the agent and timers, the worker reads the consumer."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.rebalancing = False
        self.agents: list[Callable[[Any], Awaitable[None]]] = []
        self.timers: dict[str, Callable[[], Awaitable[None]]] = {}
        self.on_rebalance_complete = FakeSignal()
        self.on_partitions_revoked = FakeSignal()
        self.on_partitions_assigned = FakeSignal()
        self.monitor = object()  # faust adds its Monitor sensor when the app starts
        self.sensors: set[object] = {self.monitor}

    def agent(self, channel: Any, **kwargs: Any) -> Callable[[Any], Any]:
        def register(fn: Callable[[Any], Awaitable[None]]) -> Any:
            self.agents.append(fn)
            return fn

        return register

    def timer(self, interval: float) -> Callable[[Any], Any]:
        def register(fn: Callable[[], Awaitable[None]]) -> Any:
            self.timers[fn.__name__] = fn
            return fn

        return register


class Exited(BaseException):
    """Stands in for os._exit: raised so the test sees the code and nothing after it runs."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class FakeDirectoryReader:
    """The run directory's reader without Kafka: these records carry no heads, so nothing waits."""

    def __init__(self, *_args: Any, **_kw: Any) -> None:
        self.newest_ms = 0

    def start(self) -> None:
        pass

    async def wait_covered(self, heads: dict[int, int]) -> None:
        raise AssertionError(f"a record without heads waited for the directory: {heads}")


class Rig:
    """The worker as attach() builds it, on fakes; one event loop per test."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        loop: asyncio.AbstractEventLoop,
        *,
        batch_size: int = 1000,
        partitions: tuple[int, ...] = (0, 1),
        topic_partitions: int = 4,  # the input topic's, assigned or not
        bases: dict[int, int] | None = None,
        max_event_bytes: int = topics.MAX_MESSAGE_BYTES,
        mapping: MappingConfig | None = None,
        member_confirmed: bool = True,
        processing_guarantee: str = "at_least_once",
        data_dir: str | None = None,  # given: the worker claims it (exactly_once); else nothing is claimed
    ) -> None:
        self.loop = loop
        self.trace: Trace = []
        self.consumer = FakeConsumer(self.trace, partitions)
        self.table = FakeTable()
        self.changelog = FakeChangelog(self.trace)
        self.sender = FakeSender(self.trace)
        # the group committed every partition at 0 unless the test says otherwise
        self.offsets = FakeInputOffsets(
            committed_offsets=dict({p: 0 for p in partitions} if bases is None else bases)
        )
        self.app = FakeApp(self.consumer)
        self.stream = FakeStream()
        parts = worker_parts
        monkeypatch.setattr(parts, "Sender", lambda *_args, **_kw: self.sender)
        monkeypatch.setattr(parts, "ChangelogWriter", lambda *_args, **_kw: self.changelog)
        monkeypatch.setattr(parts, "InputOffsets", lambda *_args, **_kw: self.offsets)
        monkeypatch.setattr(parts, "DirectoryReader", FakeDirectoryReader)
        monkeypatch.setattr(
            parts,
            "kept_directory",
            lambda settings, _partitions: (None, RunDirectory(starts=MemoryRunStarts())),
        )
        monkeypatch.setattr(parts, "RunStore", lambda *_args, **_kw: self.table)
        self.transactions = FakeTransactions(self.trace, self.table)
        monkeypatch.setattr(parts, "worker_transactions", lambda *_args: self.transactions)
        if data_dir is None:
            monkeypatch.setattr(parts, "claim", lambda _data_dir: SimpleNamespace(name="rig"))
        monkeypatch.setattr(agent, "os", SimpleNamespace(_exit=self._exit))
        monkeypatch.setattr(exits, "os", SimpleNamespace(_exit=self._exit))
        settings = WorkerSettings(
            processing_guarantee=processing_guarantee,
            batch_size=batch_size,
            batch_within=0.0,
            retention_ms=RETENTION_MS,
            max_event_bytes=max_event_bytes,
            mapping=mapping or MappingConfig(),
            **({} if data_dir is None else {"data_dir": data_dir}),
        )
        sa = StreamApp(
            settings,
            cast(faust.App, self.app),
            input_topic=INPUT,
            output_topic=OUTPUT,
            errors_topic=ERRORS,
            partitions=topic_partitions,
            framing=InputFraming(None),
        )
        self.worker = agent.attach(sa)
        [self.process] = self.app.agents
        self.rebalance(assigned=partitions)  # as faust's first assignment: ledgers at the commits
        if member_confirmed:  # the group's acceptance is not under test: every record finds it recent
            self.worker.order.confirmed_at = math.inf

    @property
    def gate(self) -> member_gate.MemberGate:
        """The chain's gate (step 3), which the fencing tests look into."""
        step: Any = self.worker.head
        while not isinstance(step, member_gate.MemberGate):
            step = step.next
        return step

    def rebalance(self, assigned: tuple[int, ...]) -> None:
        """A rebalance as faust runs it: the revocation hook, then the assignment hook."""
        [revoked] = self.app.on_partitions_revoked.receivers
        [on_assigned] = self.app.on_partitions_assigned.receivers
        self.loop.run_until_complete(revoked(self.app))
        self.consumer.assigned = {TP(INPUT, p) for p in assigned}
        self.loop.run_until_complete(on_assigned(self.app))

    @staticmethod
    def _exit(code: int) -> None:
        raise Exited(code)

    def feed(self, *events: FakeEvent) -> None:
        """Hand events to the agent as faust's stream would, one after the other."""
        self.stream.pending.extend(events)
        self.loop.run_until_complete(self.process(self.stream))

    def tick(self, timer: str) -> None:
        self.loop.run_until_complete(self.app.timers[timer]())

    def flush_quiet_batch(self) -> None:
        self.tick("poll_timer")  # batch_within 0: any batch is quiet

    def take(self) -> Trace:
        """The trace so far, cleared."""
        out = list(self.trace)
        self.trace.clear()
        return out


def kinds(trace: Trace) -> list[str]:
    return [step[0] for step in trace]


def commits(trace: Trace, partition: int) -> list[int]:
    return [s[2] for s in trace if s[0] == "commit" and s[1] == partition]


def sends(trace: Trace) -> list[str]:
    return [s[3] for s in trace if s[0] == "send"]


def seeks(trace: Trace) -> list[tuple[Any, ...]]:
    return [s for s in trace if s[0] == "seek"]


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> Rig:
    return Rig(monkeypatch, loop)


def later(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# ---------------------------------------------------------------------------- batch order


def test_a_checkpoint_flushes_the_sends_then_stores_then_flushes_the_changelog_then_commits(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=4)
    rig.take()
    rig.feed(
        event_of(started("r1", offset=0), 0, 0),
        event_of(started("r2", offset=1, instance="i2"), 0, 1),
        event_of(ended("r2", offset=2), 0, 2),
        event_of(ended("r1", offset=3), 0, 3),
    )
    trace = rig.take()
    assert trace == [
        ("send", OUTPUT, "START", "r1"),
        ("send", OUTPUT, "START", "r2"),
        ("send", OUTPUT, "COMPLETE", "r2"),
        ("send", OUTPUT, "COMPLETE", "r1"),
        ("flush",),
        ("set", "0:r1", 0),  # one write per run, coalesced over the batch
        ("set", "0:r2", 0),
        ("set", "hwm:0:0", 0),  # then the log partition's mark, in the same partition
        ("changelog",),
        ("commit", 0, 4),  # the processed prefix, once
    ]
    assert (
        not rig.worker.parts.report.batched
        and not rig.worker.parts.table.open
        and not rig.worker.parts.table.marks.batch
    )
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(3)


def test_nothing_is_stored_or_committed_before_the_batch_is_checkpointed(rig: Rig) -> None:
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    assert kinds(rig.take()) == ["send", "send"]  # batch not full, not yet quiet
    assert rig.table.rows == {}
    rig.flush_quiet_batch()
    assert kinds(rig.take()) == ["flush", "set", "set", "changelog", "commit"]
    assert rig.worker.order.tracker.committed == {0: 2, 1: 0}


def test_a_failed_flush_exits_without_storing_or_committing_the_batch(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=2)
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.sender.fail_flush = True
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(ended("r1", offset=1), 0, 1))
    assert exited.value.code == ExitCode.SEND_FAILED
    assert kinds(rig.take()) == ["send", "send"]  # no flush, no state write, no commit
    assert rig.table.rows == {}


def test_an_unexpected_exception_on_a_record_exits_before_anything_is_committed(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """faust would restart a crashed agent and go on past the record: the process leaves instead."""
    rig = Rig(monkeypatch, loop, batch_size=10)
    rig.take()
    real_apply = apply_record.apply

    def failing(record: Record, *args: Any, **kwargs: Any) -> Any:
        if record.engine_run_id == "r2":
            raise RuntimeError("injected")
        return real_apply(record, *args, **kwargs)

    monkeypatch.setattr(apply_record, "apply", failing)
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(started("r2", offset=1, instance="i2"), 0, 1))
    assert exited.value.code == exits.EX_FAILED != 0
    assert "commit" not in kinds(rig.take())  # neither the failing record nor the batch before it
    assert rig.table.rows == {}


@pytest.mark.parametrize("step", ["state", "changelog"])
def test_an_unexpected_exception_in_a_checkpoint_exits_before_the_batch_is_committed(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop, step: str
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=2)
    rig.take()

    def broken(*_args: object) -> None:
        raise OSError("disk full")

    async def broken_flush() -> None:
        raise OSError("broker gone")

    if step == "state":
        monkeypatch.setattr(rig.worker.parts.table, "store_batch", broken)
    else:
        monkeypatch.setattr(rig.changelog, "flush", broken_flush)
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(ended("r1", offset=1), 0, 1))
    assert exited.value.code == exits.EX_FAILED
    assert "commit" not in kinds(rig.take())


def test_the_commit_waits_until_the_broker_acknowledged_every_changelog_write(rig: Rig) -> None:
    """The checkpoint commits only once the changelog flush returned: every write acknowledged."""
    rig.changelog.hold = True
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.take()
    task = rig.loop.create_task(rig.worker.head.join())
    rig.loop.run_until_complete(asyncio.sleep(0.01))
    assert kinds(rig.take()) == ["flush", "set", "set", "changelog"]  # no commit yet
    assert not task.done()
    assert rig.changelog.released is not None
    rig.changelog.released.set()
    rig.loop.run_until_complete(task)
    assert commits(rig.take(), 0) == [1]


def test_a_record_admitted_while_a_rebalance_begins_is_not_processed(rig: Rig) -> None:
    """The agent waited for the broker about a hole; the revocation ran meanwhile: the record is
    not processed after its partition went (its next owner reads it from the commit)."""
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    rig.take()
    asked = asyncio.Event()
    answer: asyncio.Future[int | None] = rig.loop.create_future()

    async def slow_probe(partition: int, offset: int) -> int | None:
        asked.set()
        return await answer

    rig.offsets.first_offset_from = slow_probe  # type: ignore[method-assign]
    rig.stream.pending.append(event_of(started("r2", offset=2), 0, 2))  # a hole at offset 1
    agent_task = rig.loop.create_task(rig.process(rig.stream))
    rig.loop.run_until_complete(asked.wait())
    [revoked] = rig.app.on_partitions_revoked.receivers
    flush = rig.sender.flush

    async def answer_during_the_revocation(timeout: float = 60.0) -> None:
        # the revocation hook's checkpoint holds the lock; the probe answers now: markers only at
        # offset 1, so the record is admitted, and the agent waits for the lock
        answer.set_result(2)
        await asyncio.sleep(0.01)
        await flush(timeout)

    rig.sender.flush = answer_during_the_revocation  # type: ignore[method-assign]
    rig.loop.run_until_complete(revoked(rig.app))
    rig.loop.run_until_complete(agent_task)
    trace = rig.take()
    assert sends(trace) == []  # r2 was not processed
    assert commits(trace, 0) == [2]  # r0 and the marker at 1, checkpointed before the partitions went


def test_records_are_not_taken_once_the_worker_decided_to_stop(rig: Rig) -> None:
    rig.take()
    rig.worker.order.tracker.stopping = True  # --until-idle decided: what it took now would not be committed
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    assert rig.take() == []


def test_a_commit_the_consumer_refuses_is_asked_again_with_the_next_checkpoint(rig: Rig) -> None:
    rig.take()
    rig.consumer.commit_ok = False  # faust's consumer: "already rebalanced"
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.flush_quiet_batch()
    assert commits(rig.take(), 0) == [1]
    rig.consumer.commit_ok = True
    rig.feed(event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    assert commits(rig.take(), 0) == [2]
    assert rig.worker.order.tracker.committed[0] == 2


# ---------------------------------------------------------------------------- membership


def test_a_record_is_processed_only_after_the_group_accepted_a_commit_recently(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, member_confirmed=False)
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    assert rig.take() == [
        ("commit", 0, 0),  # no accepted commit yet: the committed offset again, before anything is sent
        ("send", OUTPUT, "START", "r1"),
        ("send", OUTPUT, "COMPLETE", "r1"),
        ("flush",),
        ("set", "0:r1", 0),
        ("set", "hwm:0:0", 0),
        ("changelog",),
        ("commit", 0, 2),
    ]
    # the checkpoint's accepted commit is recent: the next record needs no commit of its own
    rig.feed(event_of(started("r2", offset=2, instance="i2"), 0, 2))
    assert rig.take() == [("send", OUTPUT, "START", "r2")]
    # once it is older than a third of the session timeout, it does again
    rig.worker.order.confirmed_at -= rig.worker.settings.session_timeout / 3
    rig.feed(event_of(ended("r2", offset=3), 0, 3))
    assert rig.take() == [("commit", 0, 2), ("send", OUTPUT, "COMPLETE", "r2")]


def test_a_record_the_group_refuses_waits_unprocessed_for_the_rebalance_and_its_next_owner_reads_it(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, member_confirmed=False)
    rig.take()
    rig.consumer.commit_ok = False  # the group dropped this worker: "already rebalanced"
    refused = metrics.MEMBERSHIP_REFUSED._value.get()
    [revoked] = rig.app.on_partitions_revoked.receivers
    loop.call_later(0.3, lambda: loop.create_task(revoked(rig.app)))  # the rebalance aiokafka asks for
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    assert rig.take() == [("commit", 0, 0)]  # refused: nothing sent, stored or committed
    assert metrics.MEMBERSHIP_REFUSED._value.get() == refused + 1
    assert rig.worker.parts.report.batched == 0
    # the new assignment reads the record again from the committed offset, and processes it
    rig.consumer.commit_ok = True
    [on_assigned] = rig.app.on_partitions_assigned.receivers
    loop.run_until_complete(on_assigned(rig.app))
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    assert rig.take() == [("commit", 0, 0), ("send", OUTPUT, "START", "r1")]


def test_a_refused_record_without_a_rebalance_ends_the_process_unprocessed(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, member_confirmed=False)
    monkeypatch.setattr(member_gate, "REJOIN_SECONDS", 0.3)
    rig.take()
    rig.consumer.commit_ok = False
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(started("r1", offset=0), 0, 0))
    assert exited.value.code == ExitCode.FAILED
    assert rig.take() == [("commit", 0, 0)]


def test_a_bad_record_goes_to_the_errors_topic_and_is_committed_with_its_batch(rig: Rig) -> None:
    rig.take()
    rig.feed(
        event_of(declared("ghost", offset=0), 0, 0),  # unknown run
        FakeEvent(FakeMessage(INPUT, 0, 1, b"0", []), b"not avro"),
        event_of(started("r1", offset=1), 0, 2),
    )
    rig.flush_quiet_batch()
    assert rig.take() == [
        ("send", ERRORS, None, None),
        ("send", ERRORS, None, None),
        ("send", OUTPUT, "START", "r1"),
        ("flush",),
        ("set", "0:r1", 0),
        ("set", "hwm:0:0", 0),  # the refused record counts too: a copy of it is refused no more
        ("changelog",),
        ("commit", 0, 3),
    ]
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(1)


def test_records_that_would_make_an_event_or_state_too_large_go_to_the_errors_topic(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """150 outputs with 8 KB names: the declarations that do not fit are refused, each as too_large,
    and the run still ends with an event within the limit; a START above the limit is refused too."""
    limit = 100_000
    rig = Rig(monkeypatch, loop, max_event_bytes=limit)
    rig.take()
    names = [f"{i:03d}" + "n" * 8_000 for i in range(150)]
    rig.feed(
        event_of(started("r1", offset=0), 0, 0),
        *(
            event_of(declared("r1", offset=1 + i, direction=Direction.OUTPUT, name=n), 0, 1 + i)
            for i, n in enumerate(names)
        ),
        event_of(ended("r1", offset=200), 0, 151),
        event_of(started("r2", offset=201, instance="i" * 200_000), 0, 152),
    )
    rig.flush_quiet_batch()
    outputs = [json.loads(v) for t, v, _ in rig.sender.values if t == OUTPUT]
    errors = [(v, h) for t, v, h in rig.sender.values if t == ERRORS]
    assert [d["eventType"] for d in outputs] == ["START", "COMPLETE"]
    kept = [o["name"] for o in outputs[1]["outputs"]]
    assert kept == names[: len(kept)] and 5 < len(kept) < 150
    assert all(len(v) <= limit for t, v, _ in rig.sender.values)
    assert len(errors) == 150 - len(kept) + 1
    for value, h in errors:
        assert h[deadletter.ERROR] == b"too_large" and len(value) <= deadletter.COPY_LIMIT
        assert int(h[deadletter.SIZE]) >= len(value) and len(h[deadletter.DIGEST]) == 64
    *refused, (start_copy, start_h) = errors
    assert all(b"the dataset is not added" in h[deadletter.ERROR_DETAIL] for _, h in refused)
    assert int(start_h[deadletter.SIZE]) > limit and start_copy.startswith(b'{"eventTime"')
    assert b"START event is" in start_h[deadletter.ERROR_DETAIL]
    assert rig.table.state("r2") is None  # not applied: its end would be an unknown run, not a guess
    assert commits(rig.take(), 0) == [153]


# ---------------------------------------------------------------------------- admission and commit order


def test_records_are_taken_in_offset_order_per_partition_from_the_committed_offsets(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, partitions=(0, 1), bases={0: 5, 1: 3})
    rig.take()
    a, b, c = started("a", offset=0), started("b", offset=0, partition=1), started("c", offset=1)
    rig.feed(
        event_of(a, 0, 5),
        event_of(b, 1, 3),
        event_of(a, 0, 5),  # fetched again: already taken
        event_of(c, 0, 6),
        event_of(started("x", offset=0, partition=2), 2, 0),  # a partition this worker was not given
        event_of(ended("b", offset=1, partition=1), 1, 4),
        event_of(ended("a", offset=2), 0, 7),
        event_of(a, 0, 4),  # below the committed offset
    )
    assert sends(rig.take()) == ["a", "b", "c", "b", "a"]  # no replayed START, nothing of partition 2
    rig.flush_quiet_batch()
    trace = rig.take()
    assert kinds(trace) == ["flush", "set", "set", "set", "set", "set", "changelog", "commit", "commit"]
    # each partition's run states, then its mark (a stored mark never covers a state not stored)
    writes = [(s[2], s[1]) for s in trace if s[0] == "set"]
    assert [key for _, key in writes if key.startswith("hwm:")] == [
        "hwm:0:0",
        "hwm:1:1",
    ]  # a mark per partition
    for partition in (0, 1):
        keys = [key for p, key in writes if p == partition]
        assert keys[-1] == f"hwm:{partition}:{partition}" and len(keys) >= 2
    assert commits(trace, 0) == [8]
    assert commits(trace, 1) == [5]


def test_an_uncommitted_partition_starts_at_its_earliest_offset(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, partitions=(0,), bases={})
    rig.offsets.low_offsets[0] = 7  # retention deleted 0..6
    rig.rebalance(assigned=(0,))
    rig.take()
    rig.flush_quiet_batch()
    assert commits(rig.take(), 0) == []  # nothing in the batch: no checkpoint yet
    rig.feed(event_of(started("r1", offset=7), 0, 7))
    rig.flush_quiet_batch()
    assert commits(rig.take(), 0) == [8]


def test_a_partition_the_group_never_committed_is_committed_at_its_start_by_the_first_checkpoint(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, partitions=(0, 1), bases={0: 0})  # partition 1 empty, never committed
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert commits(trace, 0) == [1] and commits(trace, 1) == [0]  # the group has a position for both
    rig.feed(event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    assert commits(rig.take(), 1) == []


@pytest.mark.parametrize(
    "code",
    ["NOT_LEADER_FOR_PARTITION", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "_TIMED_OUT"],
)
def test_an_assignment_during_a_leader_election_asks_the_broker_again(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    """A broker died: the group's offsets cannot be read until the partition's new leader is elected
    or the group's coordinator has moved (NOT_COORDINATOR: the broker kill test once ended a worker
    here)."""
    from confluent_kafka import KafkaError, KafkaException

    monkeypatch.setattr(asyncio, "sleep", _no_sleep)
    answers: list[Exception | None] = [KafkaException(KafkaError(getattr(KafkaError, code))), None]
    committed = rig.offsets.committed

    async def electing(partitions: list[int]) -> dict[int, int]:
        error = answers.pop(0)
        if error is not None:
            raise error
        return await committed(partitions)

    rig.offsets.committed = electing  # type: ignore[method-assign]
    rig.offsets.committed_offsets[0] = 3
    rig.rebalance(assigned=(0, 1))
    assert answers == [] and rig.worker.order.tracker.committed == {0: 3, 1: 0}


def test_an_assignment_whose_offsets_cannot_be_read_leaves_without_taking_anything(rig: Rig) -> None:
    from confluent_kafka import KafkaError, KafkaException

    async def refused(partitions: list[int]) -> dict[int, int]:
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    rig.offsets.committed = refused  # type: ignore[method-assign]
    with pytest.raises(Exited) as exited:
        rig.rebalance(assigned=(0,))
    assert exited.value.code == exits.EX_FAILED


async def _no_sleep(seconds: float) -> None:
    return None


def test_records_past_a_hole_are_dropped_until_the_partition_is_read_again(rig: Rig) -> None:
    rig.take()
    records = [started(f"r{i}", offset=i, instance=f"i{i}") for i in range(5)]
    rig.offsets.first_from[(0, 1)] = 1  # the broker has offset 1: faust dropped records on the way
    rig.feed(event_of(records[0], 0, 0), event_of(records[3], 0, 3), event_of(records[4], 0, 4))
    trace = rig.take()
    assert seeks(trace) == [("seek", 0, 1)]
    assert sends(trace) == ["r0"]  # 3 and 4 were still in flight from before the seek
    rig.feed(*(event_of(records[i], 0, i) for i in range(1, 5)))  # read again from offset 1
    rig.flush_quiet_batch()
    trace = rig.take()
    assert sends(trace) == ["r1", "r2", "r3", "r4"]
    assert commits(trace, 0) == [5]


def test_an_empty_hole_is_passed_and_committed_over(rig: Rig) -> None:
    rig.take()
    rig.offsets.first_from[(0, 1)] = 2  # nothing at offset 1: a transaction marker
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 2))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert commits(trace, 0) == [3]
    assert seeks(trace) == []


def _quiet_for_a_while(rig: Rig, *partitions: int) -> None:
    for p in partitions:
        rig.worker.order.tracker.ledgers[p].seen_at = time.monotonic() - input_tracker.TAIL_QUIET_SECONDS - 1


def test_a_tail_fetched_but_never_delivered_is_read_again(rig: Rig) -> None:
    """faust drops the records it fetched before a rebalance; when they are a partition's last ones,
    no later record shows the hole, and only the tail check finds it (a stall of minutes before)."""
    records = [started(f"r{i}", offset=i, instance=f"i{i}") for i in range(3)]
    rig.feed(event_of(records[0], 0, 0))
    rig.flush_quiet_batch()
    rig.take()
    rig.offsets.end_offsets.update({0: 3, 1: 0})
    rig.offsets.first_from[(0, 1)] = 1
    rig.tick("tail_timer")  # offsets 1 and 2 dropped on the way, but only just: not yet
    assert seeks(rig.take()) == []
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == [("seek", 0, 1)]  # partition 1 is at its end
    rig.feed(*(event_of(records[i], 0, i) for i in (1, 2)))  # read again from offset 1
    rig.flush_quiet_batch()
    trace = rig.take()
    assert sends(trace) == ["r1", "r2"]
    assert commits(trace, 0) == [3]


def test_a_tail_of_transaction_markers_is_passed_without_reading_again(rig: Rig) -> None:
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    rig.flush_quiet_batch()
    rig.take()
    rig.offsets.end_offsets.update({0: 2, 1: 0})
    rig.offsets.first_from[(0, 1)] = 2  # nothing from offset 1 to the end: a commit marker
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == []
    rig.tick("poll_timer")  # nothing in the batch: no checkpoint
    assert rig.take() == []
    rig.loop.run_until_complete(rig.worker.head.join())  # the next checkpoint commits over it
    assert commits(rig.take(), 0) == [2]


def test_a_rebalance_checkpoints_the_batch_before_the_partitions_go(rig: Rig) -> None:
    rig.take()
    rig.feed(event_of(started("r0", offset=0), 0, 0), event_of(started("r1", offset=0, partition=1), 1, 0))
    rig.rebalance(assigned=(1,))
    trace = rig.take()
    assert kinds(trace) == [
        "send",
        "send",
        "flush",
        "set",
        "set",
        "set",
        "set",
        "changelog",
        "commit",
        "commit",
    ]
    assert commits(trace, 0) == [1] and commits(trace, 1) == [1]
    assert set(rig.worker.order.tracker.ledgers) == {1}
    rig.feed(event_of(started("r2", offset=1), 0, 1))  # a late record of a revoked partition
    rig.flush_quiet_batch()
    assert rig.take() == []


def test_a_rebalance_or_a_checkpoint_under_way_holds_the_tail_check(rig: Rig) -> None:
    rig.offsets.end_offsets.update({0: 5, 1: 0})
    rig.offsets.first_from[(0, 0)] = 0
    rig.app.rebalancing = True
    rig.worker.order.tracker.rebalancing = True  # the revocation hook ran; the assignment hook did not yet
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == []
    rig.worker.order.tracker.rebalancing = False
    rig.worker.order.tracker.checkpointing = True
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == []
    rig.worker.order.tracker.checkpointing = False
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == [("seek", 0, 0)]


def test_a_record_that_arrives_while_the_broker_is_asked_cancels_the_read_again(rig: Rig) -> None:
    rig.take()
    rig.offsets.end_offsets.update({0: 5, 1: 0})

    async def record_arrives_meanwhile(partition: int, offset: int) -> int | None:
        rig.worker.order.tracker.arrived(partition, offset, time.monotonic())  # as admit() does
        return 0

    rig.offsets.first_offset_from = record_arrives_meanwhile  # type: ignore[method-assign]
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert seeks(rig.take()) == []


def test_sigusr1_describes_where_each_input_partition_is_read(rig: Rig) -> None:
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    lines = rig.worker.describe_input().splitlines()
    assert [line.split(":")[0] for line in lines] == ["input partition 0", "input partition 1"]
    assert "read position 1, commit base 0, committed 0" in lines[0]  # taken, not yet checkpointed
    assert "read again: no" in lines[1]


# ---------------------------------------------------------------------------- the batch's state


def test_records_of_one_run_in_one_batch_see_each_others_state(rig: Rig) -> None:
    rig.feed(
        event_of(started("r1", offset=0), 0, 0),
        event_of(declared("r1", offset=1, name="shop.public.orders"), 0, 1),
        event_of(ended("r1", offset=2), 0, 2),
    )
    rig.flush_quiet_batch()
    trace = rig.take()
    assert [s for s in trace if s[0] in ("send", "set")] == [
        ("send", OUTPUT, "START", "r1"),
        ("send", OUTPUT, "COMPLETE", "r1"),  # neither record went to the errors topic as unknown_run
        ("set", "0:r1", 0),
        ("set", "hwm:0:0", 0),
    ]
    state = rig.table.state("r1")
    assert state is not None and state.end is not None
    assert [d.name for d in state.inputs] == ["shop.public.orders"]


def test_a_later_batch_reads_the_stored_state(rig: Rig) -> None:
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.flush_quiet_batch()
    rig.take()
    rig.worker.parts.table.cache.clear()  # read it from the table, not from what the worker remembers
    rig.worker.parts.table.marks.clear()
    rig.feed(event_of(ended("r1", offset=1), 0, 1), event_of(ended("r1", offset=1), 0, 2))
    rig.flush_quiet_batch()
    trace = rig.take()
    # the second RunEnded is a copy of the first at another input offset: at the log partition's
    # mark (advanced by the first, in the batch), so skipped; one state change, then the mark
    assert [s for s in trace if s[0] in ("send", "set")] == [
        ("send", OUTPUT, "COMPLETE", "r1"),
        ("set", "0:r1", 0),
        ("set", "hwm:0:0", 0),
    ]
    assert commits(trace, 0) == [3]
    state = rig.table.state("r1")
    assert state is not None and state.end is not None


def test_without_a_stored_mark_a_replay_re_emits_from_the_run_state(rig: Rig) -> None:
    """A state stored without a mark (by a version before marks): the run's own state still tells a
    replay, which re-sends the identical terminal event, never a START after it."""
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    first = [v for t, v, _ in rig.sender.values if t == OUTPUT]
    del rig.table.rows[b"hwm:0:0"]
    rig.worker.parts.table.cache.clear()
    rig.worker.parts.table.marks.clear()
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 2), event_of(ended("r1", offset=1), 0, 3))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert [s for s in trace if s[0] in ("send", "set")] == [
        ("send", OUTPUT, "COMPLETE", "r1"),  # the replayed RunStarted of an ended run sends nothing
        ("set", "hwm:0:0", 0),  # the run's state is unchanged; the mark is stored again
    ]
    again = [v for t, v, _ in rig.sender.values if t == OUTPUT][len(first) :]
    assert again == first[1:]


# ---------------------------------------------------------------------------- eviction


def _finish_r1(rig: Rig) -> None:
    """r1 starts and ends (log partition 0, offsets 0..1, input partition 0 offsets 0..1): one batch."""
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    assert kinds(rig.take()) == ["send", "send", "flush", "set", "set", "changelog", "commit"]


def test_a_finished_run_stays_within_the_window_even_when_its_end_is_committed(rig: Rig) -> None:
    _finish_r1(rig)
    rig.offsets.committed_offsets[0] = 2  # everything up to input offset 1 (r1's end) is committed
    rig.tick("committed_timer")
    rig.feed(event_of(started("r2", offset=2, start=later(1.5)), 0, 2))  # 30 s after r1's end
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] == "del"] == []
    rig.feed(event_of(started("r3", offset=3, start=later(2.1)), 0, 3))  # 66 s after: past the window
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] == "del"] == [("del", "0:r1", 0)]


def test_a_finished_run_is_evicted_only_once_its_end_is_committed_and_after_the_flush(rig: Rig) -> None:
    _finish_r1(rig)
    # the window has passed, but the broker has not committed the RunEnded's batch yet
    rig.feed(event_of(started("r2", offset=2, start=later(10)), 0, 2))
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] == "del"] == []
    rig.offsets.committed_offsets[0] = 1  # committed up to r1's start only
    rig.tick("committed_timer")
    rig.feed(event_of(started("r3", offset=3, start=later(11)), 0, 3))
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] == "del"] == []
    assert rig.table.state("r1") is not None

    rig.offsets.committed_offsets[0] = 2  # now r1's end is committed
    rig.tick("committed_timer")
    rig.feed(event_of(started("r4", offset=4, start=later(12)), 0, 4))
    assert [s for s in rig.take() if s[0] == "del"] == []  # not before the evicting batch is flushed
    rig.flush_quiet_batch()
    assert rig.take() == [
        ("flush",),
        ("del", "0:r1", 0),  # the tombstone goes to the partition of the record that evicted it
        ("set", "0:r4", 0),
        ("set", "hwm:0:0", 0),
        ("changelog",),
        ("commit", 0, 5),
    ]
    assert rig.table.state("r1") is None
    assert rig.table.state("r2") is not None


def test_a_run_is_never_evicted_in_the_batch_of_its_terminal_event(rig: Rig) -> None:
    rig.offsets.committed_offsets[0] = 1_000  # whatever the broker says
    rig.tick("committed_timer")
    rig.feed(
        event_of(started("r1", offset=0), 0, 0),
        event_of(ended("r1", offset=1), 0, 1),
        event_of(started("r2", offset=2, start=later(30)), 0, 2),  # far past the window
    )
    rig.tick("committed_timer")
    rig.feed(event_of(started("r3", offset=3, start=later(31)), 0, 3))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert [s for s in trace if s[0] in ("send", "flush", "set", "del")] == [
        ("send", OUTPUT, "START", "r1"),
        ("send", OUTPUT, "COMPLETE", "r1"),  # the terminal event is flushed and stored first
        ("send", OUTPUT, "START", "r2"),
        ("send", OUTPUT, "START", "r3"),
        ("flush",),
        ("set", "0:r1", 0),
        ("set", "0:r2", 0),
        ("set", "0:r3", 0),
        ("set", "hwm:0:0", 0),
    ]
    state = rig.table.state("r1")
    assert state is not None and state.end is not None

    rig.tick("committed_timer")  # now the batch is committed and below the committed offset
    rig.feed(event_of(started("r5", offset=4, start=later(32)), 0, 4))
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] in ("flush", "del")] == [("flush",), ("del", "0:r1", 0)]


def test_every_event_carries_its_run_id_type_time_and_job_headers_for_the_sink(rig: Rig) -> None:
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    outputs = [(json.loads(v), h) for t, v, h in rig.sender.values if t == OUTPUT]
    assert [d["eventType"] for d, _ in outputs] == ["START", "COMPLETE"]
    for doc, headers in outputs:
        assert list(headers) == list(wire.EVENT_HEADERS)
        assert headers[wire.HEADER_RUN_ID] == doc["run"]["runId"].encode()
        assert headers[wire.HEADER_EVENT_TYPE] == doc["eventType"].encode()
        assert headers[wire.HEADER_EVENT_TIME] == doc["eventTime"].encode()
        assert headers[wire.HEADER_JOB_NAMESPACE] == doc["job"]["namespace"].encode()
        assert headers[wire.HEADER_JOB_NAME] == doc["job"]["name"].encode("utf-8")


def test_the_agent_takes_faust_s_monitor_sensor_off_the_app() -> None:
    """Its per-event statistics serve faust's web pages, which the worker does not run."""
    app = faust.App("olstream-test-monitor", web_enabled=False)
    app.sensors.add(app.monitor)  # as faust does when the app starts
    worker_app.drop_monitor_sensor(app)
    assert app.monitor not in set(app.sensors)
    worker_app.drop_monitor_sensor(app)  # a second call changes nothing


def test_a_record_s_position_headers_are_read_in_one_pass_as_header_value_reads_them() -> None:
    headers = [
        (wire.HEADER_OFFSET, None),  # not bytes: passed over
        (wire.HEADER_PARTITION, b"3"),
        (wire.HEADER_OFFSET, b"17"),
        (wire.HEADER_PARTITION, b"9"),  # the first value counts
    ]
    assert log_marks.position_headers(headers) == (3, 17, False)
    assert log_marks.position_headers([*headers, (deadletter.REDRIVE_ATTEMPT, b"1")]) == (3, 17, True)
    assert log_marks.position_headers({wire.HEADER_PARTITION: b"x", wire.HEADER_OFFSET: b"2"}) == (
        None,
        2,
        False,
    )
    assert log_marks.position_headers(None) == (None, None, False)


# ---------------------------------------------------------------------------- exactly_once


def test_under_exactly_once_a_batch_is_one_transaction_of_the_worker_and_stored_after_it_commits(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=3, processing_guarantee="exactly_once", member_confirmed=False)
    assert rig.take()[0] == ("init",)  # the worker's one producer, before its first assignment
    rig.feed(
        event_of(started("r1", offset=0), 0, 0),
        event_of(started("r2", offset=0, partition=1, instance="i2"), 1, 0),
        event_of(ended("r1", offset=1), 0, 1),
    )
    assert rig.take() == [
        ("txn-send", OUTPUT, "START"),
        ("txn-send", OUTPUT, "START"),
        ("txn-send", OUTPUT, "COMPLETE"),
        ("txn-set", "0:r1", 0),  # the state, to its record's partition's changelog partition
        ("txn-set", "hwm:0:0", 0),  # then that partition's mark
        ("txn-set", "1:r2", 1),
        ("txn-set", "hwm:1:1", 1),
        ("txn-commit", ((0, 2), (1, 1))),  # with the input offsets; no commit through faust's consumer
    ]
    assert rig.transactions.rows_at_commit == [{}]  # nothing stored before the commit
    assert rig.table.state("r1") is not None and rig.table.state("r2", 1) is not None
    assert rig.table.writes == [(0, 2), (1, 2)]  # each store with the changelog offset past its writes
    assert rig.worker.order.tracker.committed == {0: 2, 1: 1}


def test_under_exactly_once_a_rebalance_initialises_no_producer(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=1, processing_guarantee="exactly_once")
    assert rig.take().count(("init",)) == 1
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.rebalance(assigned=(1,))
    rig.rebalance(assigned=(0, 1))
    assert ("init",) not in rig.take()


def test_under_exactly_once_a_transaction_carries_every_owned_partitions_offset(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """A partition without progress is committed at its committed offset again: every transaction's
    offsets carry the group's generation check, whichever partitions its records came from."""
    rig = Rig(monkeypatch, loop, batch_size=1, processing_guarantee="exactly_once", bases={0: 0, 1: 7})
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    assert [s for s in rig.take() if s[0] == "txn-commit"] == [("txn-commit", ((0, 1), (1, 7)))]
    assert rig.worker.order.tracker.committed == {0: 1, 1: 7}


def test_under_exactly_once_a_worker_the_group_dropped_drops_its_batch_and_goes_on_once_reassigned(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """The group refused the offsets (it dropped this worker; another may own its partitions): nothing
    of the batch was committed, so it is dropped, the transaction aborted, nothing is stored, and the
    records wait for the next assignment, from whose committed offsets they are read again."""
    rig = Rig(monkeypatch, loop, batch_size=2, processing_guarantee="exactly_once")
    rig.transactions.fenced = GenerationFenced("the group refused this worker's input offsets")
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    assert rig.table.rows == {} and rig.table.writes == []
    assert ("txn-abort",) in rig.take()
    assert not rig.worker.order.assigned.is_set()  # records wait for the rebalance
    assert rig.gate.fenced_at is not None and not rig.worker.parts.report.batched
    assert metrics.FENCES._value.get() >= 1

    rig.transactions.fenced = None
    rig.rebalance(assigned=(0, 1))  # the group's rebalance gives it its partitions again
    assert rig.gate.fenced_at is None
    rig.take()
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    assert [s for s in rig.take() if s[0] == "txn-commit"] == [("txn-commit", ((0, 2), (1, 0)))]
    assert rig.table.state("r1") is not None


@pytest.mark.parametrize(
    "failure",
    [ProducerFenced("transactional id 'x' is fenced"), TransactionFailed("x: the open transaction failed")],
)
def test_under_exactly_once_a_worker_whose_transaction_failed_reads_its_partitions_again_at_once(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop, failure: Exception
) -> None:
    """The broker aborted the transaction (open past its timeout: a pause, a broker away), which
    fenced the producer or left the transaction to be aborted: the transaction is ended (the producer
    replaced) and the partitions are read again from the committed offsets, with no rebalance."""
    rig = Rig(monkeypatch, loop, batch_size=2, processing_guarantee="exactly_once")
    rig.transactions.fenced = failure
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    trace = rig.take()
    assert rig.table.rows == {} and rig.table.writes == []
    assert trace[-3:] == [("txn-abort",), ("seek", 0, 0), ("seek", 1, 0)]
    assert rig.worker.order.assigned.is_set() and rig.gate.fenced_at is None

    rig.transactions.fenced = None
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    assert [s for s in rig.take() if s[0] == "txn-commit"] == [("txn-commit", ((0, 2), (1, 0)))]
    assert rig.table.state("r1") is not None


def test_a_fenced_worker_that_is_never_reassigned_leaves_with_fenced(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=1, processing_guarantee="exactly_once")
    rig.transactions.fenced = GenerationFenced("the group refused this worker's input offsets")
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    assert rig.gate.fenced_at is not None
    rig.gate.check_rejoined()  # within REJOIN_SECONDS: it waits
    rig.gate.fenced_at -= member_gate.REJOIN_SECONDS + 1
    with pytest.raises(Exited) as exited:
        rig.gate.check_rejoined()
    assert exited.value.code == ExitCode.FENCED


def test_an_exactly_once_worker_holds_its_data_dir_while_it_lives(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    """The data dir's lock is held as long as the worker's parts are: a second worker on the same data
    dir would share its transactional id and its stores (it is refused at start, exit CONFIG)."""
    data_dir = str(tmp_path / "data")
    rig = Rig(monkeypatch, loop, processing_guarantee="exactly_once", data_dir=data_dir)
    gc.collect()  # nothing but the parts may keep the lock's file open
    with pytest.raises(ConfigError, match="in use by a running worker"):
        worker_identity.claim(data_dir)
    assert rig.worker.parts.identity is not None


def test_a_fenced_batch_that_cannot_be_dropped_ends_the_process_from_a_timer_too(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """The poll timer's checkpoint is fenced by the epoch, and the committed offsets to read the
    partitions again from cannot be read: the process ends (faust would log a timer's exception and
    go on, with the ledgers forgotten and nothing read again)."""
    from confluent_kafka import KafkaError, KafkaException

    rig = Rig(monkeypatch, loop, processing_guarantee="exactly_once")
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.transactions.fenced = ProducerFenced("transactional id 'x' is fenced")

    async def refused(partitions: list[int]) -> dict[int, int]:
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    rig.offsets.committed = refused  # type: ignore[method-assign]
    with pytest.raises(Exited) as exited:
        rig.tick("poll_timer")
    assert exited.value.code == exits.EX_FAILED
