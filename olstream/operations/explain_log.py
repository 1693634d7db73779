"""`olstream explain --log URL`: the run's rows read from the event log itself, beside the records topic.

The store has no index by run id either. Only the log partitions of the runs found in Kafka are
read (for a workflow instance whose runs Kafka does not hold, its own log partition: the writer
puts every run of an instance in `partition_for(instance, partitions)`; else every partition), with
the same cheap filter as the records topic (`RunFinder`). A row that the log holds and the records
topic does not (the source is behind, or the row went to the source's errors topic) is listed
without a Kafka place.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from olstream.contract.records import RunStarted
from olstream.eventlog.store import EventLogStore, StoredRow
from olstream.eventlog.stores import open_existing_store
from olstream.operations.explain_match import RunFinder
from olstream.operations.explain_report import LogRecordView, RunView, StateView
from olstream.operations.explain_runs import record_time
from olstream.streams.framed_input import InputFraming

log = logging.getLogger(__name__)

READ_BATCH = 10_000


class _RowMessage:
    """A stored row in the shape of a Kafka message, for `RunFinder.offer`."""

    __slots__ = ("row",)

    def __init__(self, row: StoredRow) -> None:
        self.row = row

    def value(self) -> bytes:
        return self.row.payload

    def partition(self) -> int:
        return self.row.partition

    def offset(self) -> int:
        return self.row.offset

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)

    def headers(self) -> list[Any]:
        return []

    def key(self) -> None:
        return None


def read_runs(store: EventLogStore, partitions: Sequence[int], finder: RunFinder) -> int:
    """Every row of `partitions` offered to `finder`; returns the rows read."""
    read = 0
    for p in partitions:
        after = -1
        while True:
            rows = store.read(p, after, READ_BATCH)
            if not rows:
                break
            for row in rows:
                finder.offer(_RowMessage(row))
            read += len(rows)
            after = rows[-1].offset
    return read


def add_log_rows(
    url: str, views: Sequence[RunView], notes: list[str], framing: InputFraming
) -> list[RunView]:
    """`views` with the rows the event log holds of each run that the records topic lacks (the rows
    read as the records are: `framing`)."""
    store = open_existing_store(url)
    try:
        wanted = sorted({v.log_partition for v in views if v.log_partition in store.partitions()})
        engine_run_ids = frozenset(v.engine_run_id for v in views)
        finder = RunFinder(framing, engine_run_ids=engine_run_ids, max_runs=len(views) or 1)
        read = read_runs(store, wanted, finder)
        notes.append(f"read the event log: {len(wanted)} partitions, {read:,} rows")
        found = finder.found()
        return [_with_rows(v, found.get((v.log_partition, v.engine_run_id), [])) for v in views]
    finally:
        store.close()


def _with_rows(view: RunView, rows: Sequence[Any]) -> RunView:
    have = {(r.log_partition, r.log_offset) for r in view.records}
    extra = [
        LogRecordView(
            f.record.partition, f.record.offset, type(f.record).__name__, record_time(f.record), None, None
        )
        for f in rows
        if f.record is not None and (f.record.partition, f.record.offset) not in have
    ]
    if not extra:
        return view
    records = tuple(sorted((*view.records, *extra), key=lambda r: (r.log_partition, r.log_offset)))
    return replace(view, records=records)


def runs_only_in_log(
    url: str, subject: str, kind: str, max_runs: int, framing: InputFraming
) -> list[RunView]:
    """Runs of `subject` (engine run id or workflow instance) the event log holds, as views without a
    Kafka place: for a run the records topic does not hold. A workflow instance reads its own log
    partition; an engine run id every one."""
    from olstream.eventlog.writer import partition_for

    store = open_existing_store(url)
    try:
        partitions = store.partitions()
        if kind == "instance":
            partitions = [partition_for(subject, len(partitions))]
        finder = RunFinder(
            framing,
            engine_run_ids=frozenset({subject}) if kind in ("auto", "engine-run-id") else frozenset(),
            instance=subject if kind in ("auto", "instance") else None,
            max_runs=max_runs,
        )
        read_runs(store, partitions, finder)
    finally:
        store.close()
    views = []
    for (partition, engine_run_id), rows in finder.found().items():
        start = next((f.record for f in rows if isinstance(f.record, RunStarted)), None)
        view = RunView(
            engine_run_id,
            partition,
            None,
            None,
            start.workflow_instance if start else None,
            (),
            NOT_IN_KAFKA,
            (),
            (),
        )
        views.append(_with_rows(view, rows))
    return views[-max_runs:]


NOT_IN_KAFKA = StateView(
    "absent",
    "its rows are in the event log, not in the records topic: the source has not published them "
    "(is it running?), or sent them to its errors topic (olstream errors show)",
    None,
)
