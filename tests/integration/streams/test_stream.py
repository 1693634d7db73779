"""The lineage stream worker against a real broker: mapping, validity, order, byte-identity, bad input."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from olstream.contract import codec
from olstream.contract.naming import normalize_namespace
from olstream.contract.records import DatasetDeclared, Record, RunEnded, RunStarted
from olstream.streams.mapping import TERMINAL_EVENT_TYPES
from tests.support.openlineage_schema import validator
from tests.support.stream_records import ended
from tests.support.stream_support import (
    Out,
    consume_all,
    expected_job_paths,
    headers_for,
    produce_raw,
    produce_records,
    produce_rows,
    simulated_rows,
    start_worker,
    worker_cmd,
)

pytestmark = pytest.mark.integration


def by_run(outs: list[Out]) -> dict[str, list[Out]]:
    runs: dict[str, list[Out]] = defaultdict(list)
    for o in sorted(outs, key=lambda o: (o.partition, o.offset)):
        runs[o.doc["run"]["runId"]].append(o)
    return runs


def test_simulated_workload_valid_ordered_and_identical_over_3_and_6_partitions(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    rows, summary = simulated_rows(tmp_path, runs=300, seed=5)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    starts = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    ends = {r.engine_run_id: r for r in records if isinstance(r, RunEnded)}
    assert summary.open_runs > 0 and summary.children_with_partial_parent > 0
    assert {e.status.value for e in ends.values()} == set(TERMINAL_EVENT_TYPES)

    outputs: dict[int, tuple[str, str]] = {}
    procs = []
    for n in (3, 6):
        src, out, err = make_topic(n), make_topic(n), make_topic(1)
        produce_rows(kafka_bootstrap, src, rows)
        # bad input: bytes that do not decode, and an end for a run nobody started
        produce_raw(kafka_bootstrap, src, b"0", b"\xc3\x01not avro at all")
        produce_records(kafka_bootstrap, src, [ended("no-such-run", partition=0, offset=10**9)])
        outputs[n] = (out, err)
        cmd = worker_cmd(
            kafka_bootstrap, f"{unique_group}-{n}", tmp_path / f"w{n}", src, out, err, "--until-idle"
        )
        procs.append((start_worker(cmd, tmp_path / f"w{n}.log"), tmp_path / f"w{n}.log"))
    for proc, log in procs:
        assert proc.wait(240) == 0, log.read_text()[-4000:]

    expected = len(starts) + len(ends)
    got = {n: consume_all(kafka_bootstrap, out, expect=expected, idle=1.0) for n, (out, _) in outputs.items()}
    for n, outs in got.items():
        assert len(outs) == expected, f"{n} partitions: {len(outs)} events, expected {expected}"
        assert len({o.value for o in outs}) == expected, "a clean run emits no duplicates"
    assert {o.value for o in got[3]} == {o.value for o in got[6]}, "same log, same event bytes"

    v = validator()
    outs = got[6]
    for o in outs:
        v.validate(o.value)
    assert any(any(ord(ch) > 127 for ch in o.value.decode()) for o in outs), "non-ASCII names survive"

    runs = by_run(outs)
    assert len(runs) == len(starts)
    paths = expected_job_paths(starts)
    for events in runs.values():
        first = events[0].doc
        wf = first["run"]["facets"]["workflow"]
        rid = wf["engineRunId"]
        types = [e.doc["eventType"] for e in events]
        if rid in ends:
            status = ends[rid].status.value
            assert types == ["START", TERMINAL_EVENT_TYPES[status]], (rid, types)
            last = events[-1].doc
            assert last["run"]["facets"]["workflow"]["status"] == status
            assert ("errorMessage" in last["run"]["facets"]) == (TERMINAL_EVENT_TYPES[status] == "FAIL")
            assert first["run"]["facets"].get("parent") == last["run"]["facets"].get("parent")
            assert len({e.key for e in events}) == 1 and len({e.partition for e in events}) == 1
        else:
            assert types == ["START"], (rid, types)
        start = starts[rid]
        path, has_parent = paths[rid]
        assert first["job"]["name"] == path  # hierarchical job names (docs: job names)
        parent = first["run"]["facets"].get("parent")
        assert (parent is not None) == has_parent, rid
        if start.parent is None:
            assert (
                parent is None
                and events[0].key == f"run:{first['job']['namespace']}/{first['job']['name']}".encode()
            )
        elif parent is not None:
            assert path == f"{parent['job']['name']}.{start.workflow_type}@{start.workflow_version}"
            if start.parent.engine_run_id in paths:
                assert parent["job"]["name"] == paths[start.parent.engine_run_id][0]
        if parent is not None and "root" in parent:
            root = parent["root"]["job"]
            assert events[0].key == f"run:{root['namespace']}/{root['name']}".encode()

    for n, (_, err) in outputs.items():
        errors = consume_all(kafka_bootstrap, err, expect=2, idle=0.5)
        assert len(errors) == 2, f"{n} partitions: {len(errors)} error records"


def test_input_written_in_transactions_is_processed_to_its_end_and_committed(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    """`olstream source --exactly-once` input: each transaction's marker takes an offset no record has.

    The worker takes records strictly in offset order, so each marker is a hole the broker must
    show empty; the last one ends the partition, and --until-idle stops only once it is committed.
    """
    rows, _ = simulated_rows(tmp_path, runs=150, seed=8)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    expected = sum(isinstance(r, (RunStarted, RunEnded)) for r in records)
    src, out, err = make_topic(2), make_topic(2), make_topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{src}"})
    producer.init_transactions(30)
    for i in range(0, len(rows), 97):
        producer.begin_transaction()
        for row in rows[i : i + 97]:
            producer.produce(
                src,
                row.payload,
                str(row.partition).encode(),
                headers=headers_for(row.partition, row.offset, row.payload),
            )
        producer.commit_transaction(30)
    log = tmp_path / "w.log"
    proc = start_worker(
        worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w", src, out, err, "--until-idle"), log
    )
    assert proc.wait(240) == 0, log.read_text()[-4000:]
    outs = consume_all(kafka_bootstrap, out, expect=expected, idle=1.0)
    assert len(outs) == expected and len({o.value for o in outs}) == expected
    assert consume_all(kafka_bootstrap, err, idle=1.0) == [], "no record was taken for bad input"
    assert "never reached the agent" not in log.read_text(), "a marker was taken for a dropped record"


def _declared_so_far(records: list[Record]) -> dict[str, list[tuple[str, str, str]]]:
    """Engine run id -> (direction, namespace, name) of each dataset it added while open, in log order."""
    ended_at: dict[str, int] = {}
    added: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for r in records:
        if isinstance(r, RunEnded):
            ended_at.setdefault(r.engine_run_id, r.offset)
        elif isinstance(r, DatasetDeclared) and r.offset < ended_at.get(r.engine_run_id, 10**18):
            dataset = (r.direction.value, normalize_namespace(r.dataset_namespace), r.dataset_name)
            if dataset not in added[r.engine_run_id]:
                added[r.engine_run_id].append(dataset)
    return added


def _datasets(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(side, d["namespace"], d["name"]) for key, side in (("inputs", "INPUT"), ("outputs", "OUTPUT"))
            for d in doc[key]]  # fmt: skip


def test_running_events_carry_each_new_dataset_and_are_identical_over_2x6_and_3x9_workers_partitions(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    """--running-events on: START, one RUNNING per declaration that adds a dataset, terminal; an open
    run's RUNNING events carry exactly the datasets it declared, with the run's start as eventTime and
    the declaration's time as `declaredAt`; the bytes depend neither on the partition count nor on
    how many workers share them (2 workers over 6 partitions, 3 over 9)."""
    rows, summary = simulated_rows(tmp_path, runs=300, seed=11)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    assert summary.open_runs > 0
    ends = {r.engine_run_id: r for r in records if isinstance(r, RunEnded)}
    added = _declared_so_far(sorted(records, key=lambda r: (r.partition, r.offset)))
    starts = [r for r in records if isinstance(r, RunStarted)]
    assert len({r.engine_run_id for r in starts}) == len(starts), "one run per engine run id in this log"
    expected = len(starts) + len(ends) + sum(len(v) for v in added.values())
    assert expected > len(starts) + len(ends), "the log declares datasets"
    declared_at: dict[tuple[str, tuple[str, str, str]], datetime] = {}  # the declaration that added it
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if isinstance(r, DatasetDeclared):
            dataset = (r.direction.value, normalize_namespace(r.dataset_namespace), r.dataset_name)
            declared_at.setdefault((r.engine_run_id, dataset), r.time)
    outputs: dict[int, str] = {}
    procs = []
    for workers, n in ((2, 6), (3, 9)):
        src, out, err = make_topic(n), make_topic(n), make_topic(1)
        produce_rows(kafka_bootstrap, src, rows)
        outputs[n] = out
        for i in range(workers):  # one group per partition count
            cmd = worker_cmd(kafka_bootstrap, f"{unique_group}-{n}", tmp_path / f"w{n}-{i}", src, out, err,
                             "--until-idle", "--running-events", "on")  # fmt: skip
            procs.append((start_worker(cmd, tmp_path / f"w{n}-{i}.log"), tmp_path / f"w{n}-{i}.log"))
    for proc, log in procs:
        assert proc.wait(240) == 0, log.read_text()[-4000:]
    got = {n: consume_all(kafka_bootstrap, out, expect=expected, idle=1.0) for n, out in outputs.items()}
    for n, outs in got.items():
        assert len(outs) == expected and len({o.value for o in outs}) == expected, n
    assert [o.value for o in sorted(got[6], key=lambda o: o.value)] == [
        o.value for o in sorted(got[9], key=lambda o: o.value)
    ], "same log, same event bytes, RUNNING events included"
    v = validator()
    open_runs_with_datasets = 0
    for events in by_run(got[9]).values():
        v.validate(events[0].value)
        rid = events[0].doc["run"]["facets"]["workflow"]["engineRunId"]
        types = [e.doc["eventType"] for e in events]
        running = [e.doc for e in events if e.doc["eventType"] == "RUNNING"]
        want_types = ["START"] + ["RUNNING"] * len(added[rid])
        if rid in ends:
            want_types.append(TERMINAL_EVENT_TYPES[ends[rid].status.value])
            assert _datasets(events[-1].doc) == [d for d in added[rid] if d[0] == "INPUT"] + [
                d for d in added[rid] if d[0] == "OUTPUT"
            ], "the terminal event carries every dataset"
        elif added[rid]:
            open_runs_with_datasets += 1
        assert types == want_types, (rid, types)
        assert [_datasets(r) for r in running] == [[d] for d in added[rid]], "one new dataset each"
        start = events[0].doc
        for r in running:
            v.validate(json.dumps(r))
            # the run's facets as on its START, plus the time of the declaration that added the dataset
            workflow = r["run"]["facets"]["workflow"]
            when = datetime.fromisoformat(workflow.pop("declaredAt").replace("Z", "+00:00"))
            assert when == declared_at[(rid, _datasets(r)[0])], rid
            assert r["run"] == start["run"] and r["job"] == start["job"]
            assert r["eventTime"] == start["eventTime"], "a RUNNING event's eventTime is its run's start"
        assert len({e.key for e in events}) == 1 and len({e.partition for e in events}) == 1
    assert open_runs_with_datasets > 0, "an open run shows its datasets before it ends"
