"""The worker's batch order (``streams/runtime/agent.py``): send, flush, store, ack; admission; eviction.

The agent loop registered by ``attach`` runs against fakes: a faust app that only collects the agent
and its timers, a consumer with input ledgers that records acks, a dict-like table, a sender that
records sends and flushes (and can fail), and the broker's offsets as the test sets them. Every
fake appends to one shared trace, so the tests can check the order across them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import faust
import pytest
from faust.streams import _current_event
from faust.types import TP

from olstream.contract import codec, topics, wire
from olstream.contract.records import Direction, Record
from olstream.shared import deadletter
from olstream.shared.errors import DeliveryError
from olstream.streams.input_ledger import InputLedger
from olstream.streams.log_marks import LogMark, loads_mark
from olstream.streams.runtime import agent, input_order
from olstream.streams.runtime import app as worker_app
from olstream.streams.runtime.app import StreamApp
from olstream.streams.settings import WorkerSettings
from olstream.streams.state import RunState, state_key
from olstream.streams.state_store import loads_state
from tests.support.stream_records import T0, declared, ended, started

INPUT = "olstream.eventlog"
OUTPUT = "openlineage.events"
ERRORS = "olstream.stream.errors"
RETENTION_MS = 60_000

# one entry per observable step: ("send", topic, event type or None, engine run id or None),
# ("flush",), ("set" | "del", engine run id, input partition of the current event),
# ("ack", input partition, offset, counted), ("seek", input partition, offset)
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


@dataclass(eq=False)  # weak-referenceable, as faust's events are (faust_private.set_current_event)
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


def _current_partition() -> int | None:
    ref = _current_event.get(None)
    event = ref() if ref is not None else None
    return None if event is None else int(event.message.partition)


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


class FakeStore:
    """The table's store: raw gets by bytes key."""

    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = rows

    def _get(self, key: bytes) -> bytes | None:
        return self.rows.get(key)


class FakeTable:
    """The run-state table: bytes keys and values; writes are traced with the current event's partition."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.rows: dict[bytes, bytes] = {}
        self.data = FakeStore(self.rows)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.trace.append(("set", key.decode(), _current_partition()))
        self.rows[key] = value

    def __delitem__(self, key: bytes) -> None:
        self.trace.append(("del", key.decode(), _current_partition()))
        del self.rows[key]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.rows.items()))

    def state(self, engine_run_id: str, log_partition: int = 0) -> RunState | None:
        raw = self.rows.get(state_key(log_partition, engine_run_id).encode())
        return None if raw is None else loads_state(raw)


class FakeConsumer:
    """The worker consumer's surface the agent uses; acks count only inside agent_acks (as WorkerConsumer)."""

    def __init__(self, trace: Trace, partitions: tuple[int, ...]) -> None:
        self.trace = trace
        self.assigned = {TP(INPUT, p) for p in partitions}
        self.ledgers: dict[int, InputLedger] = {}
        self.acking = False
        self._unacked_messages: set[FakeMessage] = set()  # taken and not yet acked (faust's own set)

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    @contextmanager
    def agent_acks(self) -> Iterator[None]:
        self.acking = True
        try:
            yield
        finally:
            self.acking = False

    def ack(self, message: FakeMessage) -> None:
        message.acked = True
        ledger = self.ledgers.get(message.partition)
        if self.acking and ledger is not None:
            ledger.note_acked(message.offset)
        self.trace.append(("ack", message.partition, message.offset, self.acking))

    async def read_input_again(self, partition: int, offset: int) -> None:
        self.trace.append(("seek", partition, offset))


class FakeStream:
    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.enable_acks = True
        self.pending: list[FakeEvent] = []

    async def events(self) -> AsyncIterator[FakeEvent]:
        pending, self.pending = self.pending, []
        for event in pending:
            yield event

    async def ack(self, event: FakeEvent) -> bool:
        self.consumer.ack(event.message)
        return True


@dataclass
class FakeInputOffsets:
    """The broker's view: committed offsets, and the first record at or after an offset."""

    committed_offsets: dict[int, int] = field(default_factory=dict)
    first_from: dict[tuple[int, int], int | None] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        return {p: o for p, o in self.committed_offsets.items() if p in partitions}

    async def first_offset_from(self, partition: int, offset: int) -> int | None:
        return self.first_from[(partition, offset)]

    async def bounds(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: (0, self.end_offsets[p]) for p in partitions}


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
    ) -> None:
        self.loop = loop
        self.trace: Trace = []
        self.consumer = FakeConsumer(self.trace, partitions)
        for p in partitions:  # as seek_to_committed leaves them
            self.consumer.ledgers[p] = InputLedger((bases or {}).get(p, 0))
        self.table = FakeTable(self.trace)
        self.sender = FakeSender(self.trace)
        self.offsets = FakeInputOffsets()
        self.app = FakeApp(self.consumer)
        self.stream = FakeStream(self.consumer)
        monkeypatch.setattr(agent, "Sender", lambda *_args, **_kw: self.sender)
        monkeypatch.setattr(worker_app, "InputOffsets", lambda *_args, **_kw: self.offsets)
        monkeypatch.setattr(agent, "os", SimpleNamespace(_exit=self._exit))
        settings = WorkerSettings(
            batch_size=batch_size,
            batch_within=0.0,
            retention_ms=RETENTION_MS,
            max_event_bytes=max_event_bytes,
        )
        sa = StreamApp(
            settings,
            cast(faust.App, self.app),
            input_topic=INPUT,
            output_topic=OUTPUT,
            errors_topic=ERRORS,
            table=self.table,
            partitions=topic_partitions,
        )
        self.worker = agent.attach(sa)
        [self.process] = self.app.agents

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
        self.tick("flush_quiet_batch")  # batch_within 0: any batch is quiet

    def take(self) -> Trace:
        """The trace so far, cleared."""
        out = list(self.trace)
        self.trace.clear()
        return out


def kinds(trace: Trace) -> list[str]:
    return [step[0] for step in trace]


def counted_acks(trace: Trace, partition: int) -> list[int]:
    return [s[2] for s in trace if s[0] == "ack" and s[1] == partition and s[3]]


def released(trace: Trace) -> list[tuple[int, int]]:
    return [(s[1], s[2]) for s in trace if s[0] == "ack" and not s[3]]


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> Rig:
    return Rig(monkeypatch, loop)


def later(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# ---------------------------------------------------------------------------- batch order


def test_a_batch_sends_in_record_order_then_flushes_then_stores_then_acks(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=4)
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
        ("ack", 0, 0, True),
        ("ack", 0, 1, True),
        ("ack", 0, 2, True),
        ("ack", 0, 3, True),
    ]
    assert rig.consumer.ledgers[0].advance() == 4
    assert not rig.worker.batch and not rig.worker.overlay and not rig.worker.marks.batch
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(3)


def test_nothing_is_stored_or_acked_before_the_batch_is_flushed(rig: Rig) -> None:
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    assert kinds(rig.take()) == ["send", "send"]  # batch not full, not yet quiet
    assert rig.table.rows == {}
    assert rig.consumer.ledgers[0].advance() == 0
    rig.flush_quiet_batch()
    assert kinds(rig.take()) == ["flush", "set", "set", "ack", "ack"]
    assert rig.consumer.ledgers[0].advance() == 2


def test_a_failed_flush_exits_without_storing_or_acking_the_batch(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=2)
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    rig.sender.fail_flush = True
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(ended("r1", offset=1), 0, 1))
    assert exited.value.code == agent.EX_SEND_FAILED
    assert kinds(rig.take()) == ["send", "send"]  # no flush, no state write, no ack
    assert rig.table.rows == {}
    assert rig.consumer.ledgers[0].advance() == 0  # the records are processed again after the restart


def test_an_unexpected_exception_on_a_record_exits_before_anything_is_acked(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """faust would restart a crashed agent and commit past the record: the process leaves instead."""
    rig = Rig(monkeypatch, loop, batch_size=10)
    real_apply = agent.apply

    def failing(record: Record, *args: Any) -> Any:
        if record.engine_run_id == "r2":
            raise RuntimeError("injected")
        return real_apply(record, *args)

    monkeypatch.setattr(agent, "apply", failing)
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(started("r2", offset=1, instance="i2"), 0, 1))
    assert exited.value.code == agent.EX_FAILED != 0
    assert "ack" not in kinds(rig.take())  # neither the failing record nor the batch before it
    assert rig.table.rows == {}
    assert rig.consumer.ledgers[0].advance() == 0


def test_an_unexpected_exception_while_flushing_exits_before_the_batch_is_acked(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, batch_size=2)

    def broken() -> None:
        raise OSError("disk full")

    monkeypatch.setattr(rig.worker, "write_overlay", broken)
    rig.feed(event_of(started("r1", offset=0), 0, 0))
    with pytest.raises(Exited) as exited:
        rig.feed(event_of(ended("r1", offset=1), 0, 1))
    assert exited.value.code == agent.EX_FAILED
    assert "ack" not in kinds(rig.take())
    assert rig.consumer.ledgers[0].advance() == 0


def test_a_bad_record_goes_to_the_errors_topic_and_is_acked_with_its_batch(rig: Rig) -> None:
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
        ("ack", 0, 0, True),
        ("ack", 0, 1, True),
        ("ack", 0, 2, True),
    ]
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(1)


def test_records_that_would_make_an_event_or_state_too_large_go_to_the_errors_topic(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """150 outputs with 8 KB names: the declarations that do not fit are refused, each as too_large,
    and the run still ends with an event within the limit; a START above the limit is refused too."""
    limit = 100_000
    rig = Rig(monkeypatch, loop, max_event_bytes=limit)
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
    assert counted_acks(rig.take(), 0) == list(range(153))


# ---------------------------------------------------------------------------- admission and ack order


def test_acks_follow_offset_order_per_partition_and_count_only_admitted_records(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    rig = Rig(monkeypatch, loop, partitions=(0, 1), bases={0: 5, 1: 3})
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
    before_flush = rig.take()
    assert released(before_flush) == [(0, 5), (2, 0), (0, 4)]  # let go at once, never counted
    assert [s[3] for s in before_flush if s[0] == "send"] == ["a", "b", "c", "b", "a"]  # no replayed START
    rig.flush_quiet_batch()
    trace = rig.take()
    assert kinds(trace) == ["flush", "set", "set", "set", "set", "set", "ack", "ack", "ack", "ack", "ack"]
    assert [s[1] for s in trace if s[0] == "set"][3:] == ["hwm:0:0", "hwm:1:1"]  # a mark per partition
    assert counted_acks(trace, 0) == [5, 6, 7]
    assert counted_acks(trace, 1) == [3, 4]
    assert released(trace) == []
    assert rig.consumer.ledgers[0].advance() == 8
    assert rig.consumer.ledgers[1].advance() == 5


def test_records_past_a_hole_are_released_until_the_partition_is_read_again(rig: Rig) -> None:
    records = [started(f"r{i}", offset=i, instance=f"i{i}") for i in range(5)]
    rig.offsets.first_from[(0, 1)] = 1  # the broker has offset 1: faust dropped records on the way
    rig.feed(event_of(records[0], 0, 0), event_of(records[3], 0, 3), event_of(records[4], 0, 4))
    trace = rig.take()
    assert [s for s in trace if s[0] in ("seek", "ack")] == [
        ("seek", 0, 1),
        ("ack", 0, 3, False),
        ("ack", 0, 4, False),  # still in flight from before the seek
    ]
    assert [s[3] for s in trace if s[0] == "send"] == ["r0"]
    rig.feed(*(event_of(records[i], 0, i) for i in range(1, 5)))  # read again from offset 1
    rig.flush_quiet_batch()
    trace = rig.take()
    assert [s[3] for s in trace if s[0] == "send"] == ["r1", "r2", "r3", "r4"]
    assert counted_acks(trace, 0) == [0, 1, 2, 3, 4]
    assert released(trace) == []
    assert rig.consumer.ledgers[0].advance() == 5


def test_an_empty_hole_is_passed_and_committed_over(rig: Rig) -> None:
    rig.offsets.first_from[(0, 1)] = 2  # nothing at offset 1: a transaction marker
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 2))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert counted_acks(trace, 0) == [0, 2]
    assert [s for s in trace if s[0] == "seek"] == []
    assert rig.consumer.ledgers[0].advance() == 3


def _quiet_for_a_while(rig: Rig, *partitions: int) -> None:
    for p in partitions:
        rig.consumer.ledgers[p].seen_at = time.monotonic() - input_order.TAIL_QUIET_SECONDS - 1


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
    assert [s for s in rig.take() if s[0] == "seek"] == []
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == [("seek", 0, 1)]  # partition 1 is at its end
    rig.feed(*(event_of(records[i], 0, i) for i in (1, 2)))  # read again from offset 1
    rig.flush_quiet_batch()
    trace = rig.take()
    assert [s[3] for s in trace if s[0] == "send"] == ["r1", "r2"]
    assert rig.consumer.ledgers[0].advance() == 3


def test_a_tail_of_transaction_markers_is_passed_without_reading_again(rig: Rig) -> None:
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    rig.flush_quiet_batch()
    rig.take()
    rig.offsets.end_offsets.update({0: 2, 1: 0})
    rig.offsets.first_from[(0, 1)] = 2  # nothing from offset 1 to the end: a commit marker
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    assert rig.consumer.ledgers[0].advance() == 2


def test_a_partition_with_records_on_the_way_or_a_rebalance_under_way_is_not_read_again(rig: Rig) -> None:
    rig.offsets.end_offsets.update({0: 5, 1: 0})
    rig.offsets.first_from[(0, 0)] = 0
    message = event_of(started("r0", offset=0), 0, 0).message
    rig.consumer._unacked_messages.add(message)  # taken by faust, not yet at the agent
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    rig.consumer._unacked_messages.clear()
    rig.app.rebalancing = True  # the rebalance's end seeks every partition to its commit
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    rig.app.rebalancing = False
    rig.worker.slow_flush_ended_at = time.monotonic()  # sends waited long: the queue was held back
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    rig.worker.slow_flush_ended_at = 0.0
    _quiet_for_a_while(rig, 0, 1)
    rig.loop.run_until_complete(rig.worker.lock.acquire())  # the agent flushing a batch
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    rig.worker.lock.release()
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == [("seek", 0, 0)]


def test_a_record_that_arrives_while_the_broker_is_asked_cancels_the_read_again(rig: Rig) -> None:
    rig.offsets.end_offsets.update({0: 5, 1: 0})
    asked = rig.offsets.first_offset_from

    async def record_arrives_meanwhile(partition: int, offset: int) -> int | None:
        rig.consumer.ledgers[partition].seen_at = time.monotonic()  # as admit() does
        return 0

    rig.offsets.first_offset_from = record_arrives_meanwhile  # type: ignore[method-assign]
    _quiet_for_a_while(rig, 0, 1)
    rig.tick("tail_timer")
    assert [s for s in rig.take() if s[0] == "seek"] == []
    rig.offsets.first_offset_from = asked  # type: ignore[method-assign]


def test_sigusr1_describes_where_each_input_partition_is_read(rig: Rig) -> None:
    rig.feed(event_of(started("r0", offset=0), 0, 0))
    rig.consumer._unacked_messages.add(event_of(started("r1", offset=0), 1, 0).message)
    lines = rig.worker.describe_input().splitlines()
    assert [line.split(":")[0] for line in lines] == ["input partition 0", "input partition 1"]
    assert "read position 1, commit base 0" in lines[0]  # taken, not yet flushed
    assert "records on the way: no" in lines[0]
    assert "records on the way: yes" in lines[1]


# ---------------------------------------------------------------------------- the batch overlay


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
    rig.worker.cache.clear()  # read it from the table, not from what the worker remembers
    rig.worker.marks.clear()
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
    assert counted_acks(trace, 0) == [1, 2]
    state = rig.table.state("r1")
    assert state is not None and state.end is not None


def test_without_a_stored_mark_a_replay_re_emits_from_the_run_state(rig: Rig) -> None:
    """A state stored without a mark (by a version before marks): the run's own state still tells a
    replay, which re-sends the identical terminal event, never a START after it."""
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    first = [v for t, v, _ in rig.sender.values if t == OUTPUT]
    del rig.table.rows[b"hwm:0:0"]
    rig.worker.cache.clear()
    rig.worker.marks.clear()
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
    assert kinds(rig.take()) == ["send", "send", "flush", "set", "set", "ack", "ack"]


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
        ("ack", 0, 4, True),
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

    rig.tick("committed_timer")  # now the batch is acked and below the committed offset
    rig.feed(event_of(started("r5", offset=4, start=later(32)), 0, 4))
    rig.flush_quiet_batch()
    assert [s for s in rig.take() if s[0] in ("flush", "del")] == [("flush",), ("del", "0:r1", 0)]


def test_every_event_carries_its_run_id_header_for_the_sink(rig: Rig) -> None:
    rig.feed(event_of(started("r1", offset=0), 0, 0), event_of(ended("r1", offset=1), 0, 1))
    rig.flush_quiet_batch()
    outputs = [(json.loads(v), h) for t, v, h in rig.sender.values if t == OUTPUT]
    assert [d["eventType"] for d, _ in outputs] == ["START", "COMPLETE"]
    for doc, headers in outputs:
        assert headers[wire.HEADER_RUN_ID] == doc["run"]["runId"].encode()
