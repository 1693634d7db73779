"""`olstream explain RUN`: where one run is in the pipeline, from its log records to the sinks' commits.

RUN is an OpenLineage run id, an engine run id or a workflow instance (`--kind`, default `auto`:
a UUID is tried as an OpenLineage run id first, anything else as an engine run id or a workflow
instance at once). Nothing is indexed by run id, so the lookup reads topics, cheapest first:

1. **Finding the run.** An OpenLineage run id is a UUIDv7 whose timestamp is the run's start, and
   every message of the run was produced after it started, so each topic is read from the first
   offset at or after that time less `--time-slack` (Kafka's time index: `ListOffsets`), and read
   whole again only when nothing was found. Its events are found by the raw
   `"runId":"..."` substring; the workflow facet of the first one names the engine run id, whose
   Avro string then finds the records. An engine run id or a workflow instance has no time: every
   partition of the records topic is read (in parallel), testing the raw value for the Avro
   string and decoding only the hits (`olstream.operations.explain_match`).
2. **Everything after** is bounded by the run's first record: the worker wrote its state and
   its events after reading it, and the sink dead-lettered after that, so the changelog (only the
   partition of the run's records: the state's home), the events topic and the DLQ are read from
   the first record's time less `--time-slack`.
3. **Commits** of the worker group and the sink groups are read with the AdminClient.

Nothing joins a group, commits or changes an offset (`olstream.operations.explain_read`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

from olstream.operations.explain_match import (
    EventFinder,
    Found,
    RunFinder,
    RunKey,
    StateFinder,
    events_partition,
    ol_run_id,
    state_key_bytes,
    workflow_facet,
)
from olstream.operations.explain_read import Collector, ScanCost, TopicReader, committed_offsets, scan
from olstream.operations.explain_report import ExplainReport
from olstream.operations.explain_runs import ExplainRequest, FoundRun, RunsFound, build_views
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_clients import Kafka
from olstream.streams.framed_input import InputFraming
from olstream.streams.mapping import event_key
from olstream.streams.runid import timestamp_millis
from olstream.streams.state_store import loads_state

log = logging.getLogger(__name__)

KINDS = ("auto", "run-id", "engine-run-id", "instance")
__all__ = ["KINDS", "ExplainRequest", "RunNotFound", "check_subject", "explain"]


class RunNotFound(ConfigError):
    """No run matched: one line, exit 2."""


def ol_uuid(text: str) -> str | None:
    """The canonical form of a UUID string; None when `text` is not one."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


def check_subject(subject: str, kind: str) -> None:
    """ConfigError when RUN cannot be what `kind` says (checked before anything is read)."""
    if kind not in KINDS:
        raise ConfigError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not subject.strip():
        raise ConfigError("RUN is empty: give an OpenLineage run id, an engine run id or a workflow instance")
    if kind == "run-id" and ol_uuid(subject) is None:
        raise ConfigError(f"{subject.strip()!r} is not an OpenLineage run id (a UUID)")


class _Scanner:
    """One request's scans, their costs, and the reader of partitions and offsets."""

    def __init__(
        self, kafka: Kafka, request: ExplainRequest, reader: TopicReader, framing: InputFraming
    ) -> None:
        self.kafka, self.request, self.reader, self.framing = kafka, request, reader, framing
        self.costs: list[ScanCost] = []

    def read(
        self, topic: str, partitions: range | set[int], make: Callable[[int], Collector], since_ms: int | None
    ) -> None:
        spans = self.reader.spans(topic, partitions, since_ms)
        self.costs.append(
            scan(
                self.kafka,
                topic,
                spans,
                make,
                threads=self.request.threads,
                timeout=self.request.timeout,
                since_ms=since_ms,
            )
        )

    def read_widening(
        self,
        topic: str,
        partitions: range,
        make: Callable[[int], Collector],
        since_ms: int | None,
        found: Callable[[], bool],
    ) -> None:
        """Read from `since_ms`; when nothing was found, read the whole topic (a run that started before
        the time may have records after it that only its start, read now, makes recognisable)."""
        self.read(topic, partitions, make, since_ms)
        if since_ms is not None and not found():
            self.read(topic, partitions, make, None)


def explain(kafka: Kafka, request: ExplainRequest, framing: InputFraming) -> ExplainReport:
    """The report on `request.subject` (the records read in either wire format: `framing`); `RunNotFound`
    when no run matches, ConfigError for a missing topic."""
    began = time.monotonic()
    reader = TopicReader(kafka, request.timeout)
    try:
        records_n = reader.require(request.records_topic)
        events_n = reader.require(request.events_topic)
        s = _Scanner(kafka, request, reader, framing)
        notes: list[str] = []
        try:
            runs, found_as, events = _find_runs(s, records_n, events_n)
        except RunNotFound as e:
            if not request.log_url or request.kind == "run-id":
                raise
            from olstream.operations.explain_log import runs_only_in_log

            only = runs_only_in_log(
                request.log_url, request.subject.strip(), request.kind, request.max_runs, framing
            )
            if not only:
                raise RunNotFound(f"{e}, nor in the event log") from None
            notes.append(f"not in {request.records_topic}: its rows are in the event log only")
            return ExplainReport(
                request.subject,
                "name, in the event log only",
                tuple(only),
                len(only),
                tuple(notes),
                tuple(s.costs),
                time.monotonic() - began,
            )
        cut = runs.cut(request.max_runs)
        since = None if not cut.first_ms else cut.first_ms - int(request.time_slack_s * 1000)
        if not cut.runs and events is not None and events.kept:  # its records are gone from the topic
            # (only an OpenLineage run id finds a run without records: a name raises RunNotFound)
            facet = workflow_facet(events.kept[0][1].value or b"")
            cut = RunsFound((FoundRun((-1, str(facet.get("engineRunId", "?"))), ()),), 1)
            since = events.kept[0][1].timestamp_ms - int(request.time_slack_s * 1000)
            notes.append(
                f"its events are in {request.events_topic}, its records no longer in {request.records_topic}"
            )
        states = _read_states(s, cut, since, notes)
        run_ids = cut.run_ids(states)
        one_id = found_as == "OpenLineage run id" and events is not None and len(cut.runs) == 1
        if one_id and events is not None and cut.runs[0].key not in run_ids:
            run_ids[cut.runs[0].key] = next(iter(events.run_ids))
        if events is not None and set(run_ids.values()) <= events.covered:
            events = events.only(run_ids.values())
        else:
            events = _events_of(s, cut, states, frozenset(run_ids.values()), since, events_n)
        dead: list[tuple[str, str, Found]] = []  # (DLQ, run id, its copy of the event)
        for dlq in request.dlq_topics:
            dlq_n = reader.partitions(dlq)
            if dlq_n is None:
                notes.append(f"topic {dlq} does not exist: nothing was dead-lettered there")
            elif run_ids:
                kept = _read_events(s, dlq, range(dlq_n), frozenset(run_ids.values()), since).kept
                dead.extend((dlq, run_id, found) for run_id, found in kept)
        worker = committed_offsets(kafka, request.records_topic, [request.app_id], request.timeout)
        sinks = committed_offsets(kafka, request.events_topic, request.sink_groups, request.timeout)
        if not sinks:
            notes.append(f"no consumer group has committed an offset on {request.events_topic}")
    finally:
        reader.close()
    views = build_views(
        request, cut, states, run_ids, events.kept, dead, worker.get(request.app_id, {}), sinks
    )
    if request.log_url:
        from olstream.operations.explain_log import add_log_rows

        views = add_log_rows(request.log_url, views, notes, framing)
    return ExplainReport(
        request.subject,
        found_as,
        tuple(views),
        runs.matched,
        tuple(notes),
        tuple(s.costs),
        time.monotonic() - began,
    )


def _find_runs(s: _Scanner, records_n: int, events_n: int) -> tuple[RunsFound, str, EventFinder | None]:
    """The runs RUN names, in one pass over the records topic (two when a time bound found nothing)."""
    request = s.request
    kind, subject = request.kind, request.subject.strip()
    check_subject(subject, kind)
    rid = ol_uuid(subject) if kind in ("auto", "run-id") else None
    events: EventFinder | None = None
    engine_ids: frozenset[str] = frozenset()
    by_engine_event = False
    since = None
    if rid is not None:
        since = _start_ms(rid, request.time_slack_s)
        events = _read_events(
            s,
            request.events_topic,
            range(events_n),
            frozenset({rid}),
            since,
            widen=True,
            engine_run_ids=frozenset({subject}) if kind == "auto" else frozenset(),
        )
        facets = [workflow_facet(f.value or b"") for r, f in events.kept if r == rid]
        engine_ids = frozenset(str(f["engineRunId"]) for f in facets if f.get("engineRunId"))
        # events that name RUN as their engine run id: RUN is one, and its string finds its records
        by_engine_event = bool(events.covered - {rid})
    by_engine_id = kind in ("auto", "engine-run-id")
    by_instance = kind in ("auto", "instance")
    finders: dict[int, RunFinder] = {}

    def make(p: int) -> RunFinder:
        finders[p] = RunFinder(
            s.framing,
            engine_run_ids=engine_ids | ({subject} if by_engine_id else set()),
            instance=subject if by_instance else None,
            run_ids=frozenset({rid}) if rid else frozenset(),
            max_runs=request.max_runs,
            # decode every start only when no event told which engine run id to look for
            decode_starts=not engine_ids and not by_engine_event,
        )
        return finders[p]

    s.read_widening(request.records_topic, range(records_n), make, since, lambda: _any(finders))
    found = RunsFound.of(finders.values())
    if rid is not None:
        mine = tuple(r for r in found.runs if _is_run(r, rid, engine_ids))
        if mine or (events is not None and any(r == rid for r, _ in events.kept)):
            return RunsFound(mine, len(mine)), "OpenLineage run id", events and events.only({rid})
        if kind == "run-id":
            raise RunNotFound(f"no run {rid} in {request.records_topic} or {request.events_topic}")
    named = tuple(
        r
        for r in found.runs
        if (by_engine_id and r.key[1] == subject)
        or (by_instance and r.start is not None and r.start.workflow_instance == subject)
    )
    if not named:
        what = {"engine-run-id": "with engine run id", "instance": "of workflow instance"}.get(kind, "named")
        raise RunNotFound(f"no run {what} {subject!r} in {request.records_topic}")
    as_instance = any(
        r.start is not None and r.start.workflow_instance == subject for r in named
    ) and not any(r.key[1] == subject for r in named)
    return (
        RunsFound(named, max(len(named), found.matched)),
        ("workflow instance" if as_instance else "engine run id"),
        events,  # a UUID's events scan also kept the events naming it as an engine run id
    )


def _is_run(run: FoundRun, rid: str, engine_ids: frozenset[str]) -> bool:
    """The run has OpenLineage run id `rid`: its start derives it, or (no start read) the events named it."""
    start = run.start
    return ol_run_id(start) == rid if start is not None else run.key[1] in engine_ids


def _any(finders: Mapping[int, RunFinder]) -> bool:
    return any(f.found() for f in finders.values())


def _start_ms(rid: str, slack_s: float) -> int | None:
    """The run's start less the slack, from a UUIDv7's timestamp; None for another UUID version."""
    if uuid.UUID(rid).version != 7:
        return None
    return timestamp_millis(rid) - int(slack_s * 1000)


def _read_events(
    s: _Scanner,
    topic: str,
    partitions: range | set[int],
    run_ids: frozenset[str],
    since: int | None,
    widen: bool = False,
    engine_run_ids: frozenset[str] = frozenset(),
) -> EventFinder:
    """The messages of `topic` (events or DLQ) of the runs `run_ids` (and of the runs whose events name
    one of `engine_run_ids`), in partition and offset order."""
    finders: dict[int, EventFinder] = {}

    def make(p: int) -> EventFinder:
        finders[p] = EventFinder(run_ids, engine_run_ids)
        return finders[p]

    if run_ids or engine_run_ids:
        if widen:
            s.read_widening(
                topic,
                range(max(partitions) + 1) if isinstance(partitions, set) else partitions,
                make,
                since,
                lambda: any(f.kept for f in finders.values()),
            )
        else:
            s.read(topic, partitions, make, since)
    return EventFinder(run_ids).merge(finders[p] for p in sorted(finders))


def _events_of(
    s: _Scanner,
    runs: RunsFound,
    states: Mapping[RunKey, Found],
    run_ids: frozenset[str],
    since: int | None,
    count: int,
) -> EventFinder:
    """The runs' events: in the partitions their event keys hash to when every run's state names its
    root job (the worker partitions by murmur2), else (or when that finds nothing: the topic grew
    since) in every partition."""
    topic = s.request.events_topic
    keys = [event_key(loads_state(f.value)) for r in runs.runs if (f := states.get(r.key)) and f.value]
    if runs.runs and len(keys) == len(runs.runs):
        narrowed = {events_partition(k, count) for k in keys}
        found = _read_events(s, topic, narrowed, run_ids, since)
        if found.kept or len(narrowed) == count:
            return found
    return _read_events(s, topic, range(count), run_ids, since)


def _read_states(s: _Scanner, runs: RunsFound, since: int | None, notes: list[str]) -> dict[RunKey, Found]:
    """The last changelog write of each run's state key, in the partitions that hold the runs' records."""
    topic = s.request.changelog_topic
    count = s.reader.partitions(topic)
    if count is None:
        notes.append(f"topic {topic} does not exist: is the worker's --app-id {s.request.app_id}?")
        return {}
    keys = frozenset(state_key_bytes(r.key) for r in runs.runs)
    homes = {r.home for r in runs.runs if r.home is not None and r.home < count} or set(range(count))
    finders: list[StateFinder] = []

    def make(p: int) -> StateFinder:
        finders.append(StateFinder(keys))
        return finders[-1]

    s.read(topic, homes, make, since)
    last: dict[RunKey, Found] = {}
    for f in finders:
        for key, found in f.last.items():
            p, _, eid = key.decode("utf-8", "replace").partition(":")
            last[(int(p), eid)] = found
    return last
