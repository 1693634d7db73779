"""The writer API: partitioning, record content, validation errors and batching (in-memory store)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from olstream.contract.codec import decode, encode
from olstream.contract.records import (
    DatasetDeclared,
    Direction,
    Record,
    RunEnded,
    RunError,
    RunRef,
    RunStarted,
    RunStatus,
)
from olstream.eventlog.writer import Dataset, EventLogWriter, partition_for
from tests.support.memory_store import MemoryEventLogStore

BASE = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _ticking_clock() -> Iterator[datetime]:
    return (BASE + timedelta(seconds=i) for i in itertools.count())


@pytest.fixture
def store() -> MemoryEventLogStore:
    return MemoryEventLogStore(partitions=8)


@pytest.fixture
def writer(store: MemoryEventLogStore) -> EventLogWriter:
    clock = _ticking_clock()
    ids = (f"run-{i}" for i in itertools.count())
    return EventLogWriter(store, clock=lambda: next(clock), new_run_id=lambda: next(ids))


def _start(writer: EventLogWriter, instance: str = "inst-1", **kw: object) -> object:
    return writer.run_started(
        namespace="ns",
        workflow_type="etl",
        workflow_version="2",
        workflow_instance=instance,
        task_id="t",
        **kw,
    )


def _records(store: MemoryEventLogStore) -> list[Record]:
    return [decode(r.payload, r.partition, r.offset) for r in store.all_rows()]


def test_partition_is_a_stable_hash_of_the_instance() -> None:
    assert partition_for("orders-daily", 8) == partition_for("orders-daily", 8)
    # Pinned: must never change across Python versions or processes (not Python's hash()).
    assert [partition_for(f"i-{i}", 8) for i in range(6)] == [0, 7, 2, 6, 4, 5]
    assert partition_for("orders-daily", 8) == 1
    assert len({partition_for(f"i-{i}", 8) for i in range(200)}) == 8
    assert partition_for("x", 1) == 0


def test_partition_values_are_pinned() -> None:
    import hashlib

    expected = int.from_bytes(hashlib.blake2b(b"orders-daily", digest_size=8).digest(), "big") % 8
    assert partition_for("orders-daily", 8) == expected


def test_a_runs_records_all_land_in_its_instance_partition(
    writer: EventLogWriter, store: MemoryEventLogStore
) -> None:
    run = writer.run_started(
        namespace="billing",
        workflow_type="invoice",
        workflow_version="3",
        workflow_instance="invoice-2024-05",
        task_id="tenant-7",
        principal="alice",
        nominal_start_time=BASE,
        nominal_end_time=BASE + timedelta(days=1),
    )
    run.dataset_input("orders", "postgres://db:5432", "shop.public.orders", version="abc123")
    run.dataset_output("report", "s3://reports", "invoices/2024-05.parquet")
    run.run_ended(RunStatus.COMPLETED)
    p = partition_for("invoice-2024-05", 8)
    assert run.partition == p
    assert [len(store.rows[q]) for q in range(8)] == [4 if q == p else 0 for q in range(8)]
    started, inp, out, ended = _records(store)
    assert isinstance(started, RunStarted)
    assert (started.engine_run_id, started.partition, started.offset) == ("run-0", p, 0)
    assert started.principal == "alice" and started.nominal_start_time == BASE
    assert started.start_time == started.append_time == BASE
    assert isinstance(inp, DatasetDeclared) and inp.direction is Direction.INPUT and inp.version == "abc123"
    assert isinstance(out, DatasetDeclared) and out.direction is Direction.OUTPUT and out.offset == 2
    assert isinstance(ended, RunEnded) and ended.status is RunStatus.COMPLETED and ended.error is None
    assert ended.end_time == BASE + timedelta(seconds=3)
    assert run.ended and run.status is RunStatus.COMPLETED


def test_stored_bytes_equal_a_plain_encode(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    run = _start(writer)
    assert hasattr(run, "run_ended")
    for _ in range(130):  # offsets past one varint byte
        run.dataset_input("k", "file", "/data/x.csv")  # type: ignore[attr-defined]
    for row in store.all_rows():
        assert encode(decode(row.payload, row.partition, row.offset)) == row.payload


def test_children_carry_parent_and_root_coordinates(
    writer: EventLogWriter, store: MemoryEventLogStore
) -> None:
    root = writer.run_started(
        namespace="ns", workflow_type="root", workflow_version="1", workflow_instance="r", task_id="t"
    )
    child = writer.run_started(
        namespace="ns",
        workflow_type="child",
        workflow_version="1",
        workflow_instance="c",
        task_id="t",
        parent=root,
    )
    grandchild = writer.run_started(
        namespace="ns",
        workflow_type="gc",
        workflow_version="1",
        workflow_instance="g",
        task_id="t",
        parent=child,
    )
    orphan = writer.run_started(
        namespace="ns",
        workflow_type="gc",
        workflow_version="1",
        workflow_instance="o",
        task_id="t",
        parent=RunRef(engine_run_id="elsewhere-1"),
        supersedes="run-0",
    )
    by_id = {r.engine_run_id: r for r in _records(store) if isinstance(r, RunStarted)}
    c, g, o = by_id[child.engine_run_id], by_id[grandchild.engine_run_id], by_id[orphan.engine_run_id]
    assert c.parent == root.ref and c.root == root.ref and c.parent.is_complete
    assert g.parent == child.ref and g.root == root.ref
    assert o.parent == RunRef("elsewhere-1") and not o.parent.is_complete and o.root is None
    assert o.supersedes == "run-0"


def test_dataset_value_declares_more_than_once(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    run = writer.run_started(
        namespace="ns", workflow_type="w", workflow_version="1", workflow_instance="i", task_id="t"
    )
    table = run.dataset("staging", "bigquery", "proj.ds.table")
    table.read()
    table.write(version="v2")
    unbound = Dataset("topic", "kafka://broker:9092", "events")
    unbound.read(run)
    assert unbound == Dataset("topic", "kafka://broker:9092", "events")
    decls = [r for r in _records(store) if isinstance(r, DatasetDeclared)]
    assert [(d.direction, d.key, d.dataset_name, d.version) for d in decls] == [
        (Direction.INPUT, "staging", "proj.ds.table", None),
        (Direction.OUTPUT, "staging", "proj.ds.table", "v2"),
        (Direction.INPUT, "topic", "events", None),
    ]
    with pytest.raises(ValueError, match="not bound to a run"):
        unbound.write()


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("namespace", {"namespace": ""}),
        ("workflow_type", {"workflow_type": "  "}),
        ("workflow_instance", {"workflow_instance": ""}),
        ("engine_run_id", {"engine_run_id": ""}),
        ("start_time", {"start_time": datetime(2024, 1, 1)}),  # naive
    ],
)
def test_run_started_rejects_bad_fields(
    writer: EventLogWriter, field: str, kwargs: dict[str, object]
) -> None:
    args: dict[str, object] = {
        "namespace": "ns",
        "workflow_type": "w",
        "workflow_version": "1",
        "workflow_instance": "i",
        "task_id": "t",
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        writer.run_started(**args)  # type: ignore[arg-type]


def test_dataset_and_end_validation(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    run = writer.run_started(
        namespace="ns", workflow_type="w", workflow_version="1", workflow_instance="i", task_id="t"
    )
    with pytest.raises(ValueError, match="namespace"):
        run.dataset_input("k", "", "name")
    with pytest.raises(ValueError, match="key must be a non-empty string"):
        run.dataset_input("", "s3://b", "name")
    with pytest.raises(ValueError, match="version"):
        run.dataset_output("k", "s3://b", "name", version="")
    with pytest.raises(ValueError, match="name"):
        run.dataset_output("k", "s3://b", "")
    with pytest.raises(ValueError, match="namespace"):
        Dataset("k", "", "n")
    with pytest.raises(ValueError, match=r"status 'done' is not one of: completed, failed"):
        run.run_ended("done")
    assert not run.ended
    run.run_ended("retries_exhausted", RunError("gave up", "TimeoutError", "Traceback ..."))
    with pytest.raises(
        ValueError, match="run_ended: run run-0 already ended with status 'retries_exhausted'"
    ):
        run.run_ended("completed")
    with pytest.raises(ValueError, match="already ended"):
        run.dataset_input("k", "s3://b", "x")
    ended = _records(store)[-1]
    assert isinstance(ended, RunEnded) and ended.error == RunError("gave up", "TimeoutError", "Traceback ...")
    assert len(store.all_rows()) == 2


def test_batch_mode_writes_one_transaction(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    with writer.batch():
        for i in range(50):
            run = _start(writer, instance=f"i-{i}")
            run.run_ended("completed")  # type: ignore[attr-defined]
        assert store.transactions == 0
    assert store.transactions == 1
    assert writer.records_written == 100
    assert sum(len(rows) for rows in store.rows.values()) == 100


def test_batch_mode_discards_on_error(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    with pytest.raises(RuntimeError), writer.batch():
        _start(writer)
        raise RuntimeError("engine crashed")
    assert store.all_rows() == []


def test_append_record_takes_a_ready_record(writer: EventLogWriter, store: MemoryEventLogStore) -> None:
    record = RunEnded(3, 99, BASE, "external-run", RunStatus.CANCELLED, BASE)
    writer.append_record(record)
    writer.append_record(record)
    rows = store.read(3, -1, 10)
    assert [decode(r.payload, r.partition, r.offset) for r in rows] == [
        RunEnded(3, 0, BASE, "external-run", RunStatus.CANCELLED, BASE),
        RunEnded(3, 1, BASE, "external-run", RunStatus.CANCELLED, BASE),
    ]


def test_a_schema_field_reorder_is_caught_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import olstream.eventlog.writer as writer_module

    monkeypatch.setattr(
        writer_module, "_ENDED_TAIL", ("append_time", "engine_run_id", "end_time", "status", "error")
    )
    with pytest.raises(RuntimeError, match=r"avro/RunEnded\.avsc changed its field order"):
        EventLogWriter(MemoryEventLogStore(2))


OUT_OF_RANGE = [
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1970, 1, 1, 4, tzinfo=timezone(timedelta(hours=5))),  # 1969 in UTC
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # year 10000 in UTC
]


@pytest.mark.parametrize("when", OUT_OF_RANGE, ids=str)
def test_times_no_record_can_carry_are_refused_naming_the_field(
    writer: EventLogWriter, store: MemoryEventLogStore, when: datetime
) -> None:
    run = _start(writer, instance="ok")
    rows = len(store.all_rows())
    calls: list[tuple[str, Callable[[], object]]] = [
        ("start_time", lambda: _start(writer, start_time=when)),
        ("nominal_start_time", lambda: _start(writer, nominal_start_time=when)),
        ("nominal_end_time", lambda: _start(writer, nominal_end_time=when)),
        ("parent.start_time", lambda: _start(writer, parent=RunRef("p", start_time=when))),
        ("root.start_time", lambda: _start(writer, root=RunRef("r", "ns", "w", "1", "i", when))),
        ("time", lambda: run.dataset_input("k", "s3://b", "n", time=when)),  # type: ignore[attr-defined]
        ("time", lambda: run.dataset_output("k", "s3://b", "n", time=when)),  # type: ignore[attr-defined]
        ("time", lambda: run.dataset("k", "s3://b", "n").read(time=when)),  # type: ignore[attr-defined]
        ("end_time", lambda: run.run_ended("completed", end_time=when)),  # type: ignore[attr-defined]
        (
            "RunEnded end_time",
            lambda: writer.append_record(RunEnded(0, 0, BASE, "x", RunStatus.FAILED, when)),
        ),
        (
            "RunStarted parent.start_time",
            lambda: writer.append_record(
                RunStarted(
                    0, 0, BASE, "x", "t", "ns", "w", "1", "i", BASE, parent=RunRef("p", start_time=when)
                )
            ),
        ),
        (
            "DatasetDeclared append_time",
            lambda: writer.append_record(
                DatasetDeclared(0, 0, when, "x", Direction.INPUT, "k", "s3://b", "n", BASE)
            ),
        ),
    ]
    for field, call in calls:
        with pytest.raises(
            ValueError, match=rf"^{re.escape(field)} \S+ is outside the times a record can carry \(1970-01-01"
        ):
            call()
    assert len(store.all_rows()) == rows and not run.ended  # type: ignore[attr-defined]


@pytest.mark.parametrize("when", [*OUT_OF_RANGE, datetime(2024, 1, 1)], ids=str)
def test_a_clock_out_of_range_is_refused_as_the_append_time(
    store: MemoryEventLogStore, when: datetime
) -> None:
    times = iter([BASE])
    writer = EventLogWriter(store, clock=lambda: next(times, when))
    run = _start(writer)
    field = re.escape("append_time (the writer's clock())")
    with pytest.raises(ValueError, match=rf"^{field} "):
        run.dataset_input("k", "s3://b", "n", time=BASE)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=rf"^{field} "):
        run.run_ended("completed", end_time=BASE)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=rf"^{field} "):
        _start(writer, start_time=BASE)
    assert len(store.all_rows()) == 1


def test_the_range_ends_are_written_and_other_offsets_are_accepted(
    writer: EventLogWriter, store: MemoryEventLogStore
) -> None:
    earliest, latest = datetime(1970, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    plus_five = datetime(2024, 5, 1, 17, tzinfo=timezone(timedelta(hours=5)))
    run = _start(writer, start_time=earliest, nominal_start_time=earliest, nominal_end_time=latest)
    run.dataset_input("k", "s3://b", "n", time=plus_five)  # type: ignore[attr-defined]
    run.dataset_output("k", "s3://b", "n", time=latest)  # type: ignore[attr-defined]
    run.run_ended("completed", end_time=latest)  # type: ignore[attr-defined]
    start, read, wrote, end = _records(store)
    assert isinstance(start, RunStarted) and start.start_time == earliest
    assert start.nominal_end_time == latest
    assert isinstance(read, DatasetDeclared) and read.time == plus_five == datetime(
        2024, 5, 1, 12, tzinfo=UTC
    )
    assert isinstance(wrote, DatasetDeclared) and wrote.time == latest
    assert isinstance(end, RunEnded) and end.end_time == latest
