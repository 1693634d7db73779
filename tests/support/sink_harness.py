"""Helpers of the sink integration tests: run `olstream sink` as a real process, check deliveries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from tests.support.receiver import Request
from tests.support.sink_events import LineageRecord
from tests.support.stop_support import committed_offsets

ROOT = Path(__file__).resolve().parents[2]
OLSTREAM = (
    [str(ROOT / ".venv" / "bin" / "olstream")]
    if (ROOT / ".venv" / "bin" / "olstream").exists()
    else [
        sys.executable,
        "-m",
        "olstream",
    ]
)


def terminate(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (a graceful stop), SIGKILL after 30 s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def sink_command(bootstrap: str, topic: str, group: str, *extra: str) -> list[str]:
    return [*OLSTREAM, "sink", "--bootstrap", bootstrap, "--topic", topic, "--group", group, *extra]


def start_sink(
    bootstrap: str, topic: str, group: str, *extra: str, log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE_")}
    full_env.update(env or {})
    with log_path.open("ab") as log:
        return subprocess.Popen(
            sink_command(bootstrap, topic, group, *extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=ROOT,
        )


def run_sink(
    bootstrap: str, topic: str, group: str, *extra: str, log_path: Path, timeout: float = 120
) -> int:
    """Run the sink with --until-idle and return its exit code."""
    proc = start_sink(bootstrap, topic, group, "--until-idle", *extra, log_path=log_path)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """The sum of the group's committed offsets (a partition without a commit counts 0)."""
    return sum(max(0, o) for o in committed_offsets(bootstrap, group, topic))


def _run_of(record: LineageRecord) -> tuple[bytes, str]:
    """The order the sink keeps: one run's events (its runId), within one Kafka key."""
    return (record.key, str(json.loads(record.value)["run"]["runId"]))


def assert_all_delivered_in_order(produced: Sequence[LineageRecord], accepted: Sequence[Request]) -> None:
    """Every produced body arrived byte for byte; per run, every delivery of event i came after a
    delivery of event i-1 (so first deliveries are in produced order, repeats only replay)."""
    bodies = {r.body for r in accepted}
    missing = [p for p in produced if p.value not in bodies]
    assert not missing, f"{len(missing)} of {len(produced)} never delivered, e.g. {missing[0].value[:200]!r}"
    produced_set = {p.value for p in produced}
    strangers = [b for b in bodies if b not in produced_set]
    assert not strangers, f"{len(strangers)} delivered bodies differ from every produced value"
    index: dict[bytes, tuple[tuple[bytes, str], int]] = {}
    per_run: dict[tuple[bytes, str], int] = defaultdict(int)
    for rec in produced:
        run = _run_of(rec)
        index[rec.value] = (run, per_run[run])
        per_run[run] += 1
    seen: dict[tuple[bytes, str], set[int]] = defaultdict(set)
    for req in accepted:
        run, pos = index[req.body]
        assert pos == 0 or pos - 1 in seen[run], (
            f"run {run!r}: event #{pos} delivered before event #{pos - 1} was ever delivered"
        )
        seen[run].add(pos)


def job_version_repeats(accepted: Sequence[Request]) -> tuple[int, int, list[str]]:
    """(terminal events posted again, other bodies posted again, jobs not at their latest run).

    The sink posts a job's latest terminal event again when the receiver may have applied an older
    one after it (docs/sink.md, Job versions), so terminal events can come twice; nothing else may
    unless something failed. The last terminal event received per job must be that job's latest
    (latest eventTime, then the greater runId).
    """
    seen: set[bytes] = set()
    latest: dict[tuple[str, str], tuple[datetime, str]] = {}
    last: dict[tuple[str, str], tuple[datetime, str]] = {}
    repeats = others = 0
    for req in accepted:
        doc = json.loads(req.body)
        job = (doc["job"]["namespace"], doc["job"]["name"])
        terminal = doc["eventType"] in ("COMPLETE", "FAIL", "ABORT")
        if req.body in seen:
            repeats += terminal
            others += not terminal
        seen.add(req.body)
        if terminal:
            rank = (datetime.fromisoformat(doc["eventTime"].replace("Z", "+00:00")), doc["run"]["runId"])
            last[job] = rank
            latest[job] = max(rank, latest.get(job, rank))
    stale = [f"{ns}/{name}" for (ns, name), rank in sorted(last.items()) if rank != latest[(ns, name)]]
    return repeats, others, stale
