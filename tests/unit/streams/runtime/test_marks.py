"""The worker's log marks (``streams/log_marks.py`` through ``streams/runtime/run_table.py``): input
duplicates produce nothing and never reopen a run; a crash replay re-emits identical bytes; a gap is
applied as before. On the fakes of ``test_agent.py`` (no I/O)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from faust.types import TP
from prometheus_client import REGISTRY

from olstream.contract.records import Record
from olstream.streams.log_marks import LogMark, dumps_mark, loads_mark
from olstream.streams.mapping import MappingConfig
from tests.support.stream_records import declared, ended, started
from tests.unit.streams.runtime.test_agent import (
    ERRORS,
    INPUT,
    OUTPUT,
    FakeEvent,
    Rig,
    commits,
    event_of,
    later,
)


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> Rig:
    return Rig(monkeypatch, loop)


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def outputs(rig: Rig) -> list[bytes]:
    return [v for t, v, _ in rig.sender.values if t == OUTPUT]


def errors(rig: Rig) -> list[bytes]:
    return [v for t, v, _ in rig.sender.values if t == ERRORS]


def run_r1(input_offset: int = 0) -> list[FakeEvent]:
    """r1 starts, declares an input and ends: log partition 0, offsets 0..2, from `input_offset` on."""
    records: list[Record] = [started("r1", offset=0), declared("r1", offset=1), ended("r1", offset=2)]
    return [event_of(r, 0, input_offset + i) for i, r in enumerate(records)]


def test_records_at_or_below_the_mark_are_counted_and_skipped(rig: Rig) -> None:
    rig.feed(*run_r1())
    rig.flush_quiet_batch()
    assert len(outputs(rig)) == 2
    rig.take()
    before = metric("olstream_stream_duplicates_total")
    replays = metric("olstream_stream_replayed_records_total")
    # published again later, at new input offsets (MirrorMaker 2 restarted, a source re-run)
    rig.feed(*run_r1(3))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert len(outputs(rig)) == 2 and errors(rig) == []
    assert [s for s in trace if s[0] in ("send", "set", "del")] == []  # nothing sent, nothing stored
    assert commits(trace, 0) == [6]  # checkpointed with their batch, so committed over
    assert metric("olstream_stream_duplicates_total") - before == 3
    assert metric("olstream_stream_replayed_records_total") == replays  # skipped before the run's state


def test_a_replay_of_an_unflushed_batch_re_emits_identical_bytes(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """Batch A is flushed (events acknowledged, state and mark stored), batch B is sent but the process
    dies before its state is written: the restarted worker reads both again from the committed offset.
    A's records are below the stored mark and produce nothing; B's produce the bytes they produced."""
    first = Rig(monkeypatch, loop)
    batch_a = [
        event_of(started("r1", offset=0), 0, 0),
        event_of(started("r2", offset=1, instance="i2"), 0, 1),
    ]
    batch_b = [
        event_of(declared("r1", offset=2), 0, 2),
        event_of(ended("r1", offset=3), 0, 3),
        event_of(started("r3", offset=4, instance="i3"), 0, 4),
        event_of(ended("r2", offset=5), 0, 5),
        event_of(ended("r2", offset=5), 0, 6),  # a copy in the same batch: a duplicate there too
    ]
    first.feed(*batch_a)
    first.flush_quiet_batch()
    sent_a = outputs(first)
    first.feed(*batch_b)  # sent, never flushed: the process dies here
    sent_b = outputs(first)[len(sent_a) :]
    assert [len(sent_a), len(sent_b)] == [2, 3]
    assert loads_mark(first.table.rows[b"hwm:0:0"]) == LogMark(1)

    again = Rig(monkeypatch, loop)  # a new process over what the table holds (nothing committed)
    again.table.rows.update(first.table.rows)
    again.feed(*batch_a, *batch_b)
    again.flush_quiet_batch()
    assert outputs(again) == sent_b
    assert errors(again) == []
    assert loads_mark(again.table.rows[b"hwm:0:0"]) == LogMark(5)


def test_a_crash_between_the_run_states_and_the_mark_replays_from_the_run_states(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """The mark is written after the batch's run states: a crash between them leaves states ahead of
    the mark, and each run's own state tells the replay (identical events, no START after an end)."""
    first = Rig(monkeypatch, loop)
    first.feed(event_of(started("r1", offset=0), 0, 0))
    first.flush_quiet_batch()
    mark_after_a = first.table.rows[b"hwm:0:0"]
    batch_b = [event_of(ended("r1", offset=1), 0, 1), event_of(started("r2", offset=2, instance="i2"), 0, 2)]
    first.feed(*batch_b)
    first.flush_quiet_batch()
    sent = outputs(first)
    assert [s for s in first.take() if s[0] == "set"][-1] == ("set", "hwm:0:0", 0)  # the mark comes last
    rows = dict(first.table.rows)
    rows[b"hwm:0:0"] = mark_after_a  # the mark's write was lost; the run states' were not

    again = Rig(monkeypatch, loop)
    again.table.rows.update(rows)
    again.feed(event_of(started("r1", offset=0), 0, 0), *batch_b)
    again.flush_quiet_batch()
    # r1's START is below the mark; its end is re-sent identically; r2's START is re-sent identically
    assert outputs(again) == sent[1:]
    assert loads_mark(again.table.rows[b"hwm:0:0"]) == LogMark(2)


def test_a_gap_is_logged_and_applied_and_a_late_record_fills_it_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    gaps = metric("olstream_stream_log_gaps_total")
    with caplog.at_level(logging.WARNING):
        rig.feed(
            event_of(started("r1", offset=0), 0, 0),
            event_of(started("r3", offset=3, instance="i3"), 0, 1),  # offsets 1..2 never arrived
        )
    assert "offsets 1..2 never arrived" in caplog.text
    assert metric("olstream_stream_log_gaps_total") - gaps == 1
    rig.flush_quiet_batch()
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(3, ((1, 2),))
    rig.feed(
        event_of(started("r2", offset=2, instance="i2"), 0, 2),  # late: applied as before
        event_of(started("r2", offset=2, instance="i2"), 0, 3),  # and only once
    )
    rig.flush_quiet_batch()
    docs = [e for t, e, _ in rig.sender.values if t == OUTPUT]
    assert len(docs) == 3 and errors(rig) == []
    assert rig.table.state("r2") is not None
    assert loads_mark(rig.table.rows[b"hwm:0:0"]) == LogMark(3, ((1, 1),))


def test_a_finished_and_evicted_run_published_again_sends_nothing(rig: Rig) -> None:
    rig.feed(*run_r1())
    rig.flush_quiet_batch()
    rig.offsets.committed_offsets[0] = 3  # r1's records are committed
    rig.tick("committed_timer")
    rig.feed(event_of(started("r2", offset=3, start=later(30)), 0, 3))  # past the window: evicts r1
    rig.flush_quiet_batch()
    assert rig.table.state("r1") is None
    sent = len(outputs(rig))
    rig.take()
    # r1 again, long after (its START first: without the mark it would open r1 again)
    rig.feed(*run_r1(4))
    rig.flush_quiet_batch()
    trace = rig.take()
    assert len(outputs(rig)) == sent and errors(rig) == []  # no START, no unknown_run
    assert [s for s in trace if s[0] in ("set", "del")] == []
    assert rig.table.state("r1") is None


def test_a_mark_is_stored_in_its_input_partition_and_not_for_a_revoked_one(rig: Rig) -> None:
    rig.feed(
        event_of(started("a", offset=0, partition=4), 1, 0),  # log partition 4 arrives on input partition 1
        event_of(started("b", offset=0, partition=5), 0, 0),
    )
    rig.consumer.assigned.discard(TP(INPUT, 0))  # revoked before the flush
    rig.flush_quiet_batch()
    sets = [s for s in rig.take() if s[0] == "set"]
    assert sets == [("set", "4:a", 1), ("set", "hwm:1:4", 1)]
    assert rig.table.rows[b"hwm:1:4"] == dumps_mark(LogMark(0))
    assert b"hwm:0:5" not in rig.table.rows  # its new owner applies b again from the committed offset


def _event_types(values: list[bytes]) -> list[tuple[str, str]]:
    docs = [json.loads(v) for v in values]
    return [(d["run"]["facets"]["workflow"]["engineRunId"], d["eventType"]) for d in docs]


def test_running_events_of_an_unflushed_batch_come_again_in_order_and_the_run_ends_on_its_terminal(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """--running-events on, a crash after batch B's sends and before its state: B comes again from the
    state before it, RUNNING events included, byte for byte and in order."""
    on = MappingConfig(running_events=True)
    first = Rig(monkeypatch, loop, mapping=on)
    batch_a = [event_of(started("r1", offset=0), 0, 0)]
    batch_b = [
        event_of(declared("r1", offset=1, name="a"), 0, 1),
        event_of(declared("r1", offset=2, name="a"), 0, 2),  # a repeat: no event
        event_of(declared("r1", offset=3, name="b"), 0, 3),
        event_of(ended("r1", offset=4), 0, 4),
    ]
    first.feed(*batch_a)
    first.flush_quiet_batch()
    first.feed(*batch_b)  # sent, never flushed
    sent_b = outputs(first)[1:]
    assert _event_types(sent_b) == [("r1", "RUNNING"), ("r1", "RUNNING"), ("r1", "COMPLETE")]

    again = Rig(monkeypatch, loop, mapping=on)
    again.table.rows.update(first.table.rows)
    again.feed(*batch_a, *batch_b)
    again.flush_quiet_batch()
    assert outputs(again) == sent_b
    receiver = _event_types(outputs(first) + outputs(again))
    assert receiver[0] == ("r1", "START") and receiver[-1] == ("r1", "COMPLETE")


def test_a_crash_between_the_run_states_and_the_mark_resends_running_events_only_of_open_runs(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> None:
    """The run states were written, the mark was not: a replayed declaration re-sends its RUNNING
    event while its run is open (r2), nothing after its end (r1), like a replayed START."""
    on = MappingConfig(running_events=True)
    first = Rig(monkeypatch, loop, mapping=on)
    batch_a = [
        event_of(started("r1", offset=0), 0, 0),
        event_of(started("r2", offset=1, instance="i2"), 0, 1),
    ]
    first.feed(*batch_a)
    first.flush_quiet_batch()
    mark_after_a = first.table.rows[b"hwm:0:0"]
    batch_b = [
        event_of(declared("r1", offset=2, name="a"), 0, 2),
        event_of(ended("r1", offset=3), 0, 3),
        event_of(declared("r2", offset=4, name="x"), 0, 4),
        event_of(declared("r2", offset=5, name="x"), 0, 5),  # a repeat: no event, and none replayed
    ]
    first.feed(*batch_b)
    first.flush_quiet_batch()
    sent_b = outputs(first)[2:]
    assert _event_types(sent_b) == [("r1", "RUNNING"), ("r1", "COMPLETE"), ("r2", "RUNNING")]
    rows = dict(first.table.rows)
    rows[b"hwm:0:0"] = mark_after_a

    again = Rig(monkeypatch, loop, mapping=on)
    again.table.rows.update(rows)
    again.feed(*batch_a, *batch_b)  # batch A is below the mark: skipped
    again.flush_quiet_batch()
    assert outputs(again) == sent_b[1:]  # r1's COMPLETE and r2's RUNNING, identical; no RUNNING of r1
    assert errors(again) == []
    r1 = [t for r, t in _event_types(outputs(first) + outputs(again)) if r == "r1"]
    assert r1 == ["START", "RUNNING", "COMPLETE", "COMPLETE"]
