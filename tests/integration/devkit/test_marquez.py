"""The whole pipeline (simulator -> source -> worker -> sink) into a real Marquez, checked via its REST API.

Marquez is started once for the session (`olstream.devkit.marquez.up`, from the Marquez jar in
../shared/marquez/ or OLSTREAM_LOCAL_MARQUEZ_JAR, on the test PostgreSQL) and stopped afterwards;
`OLSTREAM_MARQUEZ_URL` points the test at one already running. Where none is there the test skips
and says why. The test checks only its own workload: every job name starts with a prefix unique
to the run (`--job-prefix`), so a Marquez that holds other lineage (the demo's, an earlier run's)
does not fail it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from olstream.contract.codec import decode
from olstream.contract.records import RunEnded, RunStarted
from olstream.devkit import marquez
from olstream.devkit.process import free_port
from olstream.devkit.settings import MARQUEZ_UP
from olstream.eventlog.stores import open_store
from olstream.shared.config import resolve
from olstream.shared.errors import OlstreamError
from tests.support.paths import shared_marquez_jar

pytestmark = [pytest.mark.integration, pytest.mark.marquez]

RUN_STATES = {"START": "RUNNING", "COMPLETE": "COMPLETED", "FAIL": "FAILED", "ABORT": "ABORTED"}


@pytest.fixture(scope="session")
def marquez_url(request: pytest.FixtureRequest) -> Iterator[str]:
    external = os.environ.get("OLSTREAM_MARQUEZ_URL")
    if external:
        yield external.rstrip("/")
        return
    # OLSTREAM_LOCAL_MARQUEZ_VERSION, OLSTREAM_LOCAL_MARQUEZ_JAR
    configured = resolve("marquez", MARQUEZ_UP, {}, os.environ)
    # without OLSTREAM_LOCAL_MARQUEZ_JAR: the Marquez server jar in ../shared/marquez/, where CI has one
    jar = configured["jar"] or shared_marquez_jar()
    try:
        marquez.resolve_classpath(configured["version"], jar)
    except OlstreamError as e:
        pytest.skip(f"Marquez is not available here: {e}")
    postgres_server = request.getfixturevalue("postgres_server")  # only once Marquez is there to use it
    data_dir = Path(tempfile.mkdtemp(prefix="olstream-marquez-"))
    port = free_port()
    settings = marquez.MarquezSettings(
        version=configured["version"],
        port=port,
        admin_port=free_port(avoid=frozenset({port})),
        data_dir=data_dir,
        pg_admin_url=postgres_server,
        db_name=f"marquez_{uuid.uuid4().hex[:8]}",
        jar=jar,
    )
    try:
        yield marquez.up(settings)
    finally:
        marquez.down(settings.data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _run(cmd: list[str], env: dict[str, str], timeout: float = 240) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{cmd[3:5]} exited {done.returncode}:\n{done.stderr[-3000:]}"


def _read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        consumer.assign(parts)
        seen: dict[bytes, dict[str, Any]] = {}
        remaining = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while remaining:
            assert time.monotonic() < deadline, f"topic {topic} ended early"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                raw = msg.value() or b""
                seen.setdefault(raw, json.loads(raw))
            # the events topic is written in transactions: its markers are never given, the position
            # passes them
            for tp in consumer.position([TopicPartition(topic, p) for p in remaining]):
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
        return list(seen.values())
    finally:
        consumer.close()


def _find_job(jobs: list[dict[str, Any]], event: dict[str, Any]) -> dict[str, Any]:
    """The Marquez job of this event: stored under exactly its name, under exactly its parent's job.

    With hierarchical job names (docs/naming.md) Marquez's full name of a child is the event's job
    name, its simple name the last segment, and its parentJobName the parent facet's job name.
    """
    name = str(event["job"]["name"])
    parent = event["run"].get("facets", {}).get("parent")
    matches = [job for job in jobs if job["name"] == name]
    assert len(matches) == 1, f"{len(matches)} Marquez jobs named {name!r}"
    job = matches[0]
    assert job.get("parentJobName") == (None if parent is None else parent["job"]["name"]), (name, job)
    if parent is not None:
        assert name == f"{parent['job']['name']}.{job['simpleName']}", (name, job.get("simpleName"))
    return job


def _stale_jobs(client: httpx.Client, events: list[dict[str, Any]]) -> list[str]:
    """Jobs whose current inputs and outputs in Marquez are not those of their latest run.

    The latest run of a job is the one whose terminal event has the latest eventTime (ties: the
    greater runId); its datasets are the union over all its events (Marquez's run I/O).
    """
    latest: dict[tuple[str, str], tuple[str, str]] = {}  # job -> (eventTime, runId) of its latest run
    datasets: dict[str, tuple[set[tuple[str, str]], set[tuple[str, str]]]] = {}
    rank: dict[tuple[str, str], tuple[datetime, str]] = {}
    for e in events:
        ins, outs = datasets.setdefault(e["run"]["runId"], (set(), set()))
        ins.update((d["namespace"], d["name"]) for d in e.get("inputs", []))
        outs.update((d["namespace"], d["name"]) for d in e.get("outputs", []))
        if e["eventType"] in ("COMPLETE", "FAIL", "ABORT"):
            job = (e["job"]["namespace"], e["job"]["name"])
            mine = (datetime.fromisoformat(e["eventTime"].replace("Z", "+00:00")), e["run"]["runId"])
            if job not in rank or mine > rank[job]:
                rank[job], latest[job] = mine, (e["eventTime"], e["run"]["runId"])
    stale = []
    for (ns, name), (_, run_id) in sorted(latest.items()):
        job = _get(client, f"/api/v1/namespaces/{quote(ns, safe='')}/jobs/{quote(name, safe='')}")
        got = ({(d["namespace"], d["name"]) for d in job.get("inputs", [])},
               {(d["namespace"], d["name"]) for d in job.get("outputs", [])})  # fmt: skip
        if got != datasets[run_id]:
            stale.append(f"{name}: latest run {run_id}")
    return stale


def _get(client: httpx.Client, path: str) -> dict[str, Any]:
    resp = client.get(path)
    assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text[:300]}"
    body = resp.json()
    assert isinstance(body, dict)
    return body


def test_pipeline_into_marquez_keeps_jobs_runs_datasets_and_edges(
    marquez_url: str,
    kafka_bootstrap: str,
    make_topic: Any,
    unique_group: str,
    tmp_path: Path,
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    eventlog, events_topic = make_topic(partitions=3), make_topic(partitions=3)
    namespace_prefix = f"mq{uuid.uuid4().hex[:6]}"
    job_prefix = f"{namespace_prefix}."  # unique to this run: the test reads only jobs named so
    # run ids derive from the records: another base time gives the same workload with run ids of its
    # own (a Marquez never moves an existing run to another job, so repeated ids would fail the test)
    base_time = (datetime(2024, 5, 1, tzinfo=UTC) + timedelta(minutes=uuid.uuid4().int % 500_000)).isoformat()
    env = subprocess_env
    b = ["--bootstrap", kafka_bootstrap]
    _run([*olstream_cmd, "log", "simulate", "--log", log_url, "--runs", "120", "--seed", "5",
          "--base-time", base_time], env)  # fmt: skip
    _run([*olstream_cmd, "source", "--log", log_url, *b, "--topic", eventlog, "--until-idle"], env)
    _run(
        [*olstream_cmd, "worker", *b, "--app-id", f"mq-{namespace_prefix}", "--data-dir", str(tmp_path / "w"),
         "--input-topic", eventlog, "--output-topic", events_topic, "--job-prefix", job_prefix,
         "--until-idle"],
        env,
    )  # fmt: skip
    _run([*olstream_cmd, "sink", *b, "--topic", events_topic, "--group", unique_group, "--url", marquez_url,
          "--until-idle"], env)  # fmt: skip

    events = _read_topic(kafka_bootstrap, events_topic)
    assert events and all(e["job"]["name"].startswith(job_prefix) for e in events)
    final: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["run"]["runId"] not in final or e["eventType"] in ("COMPLETE", "FAIL", "ABORT"):
            final[e["run"]["runId"]] = e

    with httpx.Client(base_url=marquez_url, timeout=30) as client:
        jobs_by_ns: dict[str, list[dict[str, Any]]] = {}
        for ns in {e["job"]["namespace"] for e in final.values()}:
            listed = _get(client, f"/api/v1/namespaces/{quote(ns, safe='')}/jobs?limit=100000")["jobs"]
            jobs_by_ns[ns] = [j for j in listed if j["name"].startswith(job_prefix)]  # this run's only
        for run_id, event in final.items():
            # every job (children under their parent's name, with parentJobName): the parent/child edges
            job = _find_job(jobs_by_ns[event["job"]["namespace"]], event)
            runs = _get(client, f"/api/v1/namespaces/{quote(event['job']['namespace'], safe='')}/jobs/"
                                f"{quote(job['name'], safe='')}/runs?limit=10000")["runs"]  # fmt: skip
            assert run_id in {r["id"] for r in runs}, f"run {run_id} is not on job {job['name']!r}"
            # every run with its final state
            run = _get(client, f"/api/v1/jobs/runs/{run_id}")
            assert run["state"] == RUN_STATES[event["eventType"]], (job["name"], run_id)
            # every dataset, and the run's read/write edges
            for direction in ("inputs", "outputs"):
                for ds in event.get(direction, []):
                    _get(client, f"/api/v1/namespaces/{quote(ds['namespace'], safe='')}/datasets/"
                                 f"{quote(ds['name'], safe='')}")  # fmt: skip
            if event["eventType"] == "COMPLETE":
                for direction, key in (
                    ("inputs", "inputDatasetVersions"),
                    ("outputs", "outputDatasetVersions"),
                ):
                    want = {(d["namespace"], d["name"]) for d in event.get(direction, [])}
                    got = {
                        (v["datasetVersionId"]["namespace"], v["datasetVersionId"]["name"])
                        for v in run.get(key, [])
                    }
                    assert want <= got, (job["name"], direction, want - got)
        # no phantom jobs: every stored job of this run is one an event names
        for ns, jobs in jobs_by_ns.items():
            named = {e["job"]["name"] for e in final.values() if e["job"]["namespace"] == ns}
            phantoms = {j["name"] for j in jobs} - named
            assert not phantoms, f"jobs no event names in {ns}: {sorted(phantoms)[:5]}"
        assert max(e["job"]["name"].count("@") for e in final.values()) >= 4, "children at depth 3 and more"
        # every dataset with its data source
        for event in final.values():
            for ds in event.get("inputs", []) + event.get("outputs", []):
                got = _get(client, f"/api/v1/namespaces/{quote(ds['namespace'], safe='')}/datasets/"
                                   f"{quote(ds['name'], safe='')}")  # fmt: skip
                assert got.get("sourceName") == ds["namespace"], (ds, got.get("sourceName"))
        # every job at the version of its run with the latest terminal eventTime (ties: the greater runId)
        stale = _stale_jobs(client, events)
        assert stale == [], f"{len(stale)} jobs not at their latest run's version: {stale[:5]}"
        # every source answers (a source stored without a connection URL makes Marquez answer 500)
        sources = {d["namespace"] for e in events for d in e.get("inputs", []) + e.get("outputs", [])}
        for source in sorted(sources):
            _get(client, f"/api/v1/sources/{quote(source, safe='')}")
        # the lineage graph names each child's parent too
        children = [e for e in final.values() if e["run"].get("facets", {}).get("parent")]
        assert children, "the simulated workload should have child runs"
        for event in children[:10]:
            job = _find_job(jobs_by_ns[event["job"]["namespace"]], event)
            node = f"job:{event['job']['namespace']}:{job['name']}"
            graph = _get(client, f"/api/v1/lineage?nodeId={quote(node, safe='')}&depth=1")["graph"]
            me = next(n for n in graph if n["id"] == node)
            assert me["data"].get("parentJobName") == event["run"]["facets"]["parent"]["job"]["name"]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log_times(log_url: str) -> dict[str, tuple[datetime, datetime | None]]:
    """Engine run id -> (start, end or None) as the event log has them."""
    store = open_store(log_url)
    try:
        records = [decode(r.payload, r.partition, r.offset) for p in store.partitions()
                   for r in store.read(p, -1, 1_000_000)]  # fmt: skip
    finally:
        store.close()
    starts = {r.engine_run_id: r.start_time for r in records if isinstance(r, RunStarted)}
    assert len(starts) == sum(isinstance(r, RunStarted) for r in records), "one run per engine run id"
    ends = {r.engine_run_id: r.end_time for r in records if isinstance(r, RunEnded)}
    return {rid: (start, ends.get(rid)) for rid, start in starts.items()}


def test_with_running_events_marquez_shows_each_run_s_start_and_end_as_in_the_log(
    marquez_url: str,
    kafka_bootstrap: str,
    make_topic: Any,
    unique_group: str,
    tmp_path: Path,
    olstream_cmd: list[str],
    subprocess_env: dict[str, str],
) -> None:
    """Marquez 0.51.1 sets a run's started_at from every START *and* RUNNING event: with RUNNING
    events on, each finished run's startedAt and endedAt must still be the log's start and end."""
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    eventlog, events_topic = make_topic(partitions=3), make_topic(partitions=3)
    job_prefix = f"mq{uuid.uuid4().hex[:6]}."
    base_time = (datetime(2024, 5, 1, tzinfo=UTC) + timedelta(minutes=uuid.uuid4().int % 500_000)).isoformat()
    env, b = subprocess_env, ["--bootstrap", kafka_bootstrap]
    _run([*olstream_cmd, "log", "simulate", "--log", log_url, "--runs", "150", "--seed", "8",
          "--base-time", base_time], env)  # fmt: skip
    _run([*olstream_cmd, "source", "--log", log_url, *b, "--topic", eventlog, "--until-idle"], env)
    _run(
        [*olstream_cmd, "worker", *b, "--app-id", f"mq-{job_prefix[:-1]}", "--data-dir", str(tmp_path / "w"),
         "--input-topic", eventlog, "--output-topic", events_topic, "--job-prefix", job_prefix,
         "--running-events", "on", "--until-idle"],
        env,
    )  # fmt: skip
    _run([*olstream_cmd, "sink", *b, "--topic", events_topic, "--group", unique_group, "--url", marquez_url,
          "--until-idle"], env)  # fmt: skip

    log_times = _log_times(log_url)
    events = _read_topic(kafka_bootstrap, events_topic)
    engine_run = {e["run"]["runId"]: e["run"]["facets"]["workflow"]["engineRunId"] for e in events}
    running = [e for e in events if e["eventType"] == "RUNNING"]
    declared_later = {
        e["run"]["runId"]
        for e in running
        if _instant(e["run"]["facets"]["workflow"]["declaredAt"]) > _instant(e["eventTime"])
    }
    assert declared_later, "runs whose RUNNING events report declarations after their start"
    finished = {e["run"]["runId"] for e in events if e["eventType"] in ("COMPLETE", "FAIL", "ABORT")}
    off: list[str] = []
    with httpx.Client(base_url=marquez_url, timeout=30) as client:
        for run_id in sorted(finished):
            start, end = log_times[engine_run[run_id]]
            run = _get(client, f"/api/v1/jobs/runs/{run_id}")
            got = (run.get("startedAt"), run.get("endedAt"))
            if None in got or (_instant(str(got[0])), _instant(str(got[1]))) != (start, end):
                off.append(f"{run_id}: Marquez {got}, log {start.isoformat()} .. {end}")
    print(f"{len(off)} of {len(finished)} finished runs off ({len(declared_later & finished)} with RUNNING "
          f"events declared after their start, {len(running)} RUNNING events)")  # fmt: skip
    assert off == [], f"{len(off)} of {len(finished)} finished runs off: {off[:5]}"


def test_demo_dated_today_shows_in_marquez_s_events_for_today(
    marquez_url: str, kafka_bootstrap: str, olstream_cmd: list[str], subprocess_env: dict[str, str]
) -> None:
    """`olstream demo` without --base-time ends its simulated span now: Marquez's dashboard and
    Events page (GET /api/v1/events/lineage with today's range) show its events."""
    began = datetime.now(UTC)
    done = subprocess.run(
        [*olstream_cmd, "demo", "--runs", "40", "--workers", "1", "--partitions", "3", "--seed", "21",
         "--bootstrap", kafka_bootstrap, "--url", marquez_url, "--time-limit", "240"],
        env={**subprocess_env, "COLUMNS": "160"}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.search(r"runs simulated \(started / finished\)\D*(\d+) / (\d+)", done.stdout)
    assert found, done.stdout
    started = int(found.group(1))
    # today's range, as Marquez's UI asks for it (widened to an hour before the demo near midnight)
    after = min(began.replace(hour=0, minute=0, second=0, microsecond=0), began - timedelta(hours=1))
    before = datetime.now(UTC) + timedelta(minutes=1)
    window = f"after={after:%Y-%m-%dT%H:%M:%SZ}&before={before:%Y-%m-%dT%H:%M:%SZ}&limit=100000"
    with httpx.Client(base_url=marquez_url, timeout=30) as client:
        listed = _get(client, f"/api/v1/events/lineage?{window}")["events"]
    starts = [e for e in listed if e["eventType"] == "START" and "workflow" in e["run"].get("facets", {})]
    assert len(starts) >= started, f"{len(starts)} START events in {window}, the demo started {started} runs"
    assert all(after <= _instant(e["eventTime"]) <= before for e in listed)
    # the span ends now: its last START is minutes before the demo ran, not in 2024
    latest = max(_instant(e["eventTime"]) for e in starts)
    assert began - timedelta(minutes=30) <= latest <= before, latest
