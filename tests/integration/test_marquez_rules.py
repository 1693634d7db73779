"""The whole pipeline into a receiver that applies Marquez's rules (tests/support/marquez_rules.py).

Simulator -> source -> worker -> sink, real broker and processes. Then the same events again, with
every child's events ahead of its parent's (deepest runs first), through the sink into a fresh
receiver: Marquez must place every run on its expected job either way, and every source it stores
must answer. Then many concurrent runs of two jobs: each job must end at its latest run's version.
"""

from __future__ import annotations

import json
import random
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from confluent_kafka import Producer

from olstream.contract import codec
from olstream.contract.records import RunStarted, RunStatus
from olstream.eventlog.stores import open_store
from olstream.eventlog.writer import EventLogWriter
from tests.support.marquez_rules import MarquezRules, misplaced_runs, run_uuid, stale_job_versions
from tests.support.receiver import Receiver, Request
from tests.support.sink_harness import OLSTREAM, run_sink
from tests.support.stream_support import (
    Out,
    consume_all,
    expected_job_paths,
    run_until_idle,
    start_worker,
    worker_cmd,
)

pytestmark = pytest.mark.integration


def _olstream(*args: str) -> None:
    done = subprocess.run([*OLSTREAM, *args], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def deliver(
    kafka_bootstrap: str, topic: str, group: str, dlq: str, tmp_path: Path, name: str, *sink_args: str,
    latency: float = 0.0,
) -> tuple[MarquezRules, Receiver, list[Request]]:
    """Deliver the topic into a Marquez-rules receiver; every source it stored must answer 200."""
    rules = MarquezRules()
    receiver = Receiver(latency=latency).start()
    receiver.respond_with(rules)
    try:
        code = run_sink(kafka_bootstrap, topic, group, "--url", receiver.url, "--dlq-topic", dlq, *sink_args,
                        log_path=tmp_path / f"{name}.log", timeout=240)  # fmt: skip
        assert code == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
        posted = [r for r in receiver.requests if r.method == "POST"]
        sources = sorted(rules.snapshot().sources)
        assert sources, "the workload creates sources"
        with httpx.Client(base_url=receiver.url, timeout=10) as client:  # as a user of Marquez reads them
            answers = {s: client.get(f"/api/v1/sources/{quote(s, safe='')}").status_code for s in sources}
            assert answers == dict.fromkeys(sources, 200), answers
            assert client.get("/api/v1/sources").status_code == 200
    finally:
        receiver.close()
    return rules, receiver, posted


@pytest.mark.parametrize(("workers", "partitions"), [(2, 6), (3, 9)])
def test_every_run_lands_on_its_expected_job_at_every_depth_in_any_order(
    workers: int, partitions: int, kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    eventlog, events_topic, errors = make_topic(partitions), make_topic(partitions), make_topic(1)
    _olstream("log", "simulate", "--log", log_url, "--runs", "400", "--seed", "11", "--partitions", "6")
    _olstream("source", "--log", log_url, "--bootstrap", kafka_bootstrap, "--topic", eventlog, "--until-idle")
    procs = []
    for i in range(workers):  # one group: each worker owns some log partitions, parents are anywhere
        cmd = worker_cmd(kafka_bootstrap, unique_group, tmp_path / f"w{i}", eventlog, events_topic, errors)
        log = tmp_path / f"worker{i}.log"
        procs.append((start_worker([*cmd, "--until-idle"], log), log))
    for proc, log in procs:
        assert proc.wait(240) == 0, log.read_text()[-4000:]

    store = open_store(log_url)
    try:
        records = [codec.decode(r.payload, r.partition, r.offset) for p in store.partitions()
                   for r in store.read(p, -1, 100_000)]  # fmt: skip
    finally:
        store.close()
    starts = {r.engine_run_id: r for r in records if isinstance(r, RunStarted)}
    expected = expected_job_paths(starts)
    assert max(p.count("@") for p, _ in expected.values()) >= 5, "the workload has depth 4 and more"
    children = [r for r in starts.values() if r.parent is not None]
    in_log = [r for r in children if r.parent is not None and r.parent.engine_run_id in starts]
    across = [
        r
        for r in in_log
        if r.parent is not None
        and not r.parent.is_complete
        and starts[r.parent.engine_run_id].partition != r.partition
    ]
    absent = [r for r in children if r not in in_log]
    assert across and absent, "children that need the run directory, and children whose parent is absent"
    assert all(expected[r.engine_run_id][1] for r in in_log), "a parent in the log always gives an edge"
    assert not any(expected[r.engine_run_id][1] for r in absent)
    outs: list[Out] = consume_all(kafka_bootstrap, events_topic, expect=len(starts), idle=2.0)
    events = [o.doc for o in outs]
    for e in events:
        wf = e["run"]["facets"]["workflow"]
        path, has_parent = expected[wf["engineRunId"]]
        assert (e["job"]["name"], "parent" in e["run"]["facets"]) == (path, has_parent), wf["engineRunId"]
    assert consume_all(kafka_bootstrap, errors, expect=0, idle=0.5) == []

    # 1. in the pipeline's own delivery order
    sink_group = f"{unique_group}-sink"
    rules, receiver, _ = deliver(kafka_bootstrap, events_topic, sink_group, make_topic(1), tmp_path, "a")
    check(rules, receiver, events)
    roots = {(j.namespace, j.name) for j in rules.snapshot().jobs.values() if j.parent is None}
    expected_roots = {(e["job"]["namespace"], e["job"]["name"]) for e in events
                      if not expected[e["run"]["facets"]["workflow"]["engineRunId"]][1]}  # fmt: skip
    assert roots == expected_roots, (
        f"jobs standing as roots that are children: {sorted(roots - expected_roots)[:5]}"
    )

    # 2. every child's events before its parent's: deepest runs first, one partition keeps that order
    depth = {rid: p.count("@") for rid, (p, _) in expected.items()}
    reordered = sorted(outs, key=lambda o: -depth[o.doc["run"]["facets"]["workflow"]["engineRunId"]])
    reversed_topic = make_topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for o in reordered:
        producer.produce(reversed_topic, o.value, o.key)
    assert producer.flush(30) == 0
    sink_group = f"{unique_group}-rev"
    rules, receiver, posted = deliver(
        kafka_bootstrap, reversed_topic, sink_group, make_topic(1), tmp_path, "b"
    )
    check(rules, receiver, events)
    first_start: dict[str, int] = {}
    for i, req in enumerate(posted):
        doc = json.loads(req.body)
        if doc["eventType"] == "START":
            first_start.setdefault(doc["run"]["runId"], i)
    early = [
        e for e in events
        if e["eventType"] == "START" and "parent" in e["run"]["facets"]
        and first_start[e["run"]["runId"]] < first_start[e["run"]["facets"]["parent"]["run"]["runId"]]
    ]  # fmt: skip
    assert len(early) > 100, f"only {len(early)} child STARTs reached the receiver before their parent's"


def check(rules: MarquezRules, receiver: Receiver, events: list[dict[str, Any]]) -> None:
    model = rules.snapshot()
    assert receiver.invalid == [], receiver.invalid[:3]
    assert model.rejections == [], [(r.status, r.reason) for r in model.rejections[:5]]
    assert misplaced_runs(model, events) == []
    deepest = max(model.jobs.values(), key=lambda j: j.name.count("@"))
    assert deepest.parent is not None and deepest.name == f"{deepest.parent[1]}.{deepest.simple_name}"
    named = {(d["namespace"], d["name"]) for e in events for side in ("inputs", "outputs") for d in e[side]}
    assert set(model.datasets) == named
    assert all(source == ns for (ns, _), source in model.datasets.items()), "every dataset has its source"
    assert model.sources and all(url for url in model.sources.values()), model.sources


def test_each_job_ends_at_its_latest_run_with_many_concurrent_runs_over_several_log_partitions(
    kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    """Runs of two jobs on six log partitions, written in another order than their ends: the last
    terminal event in topic order is rarely the latest run's. Marquez takes the job's version from
    the last terminal event it receives; the sink must still leave each job at its latest run."""
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    store = open_store(log_url, partitions=6, create=True)
    rng = random.Random(26)
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    plans = [(i, rng.uniform(0, 600), rng.uniform(1, 300)) for i in range(240)]  # (run, start, duration)
    try:
        writer = EventLogWriter(store)
        with writer.batch():
            handles = {}
            for i, start, _ in plans:
                handles[i] = run = writer.run_started(
                    namespace="acme", workflow_type=f"load_{i % 2}", workflow_version="1",
                    workflow_instance=f"load-{i:04d}", task_id="tenant-1",
                    start_time=t0 + timedelta(seconds=start),
                )  # fmt: skip
                run.dataset_input("src", "postgres://db:5432", f"shop.orders_{i % 7}")
            for i, start, duration in sorted(plans, key=lambda p: rng.random()):  # ends in another order
                run = handles[i]
                run.dataset_output("dst", "s3://lake", f"orders/{i}")
                status = RunStatus.FAILED if i % 5 == 0 else RunStatus.COMPLETED
                run.run_ended(status, end_time=t0 + timedelta(seconds=start + duration))
        assert len({writer.partition_for(f"load-{i:04d}") for i, _, _ in plans}) == 6
    finally:
        store.close()
    eventlog, events_topic, errors = make_topic(3), make_topic(3), make_topic(1)
    _olstream("source", "--log", log_url, "--bootstrap", kafka_bootstrap, "--topic", eventlog, "--until-idle")
    run_until_idle(worker_cmd(kafka_bootstrap, unique_group, tmp_path / "w", eventlog, events_topic, errors),
                   tmp_path / "worker.log")  # fmt: skip
    events = [o.doc for o in consume_all(kafka_bootstrap, events_topic, expect=480, idle=2.0)]
    assert len(events) == 480

    rules, _, posted = deliver(kafka_bootstrap, events_topic, f"{unique_group}-sink", make_topic(1),
                               tmp_path, "sink", "--concurrency", "16", latency=0.02)  # fmt: skip
    model = rules.snapshot()
    assert model.rejections == [] and misplaced_runs(model, events) == []
    assert stale_job_versions(model, events) == []
    # the receiver did get older runs' terminal events after newer ones: the rule was exercised
    latest_seen: dict[str, tuple[datetime, str]] = {}
    older_after_newer = 0
    for req in posted:
        doc = json.loads(req.body)
        if doc["eventType"] in ("COMPLETE", "FAIL"):
            rank = (datetime.fromisoformat(doc["eventTime"]), doc["run"]["runId"])
            older_after_newer += rank < latest_seen.get(doc["job"]["name"], rank)
            latest_seen[doc["job"]["name"]] = max(rank, latest_seen.get(doc["job"]["name"], rank))
    assert older_after_newer > 10, older_after_newer
    repeats = len(posted) - len(events)
    assert 0 < repeats < len(events) // 2, repeats


def test_running_events_show_open_runs_datasets_and_keep_every_runs_job_version(
    kafka_bootstrap: str, make_topic: Any, unique_group: str, tmp_path: Path
) -> None:
    """The same log through a worker with RUNNING events off and one with them on, each into its own
    Marquez-rules receiver: with them, a run still open at the log's end shows exactly the datasets it
    declared; every run that ended links the same job version either way."""
    log_url = f"sqlite:///{tmp_path / 'events.db'}"
    eventlog = make_topic(4)
    _olstream("log", "simulate", "--log", log_url, "--runs", "300", "--seed", "13", "--partitions", "4")
    _olstream("source", "--log", log_url, "--bootstrap", kafka_bootstrap, "--topic", eventlog, "--until-idle")
    topics, procs = {}, []
    for mode in ("off", "on"):
        topics[mode], errors = make_topic(4), make_topic(1)
        cmd = worker_cmd(kafka_bootstrap, f"{unique_group}-{mode}", tmp_path / f"w-{mode}", eventlog,
                         topics[mode], errors, "--until-idle", "--running-events", mode)  # fmt: skip
        procs.append((start_worker(cmd, tmp_path / f"worker-{mode}.log"), tmp_path / f"worker-{mode}.log"))
    for proc, log in procs:
        assert proc.wait(240) == 0, log.read_text()[-4000:]
    events = {mode: [o.doc for o in consume_all(kafka_bootstrap, t, idle=2.0)] for mode, t in topics.items()}
    assert sum(e["eventType"] == "RUNNING" for e in events["off"]) == 0
    assert sum(e["eventType"] == "RUNNING" for e in events["on"]) > 0
    models = {}
    for mode, topic in topics.items():
        rules, receiver, _ = deliver(kafka_bootstrap, topic, f"{unique_group}-sink-{mode}", make_topic(1),
                                     tmp_path, mode)  # fmt: skip
        check(rules, receiver, events[mode])
        models[mode] = rules.snapshot()

    terminal = {e["run"]["runId"] for e in events["on"] if e["eventType"] not in ("START", "RUNNING")}
    declared: dict[str, tuple[set[tuple[str, str]], set[tuple[str, str]]]] = {}
    for e in events["on"]:
        ins, outs = declared.setdefault(e["run"]["runId"], (set(), set()))
        ins.update((d["namespace"], d["name"]) for d in e["inputs"])
        outs.update((d["namespace"], d["name"]) for d in e["outputs"])
    open_with_datasets = 0
    for run_id, (ins, outs) in declared.items():
        run_on, run_off = (models[m].runs[run_uuid(run_id)] for m in ("on", "off"))
        if run_id in terminal:
            assert run_on.job_version is not None and run_on.job_version == run_off.job_version, run_id
        elif ins or outs:
            open_with_datasets += 1
            assert (set(run_on.inputs), set(run_on.outputs)) == (ins, outs), run_id
            assert run_off.inputs == {} and run_off.outputs == {}, "without RUNNING events: nothing"
    assert open_with_datasets > 0, "the log leaves runs open after they declared datasets"
