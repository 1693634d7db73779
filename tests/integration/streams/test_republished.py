"""Input published again, long after its runs finished and were evicted (MirrorMaker 2 restarted
after a kill -9, a source re-run, an operator re-publishing a range): the worker's log marks skip
it, so no run is opened again; and a kill -9 while it reads such a range loses nothing."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from olstream.contract.records import Record, RunEnded, RunStarted
from olstream.devkit.process import free_port
from olstream.streams.mapping import TERMINAL_EVENT_TYPES
from tests.support.stop_support import committed_everything
from tests.support.stream_records import T0, declared, ended, started
from tests.support.stream_support import (
    Follower,
    Out,
    consume_all,
    metric,
    produce_records,
    start_worker,
    stop,
    tail,
    wait_for,
    worker_cmd,
)

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
Worker = subprocess.Popen[bytes]

LOG_PARTITIONS = 4
RETENTION = "60"  # seconds of record time: the first runs are evicted once later records come


def runs(prefix: str, per_partition: int, offsets: dict[int, int], at: datetime) -> list[Record]:
    """`per_partition` runs on each log partition (start, declaration, end; every tenth left open),
    their offsets continuing from `offsets` (updated)."""
    records: list[Record] = []
    for lp in range(LOG_PARTITIONS):
        for i in range(per_partition):
            rid = f"{prefix}-{lp}-{i}"
            o = offsets.get(lp, 0)
            t = at + timedelta(milliseconds=10 * i)
            records.append(started(rid, partition=lp, offset=o, instance=rid, wtype=f"w{i % 7}", start=t))
            records.append(declared(rid, partition=lp, offset=o + 1, name=f"db.t{i % 11}", at=t))
            if i % 10 == 9:
                offsets[lp] = o + 2
                continue
            records.append(ended(rid, partition=lp, offset=o + 2, at=t + timedelta(seconds=1)))
            offsets[lp] = o + 3
    return records


def expected_events(records: list[Record]) -> set[tuple[str, str]]:
    out = {(r.engine_run_id, "START") for r in records if isinstance(r, RunStarted)}
    return out | {
        (r.engine_run_id, TERMINAL_EVENT_TYPES[r.status.value]) for r in records if isinstance(r, RunEnded)
    }


def kinds(outs: list[Out]) -> set[tuple[str, str]]:
    return {(o.doc["run"]["facets"]["workflow"]["engineRunId"], o.doc["eventType"]) for o in outs}


def counter(port: int, name: str) -> float:
    return metric(port, name) or 0.0


@dataclass
class Evicted:
    """A worker that processed `first` (the runs to publish again) and evicted its finished runs."""

    src: str
    out: str
    err: str
    first: list[Record]
    later: list[Record]  # runs published after `first`, so that its finished runs are evicted
    offsets: dict[int, int]
    follower: Follower
    port: int
    log: Path

    def committed(self, bootstrap: str, group: str) -> Callable[[], bool]:
        return lambda: committed_everything(bootstrap, group, self.src)

    def seen_all(self, records: list[Record]) -> Callable[[], bool]:
        want = expected_events(records)

        def done() -> bool:
            self.follower.poll(0.5)
            return want <= kinds(self.follower.seen)

        return done

    def drain(self) -> int:
        """Read the output until it is quiet for a second; how many events it holds."""
        while self.follower.poll(1.0):
            pass
        return len(self.follower.seen)


def finish_and_evict(
    bootstrap: str, make_topic: MakeTopic, group: str, tmp: Path, per_partition: int
) -> tuple[Evicted, Worker]:
    """Publish `per_partition` runs per log partition, process them, then later runs, until every
    finished one of the first is evicted."""
    src, out, err = make_topic(2), make_topic(2), make_topic(1)
    offsets: dict[int, int] = {}
    first = runs("first", per_partition, offsets, T0)
    produce_records(bootstrap, src, first)
    follower = Follower(bootstrap, out)
    port = free_port()
    log = tmp / "w1.log"
    cmd = worker_cmd(
        bootstrap, group, tmp / "w1", src, out, err,
        "--retention", RETENTION, "--session-timeout", "6", "--metrics-port", str(port),
    )  # fmt: skip
    proc = start_worker(cmd, log)
    ev = Evicted(src, out, err, first, [], offsets, follower, port, log)
    finished = sum(isinstance(r, RunEnded) for r in first)
    try:
        wait_for("the first runs processed and committed", ev.committed(bootstrap, group), 120, log)
        time.sleep(3)  # the worker reads the group's committed offsets every 2 s: evictions wait for them
        # later records (two hours of record time on): the first runs' window has passed
        ev.later = runs("later", 5, offsets, T0 + timedelta(hours=2))
        produce_records(bootstrap, src, ev.later)
        evicted = lambda: counter(port, "olstream_stream_evicted_runs_total") >= finished  # noqa: E731
        wait_for("the first finished runs evicted", evicted, 120, log)
        wait_for("the later runs processed and committed", ev.committed(bootstrap, group), 120, log)
        wait_for("every event of the first runs", ev.seen_all(first), 60, log)
    except BaseException:
        stop(proc)
        follower.close()
        raise
    return ev, proc


def test_records_published_again_after_their_runs_were_evicted_give_no_event(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    ev, proc = finish_and_evict(kafka_bootstrap, make_topic, unique_group, tmp_path, per_partition=40)
    duplicates = "olstream_stream_duplicates_total"
    try:
        before = ev.drain()
        skipped = counter(ev.port, duplicates)
        produce_records(kafka_bootstrap, ev.src, ev.first)  # the same records again, at new Kafka offsets
        wait_for(
            "the records published again committed", ev.committed(kafka_bootstrap, unique_group), 120, ev.log
        )
        time.sleep(2)
        ev.drain()
        new = ev.follower.seen[before:]
        assert new == [], f"{len(new)} new events, e.g. {sorted(kinds(new))[:3]}"
        assert consume_all(kafka_bootstrap, ev.err, idle=0.5) == [], "no record went to the errors topic"
        assert counter(ev.port, duplicates) - skipped == len(ev.first)
    finally:
        stop(proc)
        ev.follower.close()


def test_kill_9_while_reading_records_published_again_loses_nothing_and_reopens_nothing(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    ev, proc = finish_and_evict(kafka_bootstrap, make_topic, unique_group, tmp_path, per_partition=150)
    try:
        first_phase = ev.drain()
        skipped = counter(ev.port, "olstream_stream_duplicates_total")
        new_runs = runs("new", 250, ev.offsets, T0 + timedelta(hours=3))
        # per log partition: the copy of the first runs, then new runs
        produce_records(kafka_bootstrap, ev.src, [*ev.first, *new_runs])
        deadline = time.monotonic() + 60
        # kill it as soon as it reads the copy (its first duplicate, or any event at all)
        while counter(ev.port, "olstream_stream_duplicates_total") == skipped and not ev.follower.poll(0.02):
            assert time.monotonic() < deadline, tail(ev.log)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not ev.committed(kafka_bootstrap, unique_group)(), "killed after everything was done"
    except BaseException:
        stop(proc)
        ev.follower.close()
        raise

    # a new worker with an empty data dir: run states and marks come back from the changelog
    log2 = tmp_path / "w2.log"
    cmd = worker_cmd(
        kafka_bootstrap, unique_group, tmp_path / "w2", ev.src, ev.out, ev.err, "--retention", RETENTION
    )
    proc2 = start_worker(cmd, log2)
    try:
        wait_for("every new run's events after the restart", ev.seen_all(new_runs), 180, log2)
        wait_for("the input committed to its end", ev.committed(kafka_bootstrap, unique_group), 60, log2)
        ev.drain()
    finally:
        stop(proc2)
        ev.follower.close()

    first_ids = {r.engine_run_id for r in ev.first}
    late_first = [
        o
        for o in ev.follower.seen[first_phase:]
        if o.doc["run"]["facets"]["workflow"]["engineRunId"] in first_ids
    ]
    assert late_first == [], (
        f"{len(late_first)} events of runs published again, e.g. {sorted(kinds(late_first))[:3]}"
    )
    copies: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    per_run: dict[str, list[str]] = defaultdict(list)
    for o in sorted(ev.follower.seen, key=lambda o: (o.partition, o.offset)):
        doc = o.doc
        copies[(doc["run"]["runId"], doc["eventType"])].add(o.value)
        per_run[doc["run"]["facets"]["workflow"]["engineRunId"]].append(doc["eventType"])
    differing = [k for k, v in copies.items() if len(v) > 1]
    assert not differing, f"every repeat is byte-identical; these differ: {differing[:3]}"
    ended_runs = {
        r.engine_run_id: TERMINAL_EVENT_TYPES[r.status.value]
        for r in [*ev.first, *ev.later, *new_runs]
        if isinstance(r, RunEnded)
    }
    for rid, types in per_run.items():
        assert types[0] == "START", (rid, types)
        assert set(types) <= {"START", ended_runs.get(rid, "START")}, (rid, types)
        if rid in ended_runs:
            # docs/worker.md: a crash between a batch's acknowledged sends and its state write repeats
            # the batch, START and terminal again, in order; a run's last event stays its terminal one
            assert types[-1] == ended_runs[rid], f"a START after the run's last terminal event: {rid} {types}"
        else:
            assert types == ["START"] * len(types), (rid, types)
    assert consume_all(kafka_bootstrap, ev.err, idle=0.5) == [], "no record went to the errors topic"
