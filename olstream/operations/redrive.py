"""`olstream errors redrive`: error records sent through the pipeline again, after a fix.

What a record is, and where it goes, is read from its headers (`olstream.shared.deadletter`):

- a **sink DLQ** record (`olstream.status`): the event goes back to the lineage topic partition it
  came from (`olstream.source.*`), where the live sink delivers it with its own retries, per-run
  order and dead-letter rules. A run's last event in the receiver stays its terminal one: when the
  last re-driven event of a run is not terminal, the run's terminal event that followed it in the
  lineage topic is sent again after it.
- a **worker** error record (`olstream.error.detail`, no status): the record goes back to the input
  topic partition it came from, keeping its key and its log position headers. The worker processes
  a record that carries `olstream.redrive.attempt` as new: past its log partition's mark (which
  covers the refused position), moving no mark (`streams/runtime/mark_judge.py`).
- a **source** error row (neither): its row is re-read from the event log at its position and
  checked as the source checks it (`plan_rows`): a row that passes now (a newer olstream knows its
  writer schema, say) goes to the records topic where its placement puts it, as the source sends it
  (without heads); the worker takes it past its mark like a worker record. One that fails again
  goes back to the source's errors topic, counted.

Every re-driven message carries `olstream.redrive.attempt` (its previous count + 1) and
`olstream.redriven.from`; the worker and the sink copy them when it fails again, so a record stops
at `--max-attempts` instead of going round. A cut copy (64 KiB) or a `too_large` record is not
re-driven from its copy. Planning (`plan`) is pure; `send` produces.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from olstream.connectors.source.rowcheck import RowChecker
from olstream.contract import wire
from olstream.contract.placement import Placement
from olstream.eventlog.store import StoredRow
from olstream.operations.error_records import ErrorRecord
from olstream.shared import deadletter
from olstream.shared.errors import InfrastructureError
from olstream.shared.kafka_clients import Kafka, producer_config

log = logging.getLogger(__name__)

TERMINAL_EVENT_TYPES = frozenset({"COMPLETE", "FAIL", "ABORT"})
DEFAULT_MAX_ATTEMPTS = 3


class Kind(Enum):
    SINK = "sink DLQ"
    WORKER = "worker errors"
    SOURCE = "source errors"


def kind_of(record: ErrorRecord) -> Kind:
    if record.header(deadletter.HTTP_STATUS) is not None:
        return Kind.SINK
    if record.header(deadletter.SOURCE_TOPIC) is not None:
        return Kind.WORKER
    return Kind.SOURCE


@dataclass(frozen=True, slots=True)
class Resend:
    """One message to produce: a re-driven record, or a run's terminal event sent after it."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    origin: str  # the error record (`topic[p]@o`), or the lineage event a terminal was taken from
    terminal_repeat: bool = False


@dataclass(frozen=True, slots=True)
class Origin:
    topic: str
    partition: int
    offset: int


def origin_of(record: ErrorRecord) -> Origin | None:
    topic = record.header(deadletter.SOURCE_TOPIC)
    partition = record.header(deadletter.SOURCE_PARTITION)
    offset = record.header(deadletter.SOURCE_OFFSET)
    if topic is None or partition is None or offset is None:
        return None
    if not partition.isdigit() or not offset.isdigit():
        return None
    return Origin(topic.decode("utf-8", "replace"), int(partition), int(offset))


def skip_reason(record: ErrorRecord, max_attempts: int) -> str | None:
    """Why `record` is not re-driven, or None."""
    kind = kind_of(record)
    if kind is Kind.SOURCE:
        return "source row: re-read from the event log (--log)"
    if record.copy_cut:
        return "copy cut to 64 KiB: re-read it from the event log at its position"
    if record.reason == deadletter.TOO_LARGE:
        return "too_large: re-read it from the event log at its position"
    if origin_of(record) is None:
        return "no olstream.source.* headers: where it came from is unknown"
    if deadletter.redrive_attempt(record.header(deadletter.REDRIVE_ATTEMPT)) >= max_attempts:
        return f"re-driven {max_attempts} times already (--max-attempts)"
    return None


def event_doc(value: bytes) -> dict[str, object] | None:
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def run_and_type(value: bytes) -> tuple[str | None, str | None]:
    doc = event_doc(value)
    if doc is None:
        return None, None
    run = doc.get("run")
    run_id = run.get("runId") if isinstance(run, dict) else None
    event_type = doc.get("eventType")
    return (
        run_id if isinstance(run_id, str) else None,
        event_type if isinstance(event_type, str) else None,
    )


def _redrive_headers(record: ErrorRecord) -> tuple[tuple[str, bytes], ...]:
    attempt = deadletter.redrive_attempt(record.header(deadletter.REDRIVE_ATTEMPT)) + 1
    where = f"{record.topic}[{record.partition}]@{record.offset}"
    return ((deadletter.REDRIVE_ATTEMPT, str(attempt).encode()), (deadletter.REDRIVEN_FROM, where.encode()))


@dataclass(frozen=True, slots=True)
class TerminalWanted:
    """A run whose last re-driven event is not terminal: its terminal event after `after` is wanted."""

    run_id: str
    origin: Origin  # the last re-driven event's place in the lineage topic
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Plan:
    """What a redrive sends, in order, and what it leaves, with why."""

    sends: list[Resend] = field(default_factory=list)
    skipped: list[tuple[ErrorRecord, str]] = field(default_factory=list)
    failed_again: list[Resend] = field(default_factory=list)  # source rows failing again: their errors topic
    terminals_wanted: list[TerminalWanted] = field(default_factory=list)

    def skipped_by_reason(self) -> Counter[str]:
        return Counter(why for _, why in self.skipped)


def plan(records: Iterable[ErrorRecord], max_attempts: int, to_topic: str | None = None) -> Plan:
    """The messages re-driving `records` send, each to the topic partition its record came from
    (`to_topic` instead of the topic, same partition), in the order they were there."""
    out = Plan()
    chosen: list[tuple[Origin, ErrorRecord]] = []
    for record in records:
        why = skip_reason(record, max_attempts)
        origin = origin_of(record)
        if why is not None or origin is None:
            out.skipped.append((record, why or "no origin"))
            continue
        chosen.append((origin, record))
    chosen.sort(key=lambda pair: (pair[0].topic, pair[0].partition, pair[0].offset))
    last_of_run: dict[str, tuple[Origin, str | None, tuple[tuple[str, bytes], ...]]] = {}
    for origin, record in chosen:
        headers = _redrive_headers(record)
        if kind_of(record) is Kind.WORKER:
            kept = tuple(
                (name, raw)
                for name in wire.RECORD_HEADERS
                if (raw := record.header(name)) is not None
            )
            headers = (*kept, *headers)
        else:
            run_id, event_type = run_and_type(record.value)
            if run_id is not None:
                last_of_run[run_id] = (origin, event_type, headers)
        out.sends.append(
            Resend(
                to_topic or origin.topic,
                origin.partition,
                record.key,
                record.value,
                headers,
                f"{record.topic}[{record.partition}]@{record.offset}",
            )
        )
    for run_id, (origin, event_type, headers) in sorted(last_of_run.items()):
        if event_type not in TERMINAL_EVENT_TYPES:
            out.terminals_wanted.append(TerminalWanted(run_id, origin, headers))
    return out


def add_terminals(p: Plan, lineage: Sequence[ErrorRecord], to_topic: str | None = None) -> int:
    """Append, after the re-driven events, each wanted run's latest terminal event found in
    `lineage` (records read from the lineage topic after the run's last re-driven event); how many.
    A run with none (still open, or its terminal event gone with retention) gets none."""
    added = 0
    for want in p.terminals_wanted:
        found: ErrorRecord | None = None
        for event in lineage:
            if event.topic != want.origin.topic or event.partition != want.origin.partition:
                continue
            if event.offset <= want.origin.offset:
                continue
            run_id, event_type = run_and_type(event.value)
            if run_id == want.run_id and event_type in TERMINAL_EVENT_TYPES:
                found = event  # the latest wins
        if found is None:
            continue
        event_headers = tuple(
            (name, raw) for name in wire.EVENT_HEADERS if (raw := found.header(name)) is not None
        )
        p.sends.append(
            Resend(
                to_topic or found.topic,
                found.partition,
                found.key,
                found.value,
                (*event_headers, *want.headers),
                f"{found.topic}[{found.partition}]@{found.offset}",
                terminal_repeat=True,
            )
        )
        added += 1
    return added


def source_position(record: ErrorRecord) -> tuple[int, int] | None:
    """The event log position a source error record names (its record headers)."""
    partition, offset = record.header(wire.HEADER_PARTITION), record.header(wire.HEADER_OFFSET)
    if partition is None or offset is None or not partition.isdigit() or not offset.isdigit():
        return None
    return int(partition), int(offset)


def plan_rows(
    records: Iterable[ErrorRecord],
    read_row: Callable[[int, int], StoredRow | None],
    checker: RowChecker,
    placement: Placement,
    records_topic: str,
    max_attempts: int,
) -> Plan:
    """Source error rows re-read from the event log at their positions and checked as the source
    checks them: a row that passes now goes to the records topic, where the placement puts its log
    partition, keyed and with headers as the source sends it; one that fails again goes back to its
    errors topic with its attempt count. Positions in log order."""
    out = Plan()
    chosen: list[tuple[tuple[int, int], ErrorRecord]] = []
    for record in records:
        position = source_position(record)
        attempt = deadletter.redrive_attempt(record.header(deadletter.REDRIVE_ATTEMPT))
        if position is None:
            out.skipped.append((record, "source row without its event log position"))
        elif attempt >= max_attempts:
            out.skipped.append((record, f"re-driven {max_attempts} times already (--max-attempts)"))
        else:
            chosen.append((position, record))
    for (partition, offset), record in sorted(chosen, key=lambda pair: pair[0]):
        row = read_row(partition, offset)
        if row is None:
            out.skipped.append((record, "its row is not in the event log (gone, or another log)"))
            continue
        redriven = _redrive_headers(record)
        checked = checker.headers_for(row)
        if isinstance(checked, str):
            copy, whole = deadletter.bounded_copy(row.payload)
            headers = [*checker.error_headers(row, checked), *whole]
            out.failed_again.append(
                Resend(
                    record.topic,
                    record.partition,
                    wire.message_key(partition),
                    copy,
                    (*_bytes_headers(headers), *redriven),
                    f"{record.topic}[{record.partition}]@{record.offset}",
                )
            )
            continue
        out.sends.append(
            Resend(
                records_topic,
                placement.kafka_partition(partition),
                wire.message_key(partition),
                row.payload,
                (*_bytes_headers(checked), *redriven),
                f"{record.topic}[{record.partition}]@{record.offset}",
            )
        )
    return out


def _bytes_headers(headers: Iterable[tuple[str, str | bytes | None]]) -> tuple[tuple[str, bytes], ...]:
    return tuple(
        (name, value.encode() if isinstance(value, str) else value)
        for name, value in headers
        if value is not None
    )


def send(kafka: Kafka, sends: Sequence[Resend], timeout: float) -> None:
    """Produce `sends` in order (the idempotent producer keeps each partition's order); an
    InfrastructureError unless all were written."""
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer(producer_config(kafka))
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    for s in sends:
        producer.produce(
            s.topic, s.value, s.key, partition=s.partition, headers=list(s.headers), on_delivery=delivered
        )
        producer.poll(0)
    left = producer.flush(max(timeout, 10.0) * 3)
    if left or failed:
        raise InfrastructureError(
            f"redrive: {left} messages not written in time, {len(failed)} failed"
            + (f" (first: {failed[0]})" if failed else "")
        )
    log.info("re-drove %d messages", len(sends))
