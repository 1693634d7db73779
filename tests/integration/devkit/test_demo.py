"""`olstream demo --runs 50` end to end: separate processes, a terminal event per finished run, a picture."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from olstream.contract.codec import decode
from olstream.contract.records import DatasetDeclared, RunEnded, RunStarted

pytestmark = pytest.mark.integration

TERMINAL = {"COMPLETE", "FAIL", "ABORT"}


def _demo(  # type: ignore[no-untyped-def]
    cmd: list[str],
    env: dict[str, str],
    bootstrap: str,
    out: Path,
    *,
    runs: int,
    seed: int,
    columns: int,
    url: str | None = None,
):
    """`olstream demo` with 2 workers over 3 partitions; its output captured, its exit code not checked."""
    return subprocess.run(
        [*cmd, "demo", "--runs", str(runs), "--workers", "2", "--partitions", "3", "--seed", str(seed),
         "--bootstrap", bootstrap, *(["--url", url] if url else []), "--out", str(out),
         "--time-limit", "240"],
        env={**env, "COLUMNS": str(columns)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip


def test_demo_delivers_a_terminal_event_per_finished_run_and_draws_the_graph(
    kafka_bootstrap: str, tmp_path: Path, olstream_cmd: list[str], subprocess_env: dict[str, str]
) -> None:
    out = tmp_path / "lineage.jsonl"
    done = _demo(olstream_cmd, subprocess_env, kafka_bootstrap, out, runs=50, seed=11, columns=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    terminal_runs = {e["run"]["runId"] for e in events if e["eventType"] in TERMINAL}
    started_runs = {e["run"]["runId"] for e in events if e["eventType"] == "START"}
    assert terminal_runs and terminal_runs <= started_runs
    found = re.search(r"runs simulated \(started / finished\)\D*(\d+) / (\d+)", done.stdout)
    assert found, done.stdout
    assert len(started_runs) == int(found.group(1))
    assert len(terminal_runs) == int(found.group(2))
    running = [e for e in events if e["eventType"] == "RUNNING"]  # the demo has RUNNING events on
    assert running and all(len(e["inputs"]) + len(e["outputs"]) == 1 for e in running)
    found = re.search(r"RUNNING events expected \(datasets added to open runs\)\D*(\d+)", done.stdout)
    assert found and int(found.group(1)) == len({e["run"]["runId"] + json.dumps(e["inputs"] + e["outputs"])
                                                 for e in running}), done.stdout  # fmt: skip
    assert re.search(r"re-sent events that differ \(must be 0\)\s*\W*0\s", done.stdout), done.stdout
    # the summary names every stage's numbers
    for label in (
        "events RUNNING",
        "runs left open (of them showing datasets)",
        "events COMPLETE",
        "jobs",
        "datasets",
        "dataset edges",
        "parent edges",
        "parent_not_visible",
    ):
        assert label in done.stdout, label
    svg = out.with_suffix(".svg")
    assert svg.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))
    assert "<svg" in svg.read_text(encoding="utf-8")


def test_demo_counts_match_the_simulated_log(tmp_path: Path) -> None:
    """The demo's expectation (runs with both RunStarted and RunEnded) read from a real SQLite log."""
    from olstream.devkit.demo_support import count_log
    from olstream.eventlog.simulate import simulate
    from olstream.eventlog.stores import open_store

    url = f"sqlite:///{tmp_path / 'events.db'}"
    store = open_store(url, partitions=3, create=True)
    try:
        summary = simulate(store, runs=40, seed=3)
        started: set[str] = set()
        ended: set[str] = set()
        added: set[tuple[str, object, str, str]] = set()  # datasets declared while their run was open
        for p in store.partitions():
            for row in store.read(p, -1, 100_000):
                rec = decode(row.payload, row.partition, row.offset)
                if isinstance(rec, RunStarted):
                    started.add(rec.engine_run_id)
                elif isinstance(rec, RunEnded):
                    ended.add(rec.engine_run_id)
                elif rec.engine_run_id in started - ended:
                    assert isinstance(rec, DatasetDeclared)
                    added.add((rec.engine_run_id, rec.direction, rec.dataset_namespace, rec.dataset_name))
    finally:
        store.close()
    counts = count_log(url)
    assert counts.records == summary.records
    assert counts.runs_started == len(started)
    assert counts.runs_finished == len(started & ended)
    assert counts.undecodable == 0
    assert counts.running_events == len(added) > 0


@pytest.mark.parametrize("suffix", [".svg", ".png", ".html"])
def test_graph_command_renders_each_format(
    suffix: str, tmp_path: Path, olstream_cmd: list[str], subprocess_env: dict[str, str]
) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz 'dot' is not installed (make setup installs it)")
    events = tmp_path / "lineage.jsonl"
    parent = {
        "job": {"namespace": "ns", "name": "parent@1"},
        "run": {"runId": "p"},
        "_producer": "x",
        "_schemaURL": "y",
    }
    child_run = {"runId": "c", "facets": {"parent": parent}}
    lines = [
        {"eventType": "START", "job": {"namespace": "ns", "name": "parent@1"}, "run": {"runId": "p"}},
        {
            "eventType": "FAIL",
            "job": {"namespace": "ns", "name": "child@1"},
            "run": child_run,
            "inputs": [{"namespace": "s3://b", "name": "in"}],
            "outputs": [{"namespace": "s3://b", "name": "out"}],
        },
    ]
    events.write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    out = tmp_path / f"g{suffix}"
    done = subprocess.run(
        [*olstream_cmd, "graph", str(events), "-o", str(out)],
        env=subprocess_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 jobs, 2 datasets, 2 dataset edges, 1 parent edges, 1 jobs with failed runs" in done.stdout
    data = out.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG")
    else:
        assert b"<svg" in data and b"child@1" in data


def test_demo_into_marquez_rules_gets_201_for_every_event_and_every_run_on_its_job(
    kafka_bootstrap: str, tmp_path: Path, olstream_cmd: list[str], subprocess_env: dict[str, str]
) -> None:
    from tests.support.marquez_rules import MarquezRules, misplaced_runs
    from tests.support.receiver import Receiver

    rules = MarquezRules()
    out = tmp_path / "lineage.jsonl"
    with Receiver() as receiver:
        receiver.respond_with(rules)
        done = _demo(
            olstream_cmd,
            subprocess_env,
            kafka_bootstrap,
            out,
            runs=300,
            seed=5,
            columns=160,
            url=receiver.url,
        )
        invalid = receiver.invalid
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"events rejected by the receiver \(must be 0\)\s*\W*0", done.stdout), done.stdout
    events = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    model = rules.snapshot()
    assert invalid == [] and model.rejections == [] and model.accepted >= len(events)
    assert misplaced_runs(model, events) == []
    assert max(j.name.count("@") for j in model.jobs.values()) >= 5  # depth 4


def test_demo_reports_rejected_events_by_status_and_exits_non_zero(
    kafka_bootstrap: str, tmp_path: Path, olstream_cmd: list[str], subprocess_env: dict[str, str]
) -> None:
    from tests.support.marquez_rules import JETTY_400
    from tests.support.receiver import Receiver, Reply, Request

    def reject_aborts(request: Request, n: int) -> Reply:
        if b'"eventType":"ABORT"' in request.body:
            return Reply(400, JETTY_400, (("Content-Type", "text/html"),))
        return Reply(201)

    out = tmp_path / "lineage.jsonl"
    with Receiver() as receiver:
        receiver.respond_with(reject_aborts)
        done = _demo(
            olstream_cmd, subprocess_env, kafka_bootstrap, out, runs=40, seed=5, columns=160, url=receiver.url
        )
        aborts = [r for r in receiver.requests if r.status == 400]  # each one is a DLQ message
    assert all(b'"eventType":"ABORT"' in r.body for r in aborts)
    assert aborts, "the workload has aborted runs"
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.search(r"rejected with HTTP 400\W*(\d+), first: (.*)", done.stdout)
    assert found, done.stdout
    assert int(found.group(1)) == len(aborts)
    assert found.group(2).startswith("Error 400 Bad Request HTTP ERROR 400")
    assert f"the receiver rejected {len(aborts)} event(s)" in done.stdout
