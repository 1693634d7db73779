"""Run state values: serialization round trip, the finished-run prefix, retention."""

from __future__ import annotations

from datetime import timedelta

from olstream.contract.records import RunError, RunStatus
from olstream.streams.mapping import MappingConfig
from olstream.streams.processor import apply
from olstream.streams.retention import CommittedLogPositions, Retention
from olstream.streams.state import RunState, format_time, state_key
from olstream.streams.state_store import dumps_state, finished_end_ms, loads_state
from tests.support.stream_records import T0, declared, ended, ref_of, started


def build(*records) -> RunState:  # type: ignore[no-untyped-def]
    table: dict[str, RunState] = {}
    for r in records:
        step = apply(r, MappingConfig(), table.get, home=4)
        if step.write is not None:
            table[step.key] = step.write
    last = records[-1]
    return table[state_key(last.partition, last.engine_run_id)]


def test_round_trip_open_and_finished() -> None:
    parent = started("p", wtype="daily")
    open_state = build(parent, started("c", instance="流", parent=ref_of(parent), nominal=True, offset=3))
    assert loads_state(dumps_state(open_state)) == open_state
    assert finished_end_ms(dumps_state(open_state)) is None
    done = build(
        started(),
        declared(version="v"),
        ended(status=RunStatus.POISON, error=RunError("m", "T", "s")),
    )
    assert loads_state(dumps_state(done)) == done
    assert done.end is not None and finished_end_ms(dumps_state(done)) == done.end.end_ms
    assert done.home == 4


def test_format_time_is_rfc3339_utc_microseconds() -> None:
    assert format_time(T0) == "2026-01-02T03:04:05.123456Z"
    assert format_time(T0.replace(microsecond=0)) == "2026-01-02T03:04:05.000000Z"


def test_retention_evicts_after_the_window_per_log_partition() -> None:
    r = Retention(retention_ms=1000)
    r.note_finished(0, 10_000, 5, "a")
    r.note_finished(0, 10_500, 9, "b")
    r.note_finished(1, 10_000, 3, "c")
    committed = 100
    assert r.advance(0, 10_900, committed) == []
    assert r.advance(0, 11_001, committed) == ["a"]
    assert r.advance(1, 10_999, committed) == []  # partition 1 has its own clock
    assert r.advance(0, 5_000, committed) == []  # clocks never go back
    assert r.advance(0, 11_600, committed) == ["b"]
    assert r.retained == 1
    r.clear()
    assert r.retained == 0


def test_retention_keeps_runs_a_replay_could_reach() -> None:
    """Past the window, a run stays until its RunEnded is behind the committed position:
    evicted earlier, a replayed RunStarted would start it again (a START after its end)."""
    r = Retention(retention_ms=1000)
    r.note_finished(0, 10_000, 5, "a")
    r.note_finished(0, 10_100, 8, "b")
    assert r.advance(0, 50_000, committed_offset=-1) == []  # nothing of the partition committed yet
    assert r.advance(0, 50_000, committed_offset=4) == []
    assert r.advance(0, 50_000, committed_offset=5) == ["a"]
    assert r.advance(0, 50_000, committed_offset=7) == []
    assert r.advance(0, 50_000, committed_offset=8) == ["b"]


def test_committed_log_positions_follow_committed_input_offsets() -> None:
    c = CommittedLogPositions()
    assert c.committed(7) == -1
    c.note_acked(0, 99, {7: 40, 3: 12})  # a batch: input partition 0 up to offset 99
    c.note_acked(0, 150, {7: 61})
    c.note_acked(1, 20, {2: 5})
    c.note_committed(0, 99)  # next offset 99: the batch ending at 99 is not committed yet
    assert (c.committed(7), c.committed(3)) == (-1, -1)
    c.note_committed(0, 100)
    assert (c.committed(7), c.committed(3)) == (40, 12)
    c.note_committed(0, 151)
    assert c.committed(7) == 61
    c.keep_only({0})  # after a rebalance without input partition 1
    c.note_committed(1, 1_000)
    assert c.committed(2) == -1


def test_retention_bounds_work_per_record() -> None:
    r = Retention(retention_ms=0, max_evictions_per_record=2)
    for i in range(5):
        r.note_finished(0, i, i, f"r{i}")
    assert r.advance(0, 100, 100) == ["r0", "r1"]
    assert r.advance(0, 100, 100) == ["r2", "r3"]


def test_state_after_end_keeps_datasets() -> None:
    s = build(started(), declared(name="x"), declared(name="y", offset=2), ended(at=T0 + timedelta(hours=2)))
    assert [d.name for d in s.inputs] == ["x", "y"]
    assert s.end is not None and s.end.status == "completed"


def test_evolve_copies_every_field() -> None:
    from dataclasses import fields, replace

    from olstream.streams.state import DatasetRef, JobRun, RunEnd

    j = JobRun("n", "j", "r")
    values: dict[str, object] = {
        f.name: f"{f.name}-v" if f.type in ("str", "str | None") else None for f in fields(RunState)
    }
    values.update(
        start_ms=5,
        run=j,
        parent=JobRun("n", "p", "pr"),
        root=JobRun("n", "q", "qr"),
        start_position=(1, 2),
        inputs=(DatasetRef("a", "b"),),
        outputs=(DatasetRef("c", "d", "v"),),
        inputs_at_start=1,
        outputs_at_start=1,
        end=RunEnd("completed", "t", 7),
        home=3,
        last_offset=9,
    )
    s = RunState(**values)  # type: ignore[arg-type]
    assert all(getattr(s, f.name) is not None for f in fields(RunState)), "give every field a value"
    assert s.evolve() == s
    added = (DatasetRef("x", "y"),)
    other_end = RunEnd("failed", "u", 8)
    assert s.evolve(inputs=added) == replace(s, inputs=added)
    assert s.evolve(outputs=added) == replace(s, outputs=added)
    assert s.evolve(end=other_end) == replace(s, end=other_end)
    assert s.evolve(last_offset=10) == replace(s, last_offset=10)


def test_a_redriven_declaration_below_the_last_offset_is_applied_and_moves_no_offset_back() -> None:
    table: dict[str, RunState] = {}
    for r in (started(offset=0), declared(name="y", offset=5)):  # the declaration at offset 2 was refused
        step = apply(r, MappingConfig(), table.get, home=4)
        assert step.write is not None
        table[step.key] = step.write
    refused = declared(name="x", offset=2)
    as_replay = apply(refused, MappingConfig(), table.get, home=4)
    assert as_replay.write is None and as_replay.replay  # below the last offset: taken as applied before
    redriven = apply(refused, MappingConfig(), table.get, home=4, redriven=True)
    assert redriven.write is not None and not redriven.replay
    assert [d.name for d in redriven.write.inputs] == ["y", "x"]
    assert redriven.write.last_offset == 5
    table[redriven.key] = redriven.write
    # re-driven again after that state was stored: the declaration that added "x" is a replay
    again = apply(refused, MappingConfig(), table.get, home=4, redriven=True)
    assert again.write is None and again.replay
    end = apply(ended(offset=3), MappingConfig(), table.get, home=4, redriven=True)
    assert end.write is not None and end.write.last_offset == 5 and end.write.end is not None
