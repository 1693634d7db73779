"""`olstream errors redrive` against a real broker, a real sink and a real worker: dead-lettered
events reach the receiver once it is fixed, and records the worker refused are processed again
once the cause is fixed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from olstream.contract import codec
from olstream.contract.records import Record
from olstream.eventlog.stores import open_store
from olstream.shared import deadletter
from olstream.streams.mapping import TERMINAL_EVENT_TYPES
from tests.support.receiver import Receiver, Reply, Request
from tests.support.sink_events import identity, make_events, produce
from tests.support.sink_harness import run_sink
from tests.support.source_support import run_source
from tests.support.stream_records import declared, ended, started
from tests.support.stream_support import (
    consume_all,
    env,
    produce_records,
    run_until_idle,
    worker_cmd,
)

pytestmark = pytest.mark.integration

MakeTopic = Callable[..., str]
TERMINAL = frozenset({"COMPLETE", "FAIL", "ABORT"})


def olstream(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olstream", *args, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_dlq_redrive_after_the_receiver_is_fixed_delivers_every_dead_lettered_event(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1)
    events = make_events(runs=40, events_per_run=3, jobs=4)
    produce(kafka_bootstrap, topic, events)
    broken = {"sinktest/job-1", "sinktest/job-2"}  # the misconfigured receiver refuses their RUNNING events

    def misconfigured(request: Request, n: int) -> Reply:
        job, _run, kind = identity(request.body)
        return Reply(400) if kind == "RUNNING" and job in broken else Reply(201)

    def sink(url: str, name: str) -> None:
        log = tmp_path / f"{name}.log"
        rc = run_sink(kafka_bootstrap, topic, unique_group, "--url", url, "--dlq-topic", dlq, log_path=log)
        assert rc == 0, log.read_text()[-3000:]

    dead_expected = [
        e for e in events if identity(e.value)[2] == "RUNNING" and identity(e.value)[0] in broken
    ]
    n = len(dead_expected)
    runs_redriven = {identity(e.value)[1] for e in dead_expected}
    assert n > 0
    with Receiver() as receiver:
        receiver.respond_with(misconfigured)
        sink(receiver.url, "sink1")
        assert len(consume_all(kafka_bootstrap, dlq, expect=n, idle=0.5)) == n

        dry = olstream(kafka_bootstrap, "errors", "redrive", dlq, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"would re-drive {n} of {n} selected records" in dry.stdout, dry.stdout
        assert len(consume_all(kafka_bootstrap, topic, idle=0.5)) == len(events), "a dry run sends nothing"

        # re-driven before the receiver is fixed: they fail again, and come back counted
        first = olstream(kafka_bootstrap, "errors", "redrive", dlq)
        assert first.returncode == 0, first.stderr
        assert f"re-drove {n} of {n} selected records" in first.stdout, first.stdout
        assert f"and {len(runs_redriven)} runs' terminal events after them" in first.stdout, first.stdout
        sink(receiver.url, "sink2")
    copies = consume_all(kafka_bootstrap, dlq, expect=2 * n, idle=0.5)[n:]
    assert len(copies) == n
    for m in copies:
        headers = dict(m.headers)
        assert headers[deadletter.REDRIVE_ATTEMPT] == b"1"
        assert headers[deadletter.REDRIVEN_FROM].startswith(f"{dlq}[0]@".encode())
    spent = olstream(
        kafka_bootstrap, "errors", "redrive", dlq, "--from-offset", str(n), "--max-attempts", "1"
    )
    assert spent.returncode == 2, spent.stdout  # no loop: a record stops at --max-attempts
    assert f"left {n}: re-driven 1 times already" in spent.stdout, spent.stdout

    second = olstream(kafka_bootstrap, "errors", "redrive", dlq, "--from-offset", str(n))
    assert second.returncode == 0, second.stderr
    with Receiver() as fixed:  # the receiver is fixed: the live sink goes on from its committed offsets
        sink(fixed.url, "sink3")
        bodies = [r.body for r in fixed.accepted]
    assert {e.value for e in dead_expected} <= set(bodies), "every dead-lettered event delivered"
    per_run: dict[str, list[str]] = defaultdict(list)
    for body in bodies:
        _job, run, kind = identity(body)
        per_run[run].append(kind)
    for run in runs_redriven:  # a run's last event in the receiver stays its terminal one
        assert per_run[run][-1] in TERMINAL, (run, per_run[run])


def _records(prefix: str) -> list[Record]:
    """Log partition 0: three runs (start, input, end); the middle one's records the buggy worker refuses."""
    out: list[Record] = []
    o = 0
    for i in range(3):
        rid = f"{prefix}-{i}"
        out.append(started(rid, partition=0, offset=o, instance=rid, wtype=f"w{i}"))
        out.append(declared(rid, partition=0, offset=o + 1, name=f"db.t{i}"))
        out.append(ended(rid, partition=0, offset=o + 2))
        o += 3
    return out


def test_a_worker_errors_redrive_processes_the_refused_records_again_once_the_cause_is_fixed(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    src, out, err = make_topic(1), make_topic(1), make_topic(1)
    records = _records("redrive")
    produce_records(kafka_bootstrap, src, records)
    buggy_run = "redrive-1"
    args = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "data", src, out, err)
    buggy = [sys.executable, "-m", "tests.support.faulty_worker", "--refuse", buggy_run, *args[3:]]
    assert args[:3] == [sys.executable, "-m", "olstream"], args[:3]
    run_until_idle(buggy, tmp_path / "buggy.log")
    first = consume_all(kafka_bootstrap, out, idle=0.5)
    refused = consume_all(kafka_bootstrap, err, idle=0.5)
    assert len(refused) == 3, "the buggy version refuses the run's start, and so its dataset and its end"

    done = olstream(kafka_bootstrap, "errors", "redrive", err)
    assert done.returncode == 0, done.stderr
    assert "re-drove 3 of 3 selected records" in done.stdout, done.stdout
    run_until_idle(args, tmp_path / "fixed.log")  # the fixed version

    events = consume_all(kafka_bootstrap, out, idle=0.5)[len(first) :]
    docs = [json.loads(e.value) for e in events]
    assert [(d["run"]["facets"]["workflow"]["engineRunId"], d["eventType"]) for d in docs] == [
        (buggy_run, "START"),
        (buggy_run, TERMINAL_EVENT_TYPES["completed"]),
    ]
    assert [i["name"] for i in docs[1]["inputs"]] == ["db.t1"], "its declaration applied too"
    assert len(consume_all(kafka_bootstrap, err, idle=0.5)) == 3, "nothing failed again"

    # re-driven a second time: the run's stored state makes it a replay, which re-sends only the
    # identical terminal event (docs/worker.md), never a START after it
    again = olstream(kafka_bootstrap, "errors", "redrive", err)
    assert again.returncode == 0, again.stderr
    run_until_idle(args, tmp_path / "again.log")
    repeated = consume_all(kafka_bootstrap, out, idle=0.5)[len(first) + len(events) :]
    assert [e.value for e in repeated] in ([], [events[1].value]), [e.value[:200] for e in repeated]


def test_a_source_row_refused_once_is_re_read_from_the_event_log_and_its_run_restored(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_group: str, tmp_path: Path
) -> None:
    """The source refused a RunStarted row; the worker then refused the run's later records as
    `unknown_run`. Re-driving the source's row (re-read from the log) and then the worker's records
    gives the run its START and terminal event."""
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    records = _records("rows")
    store = open_store(log_url, partitions=1, create=True)
    try:
        store.append_many([(0, codec.offset_encoder(r)) for r in records])
    finally:
        store.close()
    topic = make_topic(1)
    errors = f"{topic}.errors"
    out, worker_errors = make_topic(1), make_topic(1)
    refused_start = next(r for r in records if r.engine_run_id == "rows-1")
    source = [sys.executable, "-m", "tests.support.faulty_source", f"0:{refused_start.offset}"]
    done = run_source(source, env(), log_url, topic)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(consume_all(kafka_bootstrap, errors, idle=0.5)) == 1
    args = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "data", topic, out, worker_errors)
    run_until_idle(args, tmp_path / "w1.log")
    first = consume_all(kafka_bootstrap, out, idle=0.5)
    assert len(consume_all(kafka_bootstrap, worker_errors, idle=0.5)) == 2  # its dataset and its end

    without_log = olstream(kafka_bootstrap, "errors", "redrive", errors)
    assert without_log.returncode == 2 and "give --log" in without_log.stdout, without_log.stdout
    rows = olstream(kafka_bootstrap, "errors", "redrive", errors, "--log", log_url)
    assert rows.returncode == 0, rows.stderr
    assert f"re-drove 1 of 1 selected records of {errors}" in rows.stdout, rows.stdout
    rest = olstream(kafka_bootstrap, "errors", "redrive", worker_errors)
    assert rest.returncode == 0, rest.stderr
    run_until_idle(args, tmp_path / "w2.log")
    docs = [json.loads(e.value) for e in consume_all(kafka_bootstrap, out, idle=0.5)[len(first) :]]
    assert [(d["run"]["facets"]["workflow"]["engineRunId"], d["eventType"]) for d in docs] == [
        ("rows-1", "START"),
        ("rows-1", "COMPLETE"),
    ]
    assert [i["name"] for i in docs[1]["inputs"]] == ["db.t1"]
