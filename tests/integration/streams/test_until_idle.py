"""`olstream worker --until-idle` over input the group already committed: it exits 0, emitting nothing.

A partition whose committed offset (the broker's) is at its end is done, even when this process never
saw one of its records: a restarted worker over a finished input, and a worker that takes over a
partition another worker of its group finished.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from olstream.contract import codec
from olstream.contract.records import RunEnded, RunStarted
from tests.support.stop_support import committed_offsets, end_offsets, wait_exit
from tests.support.stream_support import (
    consume_all,
    produce_rows,
    run_until_idle,
    simulated_rows,
    start_worker,
    stop,
    worker_cmd,
)

pytestmark = pytest.mark.integration


def event_kinds(bootstrap: str, topic: str, expect: int) -> set[tuple[str, str]]:
    outs = consume_all(bootstrap, topic, expect=expect, idle=1.0)
    return {(o.doc["run"]["facets"]["workflow"]["engineRunId"], o.doc["eventType"]) for o in outs}


def test_until_idle_again_over_committed_input_exits_0_at_once_and_emits_nothing(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    rows, _ = simulated_rows(tmp_path, runs=200, seed=31)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    expected = sum(isinstance(r, (RunStarted, RunEnded)) for r in records)
    src, out, err = make_topic(4), make_topic(4), make_topic(1)
    produce_rows(kafka_bootstrap, src, rows)
    cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "data", src, out, err)

    run_until_idle(cmd, tmp_path / "first.log")
    assert committed_offsets(kafka_bootstrap, unique_group, src) == end_offsets(kafka_bootstrap, src)
    out_end, err_end = end_offsets(kafka_bootstrap, out), end_offsets(kafka_bootstrap, err)
    assert sum(out_end) >= expected

    # the same group again, with its data dir, and then without it (a new machine): both done at once
    for name, data_dir in (("again", tmp_path / "data"), ("fresh", tmp_path / "fresh-data")):
        log = tmp_path / f"{name}.log"
        started = time.monotonic()
        proc = start_worker(
            [*worker_cmd(kafka_bootstrap, unique_group, data_dir, src, out, err), "--until-idle"], log
        )
        rc = wait_exit(proc, 30.0, log)
        took = time.monotonic() - started
        assert rc == 0, f"{name}: exited {rc}"
        assert took < 30.0, f"{name}: took {took:.1f} s"
        assert end_offsets(kafka_bootstrap, out) == out_end, f"{name}: emitted events"
        assert end_offsets(kafka_bootstrap, err) == err_end, f"{name}: emitted errors"
        assert committed_offsets(kafka_bootstrap, unique_group, src) == end_offsets(kafka_bootstrap, src)


def test_three_until_idle_workers_in_one_group_all_exit_0(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    rows, _ = simulated_rows(tmp_path, runs=1500, seed=32)
    records = [codec.decode(r.payload, r.partition, r.offset) for r in rows]
    starts = {r.engine_run_id for r in records if isinstance(r, RunStarted)}
    ends = {r.engine_run_id for r in records if isinstance(r, RunEnded)}
    src, out, err = make_topic(6), make_topic(6), make_topic(1)
    produce_rows(kafka_bootstrap, src, rows)

    procs = []
    try:
        for i in range(3):
            cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / f"w{i}", src, out, err, "--until-idle")
            procs.append((start_worker(cmd, tmp_path / f"w{i}.log"), tmp_path / f"w{i}.log"))
            time.sleep(1.0)  # staggered: later workers take partitions over from earlier ones
        codes = [wait_exit(proc, 240.0, log) for proc, log in procs]
    finally:
        for proc, _ in procs:
            stop(proc)
    assert codes == [0, 0, 0]
    assert committed_offsets(kafka_bootstrap, unique_group, src) == end_offsets(kafka_bootstrap, src)
    kinds = event_kinds(kafka_bootstrap, out, len(starts) + len(ends))
    missing = [rid for rid in starts if (rid, "START") not in kinds]
    missing_end = [rid for rid in ends if not any((rid, t) in kinds for t in ("COMPLETE", "FAIL", "ABORT"))]
    assert not missing and not missing_end, (missing[:3], missing_end[:3])
