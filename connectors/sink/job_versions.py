"""Each job at its latest run's version, in a receiver that takes the last terminal event it gets.

Marquez links a job's current version (its inputs, outputs and lineage edges) on every terminal
event it *receives* (COMPLETE, FAIL, ABORT), whatever its `eventTime`. The sink posts events of
different runs concurrently, so an older run's terminal event can be applied after a newer one's.
`LatestTerminals` notices when that may have happened and hands back a repeat of the job's latest
terminal event: the same bytes once more, which receivers collapse, and which is then the last one
the receiver applies. Free of I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime

from olstream.connectors.sink.delivery import JobKey, PendingEvent, Terminal
from olstream.contract import wire

TERMINAL_EVENT_TYPES = frozenset({"COMPLETE", "FAIL", "ABORT"})


def _text(header: bytes | None, encoding: str) -> str | None:
    if header is None:
        return None
    try:
        return header.decode(encoding)
    except UnicodeDecodeError:
        return None


def _rank(event_time: object, run_id: str | None) -> tuple[datetime, str] | None:
    if not isinstance(event_time, str) or run_id is None:
        return None
    try:
        when = datetime.fromisoformat(event_time)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # not an instant (the spec requires an offset)
    return when, run_id


def terminal_of(
    run_id: str | None,
    event_type: bytes | None,
    event_time: bytes | None,
    job_namespace: bytes | None,
    job_name: bytes | None,
    value: bytes,
) -> Terminal | None:
    """The event's `Terminal` when it is a COMPLETE, FAIL or ABORT, else None.

    From the worker's headers (`olstream.event_type`, `.event_time`, `.job_namespace`, `.job_name`)
    when all are there, else from the event's JSON.
    """
    kind, time_text = _text(event_type, "ascii"), _text(event_time, "ascii")
    namespace, name = _text(job_namespace, "utf-8"), _text(job_name, "utf-8")
    if kind is not None and time_text is not None and namespace is not None and name is not None:
        if kind not in TERMINAL_EVENT_TYPES:
            return None
        rank = _rank(time_text, run_id)
        return None if rank is None else Terminal((namespace, name), rank)
    try:
        doc = json.loads(value)
        kind_value, job = doc.get("eventType"), doc["job"]
        job_key = (job["namespace"], job["name"])
        rank = _rank(doc.get("eventTime"), run_id)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if kind_value not in TERMINAL_EVENT_TYPES or rank is None:
        return None
    if not all(isinstance(part, str) for part in job_key):
        return None
    return Terminal(job_key, rank)


def terminal_of_message(run_id: str | None, headers: object, value: bytes) -> Terminal | None:
    """`terminal_of` a consumed message, from its headers (`wire.header_value`) and value."""
    return terminal_of(
        run_id,
        wire.header_value(headers, wire.HEADER_EVENT_TYPE),
        wire.header_value(headers, wire.HEADER_EVENT_TIME),
        wire.header_value(headers, wire.HEADER_JOB_NAMESPACE),
        wire.header_value(headers, wire.HEADER_JOB_NAME),
        value,
    )


@dataclass
class _JobTerminals:
    in_flight: int = 0  # terminal events of the job being sent now
    latest: PendingEvent | None = None  # the latest terminal event delivered
    unsure: bool = False  # the receiver may have applied another terminal event after `latest`


@dataclass
class LatestTerminals:
    """Keeps each job at its latest run's version in a receiver that takes the last terminal event.

    Marquez links a job's current version on every terminal event it *receives*. The sink posts
    events of different runs concurrently, so an older run's terminal event can be applied after a
    newer one's. Per job this remembers the latest terminal event delivered. The receiver may have
    applied another terminal event of the job after it when:

    - an older one is delivered (or fails: a timeout may still be applied) after it, or
    - two terminal events of the job were in flight at once (their order at the receiver is unknown).

    Then, once none of the job's terminal events is in flight, `settled` hands back a repeat of the
    latest one: the same bytes, posted once more, which is then the last one the receiver applies.
    """

    enabled: bool = True  # for HTTP receivers; a file or the console gets no repeats
    jobs: dict[JobKey, _JobTerminals] = field(default_factory=dict)
    repeats: int = 0  # repeats handed out

    def sending(self, event: PendingEvent) -> None:
        if event.terminal is None or not self.enabled:
            return
        job = self.jobs.get(event.terminal.job)
        if job is None:
            job = self.jobs[event.terminal.job] = _JobTerminals()
        if job.in_flight:
            job.unsure = True
        job.in_flight += 1

    def settled(self, event: PendingEvent, delivered: bool) -> PendingEvent | None:
        """Register the answer to a send of `event`; return a repeat to post now, if one is due."""
        terminal = event.terminal
        if terminal is None or not self.enabled:
            return None
        job = self.jobs.get(terminal.job)
        if job is None or job.in_flight == 0:
            return None
        job.in_flight -= 1
        latest = None if job.latest is None else job.latest.terminal
        if latest is not None and terminal.rank < latest.rank:
            job.unsure = True  # an older run's terminal event may be the last one applied
        elif delivered and (latest is None or terminal.rank > latest.rank):
            job.latest = replace(event, repeat=False)
        if job.in_flight or not job.unsure or job.latest is None:
            return None
        job.unsure = False
        self.repeats += 1
        return replace(job.latest, repeat=True)

    def is_latest(self, event: PendingEvent) -> bool:
        """Whether `event` is still its job's latest terminal event delivered."""
        job = None if event.terminal is None else self.jobs.get(event.terminal.job)
        return job is not None and job.latest is not None and job.latest.ident == event.ident

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Partitions revoked: their latest events are the new owner's to deliver (and repeat)."""
        for job in self.jobs.values():
            if job.latest is not None and (job.latest.topic, job.latest.partition) in partitions:
                job.latest, job.unsure = None, False
