"""What `olstream explain` reports about a run, as values, and its two renderings: lines and JSON.

Both renderings pass the log redaction (`olstream.shared.logs.redact`): a namespace or a receiver's
answer that carries a URL with credentials is shown without them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from olstream.operations.explain_read import ScanCost
from olstream.shared.logs import redact


def format_ms(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Place:
    """A Kafka message: topic, partition, offset and its timestamp (when it was produced)."""

    topic: str
    partition: int
    offset: int
    time: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class LogRecordView:
    """One record of the run: its place in the event log, its type and own time, and in Kafka."""

    log_partition: int
    log_offset: int
    type: str
    time: str  # the record's own time: start_time, the declaration's time, end_time
    kafka: Place | None  # None: read from the event log (--log) and not found in the records topic
    worker_committed: bool | None  # the worker group committed past it (None: no commit known)


@dataclass(frozen=True, slots=True)
class StateView:
    """What the worker's state holds of the run: open, ended, evicted, or absent from the changelog."""

    status: str
    detail: str
    place: Place | None  # the changelog write read (None: none found)


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    place: Place
    reason: str
    http_status: str | None
    source: str | None  # topic[partition]@offset of the event it is a copy of


@dataclass(frozen=True, slots=True)
class GroupView:
    group: str
    committed: int | None  # its committed offset on the event's partition (None: no commit)
    past: bool  # committed past the event


@dataclass(frozen=True, slots=True)
class EventView:
    type: str
    event_time: str
    place: Place
    groups: tuple[GroupView, ...]
    dead_letters: tuple[DeadLetterView, ...]


@dataclass(frozen=True, slots=True)
class RunView:
    engine_run_id: str
    log_partition: int
    run_id: str | None  # OpenLineage run id
    job: str | None  # namespace / name
    workflow_instance: str | None
    records: tuple[LogRecordView, ...]
    state: StateView
    events: tuple[EventView, ...]
    dead_letters: tuple[DeadLetterView, ...]  # every DLQ copy of the run's events


@dataclass(frozen=True, slots=True)
class ExplainReport:
    subject: str
    found_as: str  # "OpenLineage run id", "engine run id", "workflow instance"
    runs: tuple[RunView, ...]
    runs_matched: int  # runs that matched; more than `runs` when --max-runs cut them
    notes: tuple[str, ...]
    costs: tuple[ScanCost, ...]
    seconds: float

    def to_json(self) -> str:
        return redact(json.dumps(asdict(self), indent=2, ensure_ascii=False))

    def lines(self) -> list[str]:
        return [redact(line) for line in _lines(self)]


def _lines(report: ExplainReport) -> list[str]:
    out: list[str] = []
    shown = len(report.runs)
    many = (
        f" ({shown} of {report.runs_matched} runs, the latest; raise --max-runs)"
        if shown < report.runs_matched
        else ""
    )
    out.append(f"{report.subject}: found as {report.found_as}{many}")
    for run in report.runs:
        out.append("")
        out.extend(_run_lines(run))
    for note in report.notes:
        out.append(f"note: {note}")
    out.append("")
    for c in report.costs:
        since = "" if c.since_ms is None else f" from {format_ms(c.since_ms)}"
        out.append(
            f"read {c.topic}: {c.partitions} partitions{since}, {c.messages:,} messages, {c.seconds:.2f} s"
        )
    out.append(f"total {report.seconds:.2f} s")
    return out


def _run_lines(run: RunView) -> list[str]:
    out = [f"run {run.run_id or '(no OpenLineage run id: its RunStarted was not found)'}"]
    out.append(
        f"  engine run id {run.engine_run_id}, log partition {run.log_partition}"
        + (f", workflow instance {run.workflow_instance}" if run.workflow_instance else "")
    )
    if run.job:
        out.append(f"  job {run.job}")
    out.append(f"  log records ({len(run.records)}):")
    for r in run.records:
        where = "not in the records topic" if r.kafka is None else f"{r.kafka} produced {r.kafka.time}"
        worker = {True: "worker committed past it", False: "worker not past it", None: "no worker commit"}
        out.append(
            f"    {r.type:<15} log {r.log_partition}@{r.log_offset}  {r.time}  {where}  "
            f"{worker[r.worker_committed]}"
        )
    place = f" ({run.state.place})" if run.state.place else ""
    out.append(f"  worker state: {run.state.status}{place}: {run.state.detail}")
    out.append(f"  events ({len(run.events)}):")
    for e in run.events:
        groups = "; ".join(f"{g.group} {_commit(g)}" for g in e.groups) or "no sink group committed here"
        out.append(f"    {e.type:<9} {e.event_time}  {e.place}  {groups}")
        for d in e.dead_letters:
            out.append(f"      dead-lettered: {_dead_letter(d)}")
    linked = {d.place for e in run.events for d in e.dead_letters}
    for d in run.dead_letters:
        if d.place not in linked:
            out.append(f"    dead letter of an event not listed: {_dead_letter(d)}")
    return out


def _commit(g: GroupView) -> str:
    if g.past:
        return "committed past it"
    return "no commit" if g.committed is None else f"not past it (committed {g.committed})"


def _dead_letter(d: DeadLetterView) -> str:
    status = f", HTTP {d.http_status}" if d.http_status else ""
    source = f", copy of {d.source}" if d.source else ""
    return f"{d.place} produced {d.place.time} ({d.reason}{status}{source})"
