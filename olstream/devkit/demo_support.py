"""Pieces of `olstream demo` that need no broker: what the log holds, child processes, metrics text."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from olstream.shared.errors import InfrastructureError

log = logging.getLogger(__name__)

TERMINAL_TYPES = frozenset({"COMPLETE", "FAIL", "ABORT"})


@dataclass(frozen=True)
class LogCounts:
    """What the simulated event log holds: the runs the pipeline must turn into events."""

    records: int
    runs_started: int
    runs_finished: int  # runs with both RunStarted and RunEnded: each needs one terminal event
    undecodable: int
    children_with_parent: frozenset[str] = frozenset()  # engine run ids: children whose parent is in the log
    children_parent_absent: int = 0  # children whose parent is in no log partition
    running_events: int = 0  # declarations that add a dataset to an open run: one RUNNING event each


def parent_edges(events: list[dict[str, object]]) -> tuple[set[str], set[str]]:
    """Engine run ids of the runs whose START carries a parent facet, and of those whose START does not."""
    with_edge: set[str] = set()
    without: set[str] = set()
    for e in events:
        if e.get("eventType") != "START":
            continue
        run = e.get("run")
        facets = run.get("facets") if isinstance(run, dict) else None
        if not isinstance(facets, dict):
            continue
        workflow = facets.get("workflow")
        rid = workflow.get("engineRunId") if isinstance(workflow, dict) else None
        if isinstance(rid, str):
            (with_edge if "parent" in facets else without).add(rid)
    return with_edge, without


def count_log(url: str) -> LogCounts:
    from olstream.contract.codec import decode
    from olstream.contract.naming import NamespaceError, normalize_namespace
    from olstream.contract.records import DatasetDeclared, RunEnded, RunStarted
    from olstream.eventlog.stores import open_store
    from olstream.shared.errors import DecodeError

    store = open_store(url)
    started: set[str] = set()
    ended: set[str] = set()
    parents: dict[str, str] = {}  # child's engine run id -> its parent's
    declared: set[tuple[int, str, str, str, str]] = set()  # (log partition, run, direction, ns, name)
    records = bad = 0
    try:
        for partition in store.partitions():
            after = -1
            while rows := store.read(partition, after, 5000):
                for row in rows:
                    records += 1
                    after = row.offset
                    try:
                        record = decode(row.payload, row.partition, row.offset)
                    except DecodeError:
                        bad += 1
                        continue
                    if isinstance(record, RunStarted):
                        started.add(record.engine_run_id)
                        if record.parent is not None:
                            parents[record.engine_run_id] = record.parent.engine_run_id
                    elif isinstance(record, RunEnded):
                        ended.add(record.engine_run_id)
                    elif record.engine_run_id in started and record.engine_run_id not in ended:
                        assert isinstance(record, DatasetDeclared)
                        try:
                            namespace = normalize_namespace(record.dataset_namespace)
                        except NamespaceError:
                            continue  # refused by the worker: no event
                        declared.add((record.partition, record.engine_run_id, record.direction.value,
                                      namespace, record.dataset_name))  # fmt: skip
    finally:
        store.close()
    in_log = frozenset(child for child, parent in parents.items() if parent in started)
    return LogCounts(records, len(started), len(started & ended), bad, in_log, len(parents) - len(in_log),
                     len(declared))  # fmt: skip


@dataclass
class OutputTally:
    """Distinct RunEvents seen (by bytes), and which runs have a terminal event."""

    events: list[dict[str, object]] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    terminal_runs: set[str] = field(default_factory=set)
    started_runs: set[str] = field(default_factory=set)
    duplicates: int = 0
    by_run_event: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def conflicting(self) -> int:
        """(run, event type) pairs seen with different bytes: a broken byte-identity promise."""
        return sum(1 for n in self.by_run_event.values() if n > 1)

    running: int = 0  # distinct RUNNING events

    def complete(self, counts: LogCounts) -> bool:
        """Every started run's START, every RUNNING event and every finished run's terminal event is here."""
        started, finished = len(self.started_runs), len(self.terminal_runs)
        return (
            started >= counts.runs_started
            and finished >= counts.runs_finished
            and self.running >= counts.running_events
        )

    def add(self, raw: bytes) -> None:
        if raw in self.seen:
            self.duplicates += 1
            return
        self.seen.add(raw)
        doc = json.loads(raw)
        self.events.append(doc)
        run_id = str(doc.get("run", {}).get("runId"))
        event_type = str(doc.get("eventType"))
        if event_type == "RUNNING":  # one per dataset added: told apart by the dataset it carries
            self.running += 1
            sides = ("inputs", "outputs")
            event_type += json.dumps([[side, d.get("namespace"), d.get("name")] for side in sides
                                      for d in doc.get(side) or () if isinstance(d, dict)])  # fmt: skip
        key = (run_id, event_type)
        self.by_run_event[key] = self.by_run_event.get(key, 0) + 1
        if doc.get("eventType") in TERMINAL_TYPES:
            self.terminal_runs.add(run_id)
        elif doc.get("eventType") == "START":
            self.started_runs.add(run_id)


class FileFollower:
    """Reads complete lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.position = 0
        self.partial = b""

    def new_lines(self) -> list[bytes]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.position)
                data = f.read()
                self.position = f.tell()
        except FileNotFoundError:
            return []
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        return [ln for ln in lines if ln.strip()]


def metric_total(text: str, fragment: str) -> float:
    """Sum of every sample whose metric name contains `fragment` (Prometheus text format)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m and fragment in m.group(1) and not m.group(1).endswith("_created"):
            with contextlib.suppress(ValueError):
                total += float(m.group(3))
    return total


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts (`le` -> count) in Prometheus text, summed over labels."""
    out: dict[float, float] = {}
    for m in re.finditer(
        rf'^{re.escape(name)}_bucket\{{(?:[^}}]*,)?le="([^"]+)"[^}}]*\}}\s+(\S+)$', text, re.M
    ):
        le = float(m.group(1))
        out[le] = out.get(le, 0.0) + float(m.group(2))
    return out


def merge_buckets(parts: Iterable[dict[float, float]]) -> dict[float, float]:
    out: dict[float, float] = {}
    for part in parts:
        for le, n in part.items():
            out[le] = out.get(le, 0.0) + n
    return out


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus's `histogram_quantile`: linear within the bucket holding the q-th observation."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return lower  # beyond the last finite bound: its bound, as Prometheus does
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def scrape(port: int, timeout: float = 2.0) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
            return str(resp.read().decode("utf-8", errors="replace"))
    except OSError:
        return ""


def count_in_logs(paths: Iterable[Path], fragment: str) -> int:
    n = 0
    for path in paths:
        with contextlib.suppress(OSError), path.open(encoding="utf-8", errors="replace") as f:
            n += sum(1 for line in f if fragment in line)
    return n


@dataclass
class Child:
    """One pipeline process the demo started (its own session, so Ctrl-C reaches only the demo)."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None


class Children:
    def __init__(self, work_dir: Path, env: dict[str, str]) -> None:
        self.work_dir = work_dir
        self.env = env
        self.started: list[Child] = []

    def start(self, name: str, args: Sequence[str], metrics_port: int | None = None) -> Child:
        log_path = self.work_dir / f"{name}.log"
        cmd = [sys.executable, "-m", "olstream", *args]
        if metrics_port:
            cmd += ["--metrics-port", str(metrics_port)]
        with log_path.open("ab") as out:
            out.write(("$ " + " ".join(cmd) + "\n").encode())
            out.flush()
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )  # fmt: skip
        child = Child(name, proc, log_path, metrics_port)
        self.started.append(child)
        return child

    def run(self, name: str, args: Sequence[str], timeout: float) -> None:
        """Run a command to completion; its failure is an error showing its last log lines."""
        child = self.start(name, args)
        try:
            rc = child.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.stop([child])
            raise InfrastructureError(f"{name} did not finish within {timeout:.0f}s") from e
        if rc != 0:
            raise InfrastructureError(f"{name} exited with {rc}:\n{tail_text(child.log_path)}")

    def check_alive(self, names: Iterable[str]) -> None:
        for child in self.started:
            if child.name in names and child.proc.poll() is not None:
                raise InfrastructureError(
                    f"{child.name} exited early with {child.proc.returncode}:\n{tail_text(child.log_path)}"
                )

    def stop(self, children: Sequence[Child] | None = None, timeout: float = 20.0) -> None:
        """SIGTERM (clean shutdown), then SIGKILL what is still alive after `timeout` seconds."""
        targets = [c for c in (children if children is not None else self.started) if c.proc.poll() is None]
        for c in targets:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for c in targets:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM; killing it", c.name)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait(timeout=10)


def tail_text(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def first_error(path: Path) -> str:
    """The first ERROR/Traceback line of a process log ("" when none)."""
    with contextlib.suppress(OSError), path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if " ERROR " in line or line.startswith(("Traceback", "RuntimeError", "Exception")):
                return line.strip()[:300]
    return ""
