"""The runs `olstream explain` found, and their views: records, state, events, dead letters, commits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from olstream.contract import wire
from olstream.contract.records import DatasetDeclared, Record, RunEnded, RunStarted
from olstream.operations.explain_match import Found, RunFinder, RunKey, event_field, header, ol_run_id
from olstream.operations.explain_report import (
    DeadLetterView,
    EventView,
    GroupView,
    LogRecordView,
    Place,
    RunView,
    StateView,
    format_ms,
)
from olstream.shared import deadletter
from olstream.streams.state import format_time
from olstream.streams.state_store import loads_state


@dataclass(frozen=True, slots=True)
class ExplainRequest:
    subject: str
    kind: str  # one of KINDS
    records_topic: str
    events_topic: str
    dlq_topics: tuple[str, ...]  # the sinks' dead-letter topics (one per receiver)
    app_id: str  # the worker group; its state changelog is `{app_id}-runs-changelog`
    sink_groups: tuple[str, ...] | None  # None: every group that committed on the events topic
    max_runs: int
    time_slack_s: float
    threads: int
    timeout: float
    log_url: str | None = None

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-runs-changelog"


@dataclass(frozen=True, slots=True)
class FoundRun:
    """One run's messages in the records topic, in offset order."""

    key: RunKey
    records: tuple[Found, ...]

    @property
    def start(self) -> RunStarted | None:
        for f in self.records:
            if isinstance(f.record, RunStarted):
                return f.record
        return None

    @property
    def home(self) -> int | None:
        """The records-topic partition of its records: the changelog partition of its state."""
        return self.records[0].partition if self.records else None

    @property
    def first_ms(self) -> int:
        return min((f.timestamp_ms for f in self.records), default=0)

    @property
    def order(self) -> tuple[int, int, int]:
        first = self.records[0] if self.records else None
        return (self.first_ms, first.partition if first else 0, first.offset if first else 0)


@dataclass(frozen=True, slots=True)
class RunsFound:
    runs: tuple[FoundRun, ...]
    matched: int

    @classmethod
    def of(cls, finders: Iterable[RunFinder]) -> RunsFound:
        runs: list[FoundRun] = []
        matched = 0
        for finder in finders:
            found = finder.found()
            matched += finder.starts_seen + len(finder.loose)
            for key, records in found.items():
                runs.append(FoundRun(key, tuple(sorted(records, key=lambda f: f.offset))))
        runs.sort(key=lambda r: r.order)
        return cls(tuple(runs), max(matched, len(runs)))

    def cut(self, max_runs: int) -> RunsFound:
        """The latest `max_runs` runs (by their first record's time); `matched` kept."""
        return RunsFound(self.runs[-max_runs:], self.matched)

    @property
    def first_ms(self) -> int:
        return min((r.first_ms for r in self.runs if r.first_ms > 0), default=0)

    def run_ids(self, states: Mapping[RunKey, Found]) -> dict[RunKey, str]:
        """Each run's OpenLineage run id: from its stored state, else derived from its RunStarted."""
        out: dict[RunKey, str] = {}
        for run in self.runs:
            found = states.get(run.key)
            if found is not None and found.value:
                out[run.key] = loads_state(found.value).run.run_id
            elif (start := run.start) is not None:
                out[run.key] = ol_run_id(start)
        return out


def record_time(record: Record) -> str:
    if isinstance(record, RunStarted):
        return format_time(record.start_time)
    if isinstance(record, DatasetDeclared):
        return format_time(record.time)
    if isinstance(record, RunEnded):
        return format_time(record.end_time)
    return "-"  # pragma: no cover - every record type is above


def state_view(found: Found | None, changelog: str, worker_past_start: bool | None) -> StateView:
    if found is None:
        if worker_past_start:
            detail = (
                "no write of its key in the changelog partition read: the worker refused its records "
                "(olstream errors show olstream.stream.errors), or evicted it and compaction removed both"
            )
        else:
            detail = "no write of its key in the changelog partition read: the worker has not applied it yet"
        return StateView("absent", detail, None)
    place = Place(changelog, found.partition, found.offset, format_ms(found.timestamp_ms))
    if not found.value:
        return StateView(
            "evicted", "a tombstone: the run ended and was evicted after the retention window", place
        )
    state = loads_state(found.value)
    if state.end is None:
        detail = (
            f"started {state.start_time}, {len(state.inputs)} inputs, {len(state.outputs)} outputs so far, "
            f"last log offset applied {state.last_offset}"
        )
        return StateView("open", detail, place)
    return StateView("ended", f"{state.end.status} at {state.end.end_time}", place)


def dead_letter_view(topic: str, found: Found) -> DeadLetterView:
    def text(name: str) -> str | None:
        raw = header(found, name)
        return None if raw is None else raw.decode("utf-8", "replace")

    source = None
    st, sp, so = (
        text(deadletter.SOURCE_TOPIC),
        text(deadletter.SOURCE_PARTITION),
        text(deadletter.SOURCE_OFFSET),
    )
    if st is not None and sp is not None and so is not None:
        source = f"{st}[{sp}]@{so}"
    return DeadLetterView(
        Place(topic, found.partition, found.offset, format_ms(found.timestamp_ms)),
        text(deadletter.ERROR) or "(no reason header)",
        text(deadletter.HTTP_STATUS),
        source,
    )


def event_view(
    topic: str, found: Found, sinks: Mapping[str, Mapping[int, int]], dead: Sequence[DeadLetterView]
) -> EventView:
    def field(name: str, json_name: str) -> str:
        raw = header(found, name)
        if raw is not None:
            return raw.decode("utf-8", "replace")
        return event_field(found.value or b"", json_name) or "?"

    place = Place(topic, found.partition, found.offset, format_ms(found.timestamp_ms))
    groups = tuple(
        GroupView(g, offsets.get(found.partition), offsets.get(found.partition, -1) > found.offset)
        for g, offsets in sorted(sinks.items())
    )
    mine = tuple(d for d in dead if d.source == str(place))
    return EventView(
        field(wire.HEADER_EVENT_TYPE, "eventType"),
        field(wire.HEADER_EVENT_TIME, "eventTime"),
        place,
        groups,
        mine,
    )


def build_views(
    request: ExplainRequest,
    runs: RunsFound,
    states: Mapping[RunKey, Found],
    run_ids: Mapping[RunKey, str],
    events: Sequence[tuple[str, Found]],
    dead: Sequence[tuple[str, str, Found]],  # (DLQ, run id, its copy)
    worker: Mapping[int, int],
    sinks: Mapping[str, Mapping[int, int]],
) -> list[RunView]:
    views: list[RunView] = []
    for run in runs.runs:
        rid = run_ids.get(run.key)
        records = tuple(
            LogRecordView(
                f.record.partition if f.record else run.key[0],
                f.record.offset if f.record else -1,
                type(f.record).__name__,
                record_time(f.record) if f.record else "-",
                Place(request.records_topic, f.partition, f.offset, format_ms(f.timestamp_ms)),
                None if f.partition not in worker else worker[f.partition] > f.offset,
            )
            for f in run.records
        )
        state = states.get(run.key)
        past_start = records[0].worker_committed if records else None
        my_dead = tuple(dead_letter_view(dlq, f) for dlq, r, f in dead if r == rid)
        my_events = tuple(event_view(request.events_topic, f, sinks, my_dead) for r, f in events if r == rid)
        start = run.start
        job = None
        if state is not None and state.value:
            s = loads_state(state.value)
            job = f"{s.run.namespace} / {s.run.name}"
        elif my_events:
            first = next(f for r, f in events if r == rid)
            ns, name = header(first, wire.HEADER_JOB_NAMESPACE), header(first, wire.HEADER_JOB_NAME)
            if ns is not None and name is not None:
                job = f"{ns.decode('utf-8', 'replace')} / {name.decode('utf-8', 'replace')}"
        views.append(
            RunView(
                run.key[1],
                run.key[0],
                rid,
                job,
                start.workflow_instance if start else None,
                records,
                state_view(state, request.changelog_topic, past_start),
                my_events,
                my_dead,
            )
        )
    return views
