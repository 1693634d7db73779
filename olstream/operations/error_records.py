"""`olstream errors list | show`: the pipeline's three error topics, summed up and read safely.

- `olstream.eventlog.errors` (source): rows it could not publish;
- `olstream.stream.errors` (worker): records it could not apply;
- `openlineage.events.dlq` (sink): events the receiver refused or kept failing.

Every record says why in the dead-letter headers (`olstream.shared.deadletter`). Reading never
joins, commits or moves a consumer group: the topic is assigned, read from its low watermarks to the
end offsets it had when the read started, and the client closed.

The summing up (`summarize`) and the rendering (`safe_text`, `describe`) are pure.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from olstream.contract import topics, wire
from olstream.shared import deadletter
from olstream.shared.errors import ConfigError
from olstream.shared.kafka_admin import topic_partitions
from olstream.shared.kafka_clients import Kafka, consumer_config
from olstream.shared.logs import redact

log = logging.getLogger(__name__)

ERROR_TOPICS = (topics.errors_topic_of(topics.EVENTLOG), topics.STREAM_ERRORS, topics.SINK_DLQ)
"""The three error topics, source to sink."""
NO_REASON = "(no reason header)"
PAYLOAD_SHOWN = 256
"""Bytes of a payload `show` prints (escaped); `--raw` writes it whole."""
HEADER_SHOWN = 1024
"""Bytes of a header value `show` prints (escaped)."""


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """One message of an error topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # the message's timestamp (produce time); 0 when it has none
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    key: bytes | None = None

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def reason(self) -> str:
        raw = self.header(deadletter.ERROR)
        return NO_REASON if raw is None else raw.decode("utf-8", "replace")

    @property
    def copy_cut(self) -> bool:
        """Its payload is a copy cut to `COPY_LIMIT` bytes (its size and digest are in headers)."""
        size = self.header(deadletter.SIZE)
        return size is not None and size.isdigit() and int(size) > len(self.value)

    @property
    def from_copy(self) -> bool:
        """Its payload is what failed, whole: it could be sent again from this copy. A cut copy, or a
        `too_large` record (whose payload may be the too-large event, not the input), cannot."""
        return not self.copy_cut and self.reason != deadletter.TOO_LARGE


@dataclass(frozen=True, slots=True)
class ReasonRow:
    """One reason of one error topic: how many records, when, and how many only the event log holds whole."""

    topic: str
    reason: str
    records: int
    first_ms: int
    last_ms: int
    not_from_copy: int


def summarize(records: Iterable[ErrorRecord]) -> list[ReasonRow]:
    """Reason x count x first and last time, per topic (sorted by topic, then by count, descending)."""
    rows: dict[tuple[str, str], list[int]] = {}
    for r in records:
        row = rows.setdefault((r.topic, r.reason), [0, r.timestamp_ms, r.timestamp_ms, 0])
        row[0] += 1
        row[1] = min(row[1], r.timestamp_ms)
        row[2] = max(row[2], r.timestamp_ms)
        row[3] += 0 if r.from_copy else 1
    out = [ReasonRow(t, reason, n, first, last, cut) for (t, reason), (n, first, last, cut) in rows.items()]
    return sorted(out, key=lambda row: (row.topic, -row.records, row.reason))


_ESCAPES = {0x0A: "\\n", 0x09: "\\t", 0x5C: "\\\\"}


def safe_text(data: bytes, limit: int) -> str:
    """Printable ASCII as is, everything else escaped (`\\n`, `\\xNN`), cut after `limit` bytes."""
    shown = data[:limit]
    text = "".join(
        chr(b)
        if 0x20 <= b < 0x7F and b != 0x5C
        else {0x0A: "\\n", 0x09: "\\t", 0x5C: "\\\\"}.get(b, f"\\x{b:02x}")
        for b in shown
    )
    if len(data) > limit:
        text += f"... ({len(data) - limit} more bytes)"
    return text


def format_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe(record: ErrorRecord) -> list[str]:
    """The lines `show` prints for one record: where and when, its headers, its payload (escaped)."""
    lines = [f"{record.topic}[{record.partition}]@{record.offset}  {format_ms(record.timestamp_ms)}"]
    log_partition, log_offset = record.header(wire.HEADER_PARTITION), record.header(wire.HEADER_OFFSET)
    if log_partition is not None and log_offset is not None:
        lines.append(
            f"  event log position: partition {log_partition.decode()}, offset {log_offset.decode()}"
        )
    for name, value in record.headers:
        shown = "(null)" if value is None else safe_text(value, HEADER_SHOWN)
        lines.append(f"  {name}: {redact(shown)}")
    state = "whole" if not record.copy_cut else f"cut to its first {len(record.value)} bytes"
    lines.append(
        f"  payload ({len(record.value)} bytes, {state}): {redact(safe_text(record.value, PAYLOAD_SHOWN))}"
    )
    if not record.from_copy:
        lines.append("  not re-drivable from this copy: re-read it from the event log at its position")
    return lines


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records `show` prints: all the given ones match."""

    reason: str | None = None
    partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None  # inclusive
    since_ms: int | None = None  # message timestamps (produce time), inclusive
    until_ms: int | None = None  # exclusive

    def matches(self, record: ErrorRecord) -> bool:
        return (
            (self.reason is None or record.reason == self.reason)
            and (self.partition is None or record.partition == self.partition)
            and (self.from_offset is None or record.offset >= self.from_offset)
            and (self.to_offset is None or record.offset <= self.to_offset)
            and (self.since_ms is None or record.timestamp_ms >= self.since_ms)
            and (self.until_ms is None or record.timestamp_ms < self.until_ms)
        )


def read_topic(
    kafka: Kafka, topic: str, timeout: float, from_offsets: Mapping[int, int] | None = None
) -> list[ErrorRecord]:
    """Every record of `topic` up to its end offsets when the read started (with `from_offsets`:
    only those partitions, from those offsets); a missing topic is `ConfigError`. No group is
    joined and nothing is committed."""
    from confluent_kafka import Consumer, TopicPartition

    from olstream.shared.topic_read import messages_to_end

    partitions = topic_partitions(kafka, topic, timeout)
    if partitions is None:
        raise ConfigError(f"topic {topic} does not exist")
    # a group id librdkafka asks for; never joined (assign) and never committed
    config = consumer_config(
        kafka,
        f"olstream-errors-read-{uuid.uuid4().hex[:8]}",
        {"enable.auto.commit": False, "enable.auto.offset.store": False, "isolation.level": "read_committed"},
    )
    consumer = Consumer(config)
    try:
        spans: dict[int, tuple[int, int]] = {}
        for p in range(partitions) if from_offsets is None else sorted(from_offsets):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout, cached=False)
            spans[p] = (low if from_offsets is None else max(low, from_offsets[p]), high)
        deadline = time.monotonic() + max(timeout, 10.0) * 6
        records: list[ErrorRecord] = []
        read = messages_to_end(consumer, topic, spans, batch=500, wait=1.0, deadline=deadline)
        for part, offset, msg in read:
            _, ts = msg.timestamp()
            value, headers = msg.value() or b"", _headers(msg.headers())
            records.append(ErrorRecord(topic, part, offset, max(ts, 0), value, headers, msg.key()))
        return records
    finally:
        consumer.close()


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    pairs: list[tuple[str, bytes | None]] = []
    for key, value in raw or ():
        pairs.append((key, value.encode() if isinstance(value, str) else value))
    return tuple(pairs)


def read_topics(
    kafka: Kafka, names: Sequence[str], timeout: float, missing: set[str] | None = None
) -> list[ErrorRecord]:
    """Every record of the topics `names`; a missing topic is `ConfigError`, or with `missing` is
    added to it and read as empty."""
    records: list[ErrorRecord] = []
    for name in names:
        if missing is not None and topic_partitions(kafka, name, timeout) is None:
            missing.add(name)
            continue
        records.extend(read_topic(kafka, name, timeout))
    return records
