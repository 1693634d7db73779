"""Each kind of hostile input of the bad-input issue, through the whole pipeline (source, worker, sink
as real processes against a real broker): the pipeline keeps running, every good record around it
arrives, and every bad one leaves an error record with a reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from olstream.contract import codec, wire
from olstream.contract.records import Direction, Record, RunError, RunStatus
from olstream.eventlog.stores import open_store
from olstream.shared import deadletter
from tests.support.receiver import Receiver
from tests.support.sink_harness import job_version_repeats, run_sink
from tests.support.source_support import markers, read_topic
from tests.support.stream_records import declared, ended, started
from tests.support.stream_support import Out, consume_all, env, run_until_idle, worker_cmd

pytestmark = pytest.mark.integration

OLSTREAM = [sys.executable, "-m", "olstream"]
PASSWORD = "s3cr3t-hostile"
LOG_PARTITIONS = 4
GOOD_RUNS = 24
MB = 1_000_000


def good_runs() -> list[Record]:
    out: list[Record] = []
    for i in range(GOOD_RUNS):
        p, rid = i % LOG_PARTITIONS, f"good-{i}"
        out += [
            started(rid, partition=p, instance=f"g{i}"),
            declared(rid, partition=p, name=f"db.t{i}"),
            ended(rid, partition=p),
        ]
    return out


def hostile_runs() -> tuple[list[Record], bytes]:
    """The table's rows as an engine could write them (not through the writer, which refuses some)."""
    wide = [
        declared("wide", partition=2, direction=Direction.OUTPUT, name=f"{i:03d}" + "w" * 8_000)
        for i in range(150)
    ]
    records: list[Record] = [
        # a valid RunEnded with a 2 MB stack trace: above the source's limit
        started("big-trace", partition=1, instance="bt"),
        ended(
            "big-trace", partition=1, status=RunStatus.FAILED, error=RunError("boom", "E", "t" * 2_000_000)
        ),
        # a run whose terminal event would be 1.2 MB
        started("wide", partition=2, instance="wide"),
        *wide,
        ended("wide", partition=2),
        # times a UUIDv7 cannot carry
        started(
            "pre-epoch", partition=3, instance="pe", start=datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)
        ),
        ended("pre-epoch", partition=3),
        started("year-one", partition=3, instance="y1", start=datetime(1, 1, 1, tzinfo=UTC)),
        # one engine run id on two log partitions: two runs
        started("twice", partition=0, instance="twice-a"),
        started("twice", partition=1, instance="twice-b"),
        ended("twice", partition=0),
        ended("twice", partition=1, status=RunStatus.FAILED),
        # a dataset declared again, with a new version, after its run's end
        started("late", partition=2, instance="late"),
        declared("late", partition=2, name="db.late", version="v1"),
        ended("late", partition=2),
        declared("late", partition=2, name="db.late", version="v2"),
    ]
    return records, b"\xc3\x01" + b"\x00" * 5 * MB  # a 5 MB row that does not decode


def write_log(url: str) -> None:
    good = good_runs()
    hostile, junk = hostile_runs()
    items: list[tuple[int, Any]] = []
    half = len(good) // 2
    for r in [*good[:half], *hostile, *good[half:]]:
        items.append((r.partition, codec.offset_encoder(r)))
        if r is hostile[3]:  # the junk row sits in the middle of the log
            items.append((0, lambda _offset: junk))
    store = open_store(url, partitions=LOG_PARTITIONS, create=True)
    try:
        store.append_many(items)
    finally:
        store.close()


def engine_id(o: Out | dict[str, Any]) -> str:
    doc = o.doc if isinstance(o, Out) else o
    return str(doc["run"]["facets"]["workflow"]["engineRunId"])


@dataclass(frozen=True)
class ErrorRecord:
    value: bytes
    headers: dict[str, bytes]


def error_records(bootstrap: str, topic: str) -> list[ErrorRecord]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.time_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    out: list[ErrorRecord] = []
    quiet = time.monotonic()
    try:
        while time.monotonic() - quiet < 3.0:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                out.append(ErrorRecord(m.value() or b"", dict(m.headers() or [])))
                quiet = time.monotonic()
    finally:
        c.close()
    return out


def reasons(errors: list[ErrorRecord]) -> Counter[str]:
    return Counter(e.headers[deadletter.ERROR].decode() for e in errors)


def test_hostile_input_through_the_pipeline(
    kafka_bootstrap: str, make_topic, unique_group: str, tmp_path: Path
) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    write_log(log_url)
    src, src_errors, out, errors = make_topic(4), make_topic(1), make_topic(4), make_topic(1)

    source = subprocess.run(
        [*OLSTREAM, "source", "--log", log_url, "--bootstrap", kafka_bootstrap, "--topic", src,
         "--errors-topic", src_errors, "--until-idle", "--idle-seconds", "0.5"],
        env=env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert source.returncode == 0, source.stderr[-3000:]

    cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w", src, out, errors)
    run_until_idle(cmd, tmp_path / "worker.log")
    started_at = time.monotonic()
    run_until_idle(cmd, tmp_path / "worker-again.log", timeout=60)  # consumed and committed: exits 0
    again = time.monotonic() - started_at

    with Receiver() as receiver:
        url = receiver.url.replace("http://", f"http://olstream:{PASSWORD}@")
        rc = run_sink(
            kafka_bootstrap, out, f"{unique_group}-sink", "--url", url, log_path=tmp_path / "sink.log"
        )
        assert rc == 0, (tmp_path / "sink.log").read_text()[-3000:]
        accepted = receiver.accepted

    # the source: both oversize rows are error records, bounded; everything else is published
    source_errors = error_records(kafka_bootstrap, src_errors)
    assert reasons(source_errors) == {"too_large": 2}, source.stderr[-3000:]
    for e in source_errors:
        assert len(e.value) == deadletter.COPY_LIMIT and int(e.headers[deadletter.SIZE]) > 2_000_000

    # the worker: one error record per bad record, with its reason
    worker_errors = error_records(kafka_bootstrap, errors)
    got = reasons(worker_errors)
    too_large = got.pop("too_large")
    assert got == {"invalid_time": 2, "unknown_run": 1, "declaration_after_end": 1}, got
    assert 0 < too_large < 150
    invalid = [e.headers for e in worker_errors if e.headers[deadletter.ERROR] == b"invalid_time"]
    assert all(b"start_time" in h[deadletter.ERROR_DETAIL] for h in invalid)

    # the events: every good run, both runs of the reused id, the wide run, the late run
    expected = Counter({(f"good-{i}", t): 1 for i in range(GOOD_RUNS) for t in ("START", "COMPLETE")})
    expected.update({("twice", "START"): 2, ("twice", "COMPLETE"): 1, ("twice", "FAIL"): 1})
    expected.update({("wide", "START"): 1, ("wide", "COMPLETE"): 1, ("big-trace", "START"): 1})
    expected.update({("late", "START"): 1, ("late", "COMPLETE"): 1})
    events = consume_all(kafka_bootstrap, out, expect=expected.total(), idle=1.0)
    by_run = Counter((engine_id(o), o.doc["eventType"]) for o in events)
    assert by_run == expected
    assert all(len(o.value) <= 1_048_576 for o in events)
    wide_end = next(o.doc for o in events if engine_id(o) == "wide" and o.doc["eventType"] == "COMPLETE")
    assert len(wide_end["outputs"]) + too_large == 150
    late_end = next(o.doc for o in events if engine_id(o) == "late" and o.doc["eventType"] == "COMPLETE")
    assert [i["name"] for i in late_end["inputs"]] == ["db.late"]

    # the sink delivered all of them, and no log line holds the URL's password
    posted, emitted = Counter(r.body for r in accepted), Counter(o.value for o in events)
    assert set(posted) == set(emitted) and all(posted[v] >= n for v, n in emitted.items())
    # more only where the sink posted a job's latest terminal event again (sink.md, Job versions)
    assert all(json.loads(b)["eventType"] in ("COMPLETE", "FAIL", "ABORT") for b in posted - emitted)
    assert job_version_repeats(accepted)[2] == []
    for name in ("sink.log", "worker.log", "worker-again.log"):
        assert PASSWORD not in (tmp_path / name).read_text(errors="replace"), name
    assert again < 60


def test_an_existing_topic_that_accepts_less_gets_too_large_records_instead_of_a_failed_source(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """A records topic created before (or by someone else) keeps its max.message.bytes: the source
    fits its limit to it, and a row the topic would refuse is an error record, not an exit 1."""
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    fits = started("fits", instance="x" * 100_000)
    too_big = started("too-big", instance="y" * 300_000)
    after = started("after", instance="z")
    store = open_store(log_url, partitions=1, create=True)
    try:
        store.append_many([(0, codec.offset_encoder(r)) for r in (fits, too_big, after)])
    finally:
        store.close()
    src = make_topic(1, {"max.message.bytes": "200000"})
    src_errors = make_topic(1)
    source = subprocess.run(
        [*OLSTREAM, "source", "--log", log_url, "--bootstrap", kafka_bootstrap, "--topic", src,
         "--errors-topic", src_errors, "--until-idle", "--idle-seconds", "0.5"],
        env=env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert source.returncode == 0, source.stderr[-3000:]
    assert "accepts messages up to 200000 bytes" in source.stderr
    published = read_topic(kafka_bootstrap, src)
    assert markers(published) == [(0, 1)], "the refused row leaves its position marker"
    records = [m for m in published if m.position not in markers(published)]
    assert [codec.decode(m.value).engine_run_id for m in records] == ["fits", "after"]
    [error] = error_records(kafka_bootstrap, src_errors)
    assert error.headers[deadletter.ERROR] == b"too_large" and error.headers[wire.HEADER_OFFSET] == b"1"
