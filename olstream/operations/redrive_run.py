"""One `olstream errors redrive`: the selected error records planned (`redrive`), the lineage and
the event log read where the plan needs them, the messages sent, and the lines that report it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from olstream.eventlog.store import StoredRow
from olstream.operations import redrive
from olstream.operations.error_records import ErrorRecord, read_topic
from olstream.operations.redrive import Kind, Plan
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_clients import Kafka

SOURCE_ERRORS_SUFFIX = ".errors"


@dataclass(frozen=True, slots=True)
class RedriveRequest:
    topic: str  # the error topic
    max_attempts: int
    to_topic: str | None  # instead of each record's own destination topic
    dry_run: bool
    log_url: str | None  # the event log source error rows are re-read from
    timeout: float


@dataclass(frozen=True, slots=True)
class RedriveReport:
    lines: tuple[str, ...]
    sent: int  # 0 when nothing could be re-driven, or a dry run
    returned: int = 0  # source rows that failed their check again, written back to their errors topic


def records_topic_of(errors_topic: str) -> str:
    """The source's records topic of its errors topic (`<topic>.errors`)."""
    if not errors_topic.endswith(SOURCE_ERRORS_SUFFIX):
        raise ConfigError(
            f"{errors_topic} does not end in {SOURCE_ERRORS_SUFFIX}: name the records topic with --to-topic"
        )
    return errors_topic.removesuffix(SOURCE_ERRORS_SUFFIX)


def _row_plan(kafka: Kafka, rows: Sequence[ErrorRecord], request: RedriveRequest) -> Plan:
    from olstream.connectors.source.resume import placement_of
    from olstream.connectors.source.rowcheck import RowChecker
    from olstream.eventlog.stores import open_existing_store

    if request.log_url is None:
        return Plan(skipped=[(r, "source row: give --log to re-read it from the event log") for r in rows])
    records_topic = request.to_topic or records_topic_of(request.topic)
    placement = placement_of(kafka, records_topic, timeout=request.timeout)
    store = open_existing_store(request.log_url)
    try:

        def read_row(partition: int, offset: int) -> StoredRow | None:
            if partition not in store.partitions():
                return None
            found = store.read(partition, offset - 1, 1)
            return found[0] if found and found[0].offset == offset else None

        return redrive.plan_rows(
            rows, read_row, RowChecker(), placement, records_topic, request.max_attempts
        )
    finally:
        store.close()


def run_redrive(kafka: Kafka, chosen: Sequence[ErrorRecord], request: RedriveRequest) -> RedriveReport:
    """Plan and (unless a dry run) send the re-drive of `chosen`; what to print."""
    rows = [r for r in chosen if redrive.kind_of(r) is Kind.SOURCE]
    others = [r for r in chosen if redrive.kind_of(r) is not Kind.SOURCE]
    the_plan = redrive.plan(others, request.max_attempts, request.to_topic)
    if rows:
        row_plan = _row_plan(kafka, rows, request)
        the_plan.sends[:0] = row_plan.sends
        the_plan.skipped.extend(row_plan.skipped)
        the_plan.failed_again.extend(row_plan.failed_again)
    wanted: dict[str, dict[int, int]] = {}
    for want in the_plan.terminals_wanted:
        starts = wanted.setdefault(want.origin.topic, {})
        after = want.origin.offset + 1
        starts[want.origin.partition] = min(starts.get(want.origin.partition, after), after)
    lineage = [e for name, starts in wanted.items() for e in read_topic(kafka, name, request.timeout, starts)]
    terminals = redrive.add_terminals(the_plan, lineage, request.to_topic)
    lines = [f"left {n:,}: {why}" for why, n in sorted(the_plan.skipped_by_reason().items())]
    verb = "would re-drive" if request.dry_run else "re-drove"
    if the_plan.failed_again:
        lines.append(
            f"{len(the_plan.failed_again):,} source rows still fail their check: "
            f"{'would go' if request.dry_run else 'sent'} back to {request.topic} with their attempt count"
        )
    if not the_plan.sends:
        if the_plan.failed_again and not request.dry_run:
            redrive.send(kafka, the_plan.failed_again, request.timeout)
            return RedriveReport(tuple(lines), 0, len(the_plan.failed_again))
        return RedriveReport(tuple(lines), 0)
    targets = Counter((s.topic, s.partition) for s in the_plan.sends)
    where = ", ".join(f"{t}[{p}] {n:,}" for (t, p), n in sorted(targets.items()))
    lines.append(
        f"{verb} {len(the_plan.sends) - terminals:,} of {len(chosen):,} selected records of {request.topic}"
        f" (and {terminals:,} runs' terminal events after them) to {where}"
    )
    if request.dry_run:
        return RedriveReport(tuple(lines), 0)
    redrive.send(kafka, [*the_plan.sends, *the_plan.failed_again], request.timeout)
    return RedriveReport(tuple(lines), len(the_plan.sends), len(the_plan.failed_again))
