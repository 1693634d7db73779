"""The workload simulator: deterministic for a seed, and covering every feature the stream must handle."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from olstream.contract.codec import decode
from olstream.contract.records import DatasetDeclared, Direction, Record, RunEnded, RunStarted, RunStatus
from olstream.eventlog.simulate import BASE_TIME, OPEN, base_time_ending, simulate
from tests.support.memory_store import MemoryEventLogStore

FAILURES = {
    RunStatus.FAILED,
    RunStatus.RETRIES_EXHAUSTED,
    RunStatus.POISON,
    RunStatus.SKIPPED_TO_DLQ,
    RunStatus.QUARANTINED,
}


def _write(runs: int, seed: int, partitions: int = 8) -> tuple[MemoryEventLogStore, list[Record]]:
    store = MemoryEventLogStore(partitions)
    simulate(store, runs, seed)
    return store, [decode(r.payload, r.partition, r.offset) for r in store.all_rows()]


def test_same_seed_same_bytes_and_summary() -> None:
    a, b = MemoryEventLogStore(8), MemoryEventLogStore(8)
    sa, sb = simulate(a, 300, seed=11), simulate(b, 300, seed=11)
    assert a.all_rows() == b.all_rows()
    assert (sa.records, sa.by_status, sa.by_depth, sa.last_time) == (
        sb.records,
        sb.by_status,
        sb.by_depth,
        sb.last_time,
    )
    c = MemoryEventLogStore(8)
    simulate(c, 300, seed=12)
    assert c.all_rows() != a.all_rows()


def test_zero_runs_write_nothing() -> None:
    store = MemoryEventLogStore(4)
    summary = simulate(store, 0, seed=1)
    assert summary.records == 0 and store.all_rows() == []
    with pytest.raises(ValueError, match="runs"):
        simulate(store, -1)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_small_workloads_cover_every_feature(seed: int) -> None:
    _, records = _write(60, seed)
    started = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    ended = {r.engine_run_id: r for r in records if isinstance(r, RunEnded)}
    declared: dict[str, list[DatasetDeclared]] = defaultdict(list)
    for r in records:
        if isinstance(r, DatasetDeclared):
            declared[r.engine_run_id].append(r)

    assert len(started) == 60
    assert {e.status for e in ended.values()} == set(RunStatus)
    assert len(started) - len(ended) >= 1  # some runs stay open
    for e in ended.values():
        if e.status in FAILURES:
            assert e.error is not None and e.error.message and e.error.type
        if e.status is RunStatus.COMPLETED:
            assert e.error is None

    def depth(run: RunStarted) -> int:
        if run.parent is None:
            return 0
        # a parent started by another engine takes the place of the simulated one, named after it
        rid = run.parent.engine_run_id.removeprefix("other-engine/")
        return depth(started[rid]) + 1

    assert max(depth(s) for s in started.values()) == 4

    children = [s for s in started.values() if s.parent is not None]
    assert any(s.partition != started[s.parent.engine_run_id].partition for s in children if s.parent)
    assert any(s.parent is not None and not s.parent.is_complete for s in children)
    absent = [s for s in children if s.parent is not None and s.parent.engine_run_id not in started]
    assert absent and all(s.parent and s.parent.engine_run_id.startswith("other-engine/") for s in absent)
    assert any(s.parent is not None and s.parent.is_complete and s.root is None for s in children)
    assert any(s.supersedes for s in started.values())
    assert any(s.nominal_start_time is not None for s in started.values())

    for decls in declared.values():
        assert 1 <= len({(d.dataset_namespace, d.dataset_name) for d in decls}) <= 6
    assert all(run_id in declared for run_id in started)


def test_larger_workloads_have_the_rest() -> None:
    _, records = _write(400, seed=5)
    started = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    decls = [r for r in records if isinstance(r, DatasetDeclared)]
    per_run = Counter((d.engine_run_id, d.dataset_namespace, d.dataset_name) for d in decls)
    assert any(n >= 2 for n in per_run.values())  # a dataset declared twice by one run
    assert max(Counter(d.engine_run_id for d in decls).values()) >= 6
    namespaces = {d.dataset_namespace for d in decls}
    for prefix in ("postgres://", "s3://", "kafka://"):
        assert any(ns.startswith(prefix) for ns in namespaces), prefix
    assert {"bigquery", "file"} <= namespaces
    assert any(not (d.dataset_namespace + d.dataset_name).isascii() for d in decls)
    assert any(d.version for d in decls) and any(d.version is None for d in decls)

    versions = defaultdict(set)
    for s in started.values():
        versions[s.workflow_type].add(s.workflow_version)
    assert len(versions) >= 10 and any(len(v) >= 2 for v in versions.values())

    # Datasets connect workflow types: one type writes what another reads.
    writers = defaultdict(set)
    readers = defaultdict(set)
    for d in decls:
        wf = started[d.engine_run_id].workflow_type
        (writers if d.direction is Direction.OUTPUT else readers)[(d.dataset_namespace, d.dataset_name)].add(
            wf
        )
    assert sum(1 for ds, ws in writers.items() if readers.get(ds, set()) - ws) >= 5


def test_records_are_consistent_per_run() -> None:
    _, records = _write(300, seed=3)
    started = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    position: dict[str, tuple[int, int]] = {}
    ends: set[str] = set()
    last_time = BASE_TIME
    for r in records:
        if isinstance(r, RunStarted):
            position[r.engine_run_id] = (r.partition, r.offset)
            if r.parent is not None and r.parent.is_complete:
                p = started[r.parent.engine_run_id]
                assert r.parent.workflow_instance == p.workflow_instance
                assert r.parent.start_time == p.start_time and r.parent.namespace == p.namespace
            if r.root is not None:
                root = started[r.root.engine_run_id]
                assert root.parent is None and r.root.workflow_type == root.workflow_type
            if r.supersedes is not None:
                old = started[r.supersedes]
                assert old.workflow_instance == r.workflow_instance and old.partition == r.partition
            if r.nominal_start_time is not None:
                assert r.nominal_end_time is not None and r.nominal_start_time <= r.start_time
        else:
            partition, offset = position[r.engine_run_id]  # the run started earlier...
            assert r.partition == partition and r.offset > offset  # ...in the same partition
            assert r.engine_run_id not in ends
            if isinstance(r, RunEnded):
                ends.add(r.engine_run_id)
        last_time = max(last_time, r.append_time)
    assert last_time < BASE_TIME + timedelta(days=30)  # simulated time, never the wall clock


def test_summary_matches_the_records() -> None:
    store = MemoryEventLogStore(8)
    summary = simulate(store, 250, seed=9)
    records = [decode(r.payload, r.partition, r.offset) for r in store.all_rows()]
    assert summary.records == len(records)
    ended = Counter(r.status.value for r in records if isinstance(r, RunEnded))
    assert {k: v for k, v in summary.by_status.items() if k != OPEN} == dict(ended)
    assert summary.open_runs == 250 - sum(ended.values())
    assert summary.runs == sum(summary.by_depth.values()) == 250
    text = summary.render()
    assert "250 runs" in text and "open runs (no RunEnded)" in text and "records/s" in text


@pytest.mark.parametrize("seed", range(12))
def test_ten_runs_already_cover_statuses_depth_and_parent_shapes(seed: int) -> None:
    summary = simulate(MemoryEventLogStore(8), 10, seed)
    assert set(summary.by_status) == {*(s.value for s in RunStatus), OPEN}
    assert summary.by_depth.get(4, 0) >= 1
    assert summary.children_with_partial_parent >= 1 and summary.children_without_root >= 2
    assert summary.superseding_runs >= 1


def test_read_versions_are_versions_a_writer_wrote_and_namespaces_are_receiver_legal() -> None:
    from olstream.contract.naming import normalize_namespace

    _, records = _write(400, seed=3)
    declarations = sorted(
        (r for r in records if isinstance(r, DatasetDeclared)), key=lambda r: (r.time, r.partition, r.offset)
    )
    written: dict[tuple[str, str], set[str]] = defaultdict(set)
    reads_with_version = 0
    for d in declarations:
        dataset = (d.dataset_namespace, d.dataset_name)
        if d.version is None:
            continue
        if d.direction is Direction.OUTPUT:
            written[dataset].add(d.version)
        else:
            reads_with_version += 1
            assert d.version in written[dataset], (dataset, d.version)
    assert reads_with_version > 20 and written
    namespaces = {d.dataset_namespace for d in declarations} | {
        r.namespace for r in records if isinstance(r, RunStarted)
    }
    assert all(normalize_namespace(ns) == ns for ns in namespaces)
    assert "postgres://crm-db.xn--bcher-kva.example:5432" in namespaces  # the IDN host, in IDNA form
    assert any(not d.dataset_name.isascii() for d in declarations)


def test_base_time_ending_puts_the_last_record_at_the_end_given() -> None:
    """The simulated span does not depend on the base time, so the demo can date its log to end now."""
    end = datetime(2031, 7, 9, 13, 5, 7, tzinfo=UTC)
    base = base_time_ending(end, 60, 3, partitions=4)
    store = MemoryEventLogStore(4)
    summary = simulate(store, 60, 3, base_time=base)
    assert summary.first_time == base and summary.last_time == end
    times = [decode(r.payload, r.partition, r.offset).append_time for r in store.all_rows()]
    assert min(times) >= base and max(times) <= end
    assert end - max(times) < timedelta(minutes=5)  # the workload runs until about then
    # the same records as at BASE_TIME, shifted: same count and the same gaps between records
    reference = MemoryEventLogStore(4)
    at_base = simulate(reference, 60, 3)
    assert summary.records == at_base.records and end - base == at_base.last_time - at_base.first_time
