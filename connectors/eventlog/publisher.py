"""The producer side of the source connector: checks rows, publishes them, tracks deliveries.

Wire contract (the stream worker relies on it):
- records topic (default ``olstream.eventlog``): key = log partition id in ASCII decimal,
  value = the stored bytes unchanged (Avro single-object encoding), headers
  ``olstream.partition``, ``olstream.offset`` (ASCII decimal), ``olstream.type``
  (record name) and ``olstream.fingerprint`` (16 hex chars of the writer-schema fingerprint);
- errors topic (default ``<topic>.errors``): same key, the raw bytes, the same headers as far
  as they can be read, plus ``olstream.error`` with the reason.

A row counts as published only once its delivery report succeeded. Without
transactions, every error record is fenced by waiting for all acknowledgements
before and after it, so the records topic and the errors topic stay in log order
per partition and the resume position (the larger of the two tails) never skips
a row. With transactions both topics commit atomically instead.
"""

from __future__ import annotations

import io
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from fastavro.schema import parse_schema
from prometheus_client import Counter, Gauge

from connectors.eventlog import codec
from connectors.eventlog.resume import HEADER_OFFSET, HEADER_PARTITION, message_key
from connectors.eventlog.store import StoredRow
from olstream.errors import DeliveryError

log = logging.getLogger(__name__)

HEADER_TYPE = "olstream.type"
HEADER_FINGERPRINT = "olstream.fingerprint"
HEADER_ERROR = "olstream.error"

RECORDS_PUBLISHED = Counter(
    "olstream_source_records_published_total", "Log rows acknowledged by Kafka on the records topic."
)
ERRORS = Counter(
    "olstream_source_errors_total",
    "Rows sent to the errors topic (kind=decode) and gaps in a partition's offsets (kind=gap).",
    ["kind"],
)
PARTITION_LAG = Gauge(
    "olstream_source_partition_lag",
    "Log head minus the last published offset, per log partition.",
    ["partition"],
)
PUBLISHED_OFFSET = Gauge(
    "olstream_source_published_offset",
    "Last log offset acknowledged by Kafka, per log partition.",
    ["partition"],
)

Headers = list[tuple[str, str | bytes | None]]


def _without_logical_types(schema: Any) -> Any:
    """The schema with logicalType annotations dropped: same bytes, no datetime objects built."""
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(v) for v in schema]
    return schema


@dataclass(frozen=True, slots=True)
class _KnownSchema:
    record_name: bytes
    fingerprint_hex: bytes
    checker: Any


class RowChecker:
    """Decides whether a row's bytes decode, and builds its headers; cheap per row."""

    def __init__(self) -> None:
        self._schemas: dict[bytes, _KnownSchema] = {}
        for fp, ws in codec.known_writer_schemas().items():
            plain = parse_schema(_without_logical_types(ws.parsed))  # keeps fastavro's parsed hint
            self._schemas[fp] = _KnownSchema(ws.record_name.encode(), fp.hex().encode(), plain)

    def headers_for(self, row: StoredRow) -> Headers | str:
        """The message headers for a good row, or the reason the row does not decode."""
        data = row.payload
        if len(data) < codec.HEADER_LEN or data[:2] != codec.MAGIC:
            return "not Avro single-object encoding (bad magic or too short)"
        known = self._schemas.get(data[2 : codec.HEADER_LEN])
        if known is None:
            return f"unknown writer-schema fingerprint {data[2 : codec.HEADER_LEN].hex()}"
        buf = io.BytesIO(data)
        buf.seek(codec.HEADER_LEN)
        try:
            body = fastavro.schemaless_reader(buf, known.checker, None)
        except (EOFError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as e:
            return f"corrupt {known.record_name.decode()} body: {type(e).__name__}: {e}"
        if buf.tell() != len(data):
            return f"{len(data) - buf.tell()} trailing bytes after the {known.record_name.decode()} body"
        where = (body.get("partition"), body.get("offset")) if isinstance(body, dict) else None
        if where != (row.partition, row.offset):
            return f"record names position {where}, not its row's ({row.partition}, {row.offset})"
        return [
            (HEADER_PARTITION, str(row.partition).encode()),
            (HEADER_OFFSET, str(row.offset).encode()),
            (HEADER_TYPE, known.record_name),
            (HEADER_FINGERPRINT, known.fingerprint_hex),
        ]

    def error_headers(self, row: StoredRow, reason: str) -> Headers:
        """Headers of an errors-topic message: position, what can be read of the header, the reason."""
        headers: Headers = [
            (HEADER_PARTITION, str(row.partition).encode()),
            (HEADER_OFFSET, str(row.offset).encode()),
        ]
        data = row.payload
        if len(data) >= codec.HEADER_LEN and data[:2] == codec.MAGIC:
            known = self._schemas.get(data[2 : codec.HEADER_LEN])
            if known is not None:
                headers.append((HEADER_TYPE, known.record_name))
            headers.append((HEADER_FINGERPRINT, data[2 : codec.HEADER_LEN].hex().encode()))
        headers.append((HEADER_ERROR, reason.encode("utf-8", "replace")))
        return headers


def producer_config(bootstrap: str, *, transactional_id: str | None) -> dict[str, Any]:
    """librdkafka settings: idempotent, ordered, waiting for a lost broker instead of failing."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 200000,
    }
    if transactional_id is None:
        # Retry forever: a broker that goes away delays delivery, it never fails it.
        config["message.timeout.ms"] = 0
        config["enable.gapless.guarantee"] = True
    else:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = 60000
        config["message.timeout.ms"] = 60000
    return config


class Publisher:
    """Publishes rows to the records topic (or the errors topic) and tracks what Kafka acknowledged."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        errors_topic: str,
        *,
        transactional: bool,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._errors_topic = errors_topic
        self._transactional = transactional
        self._should_stop = should_stop
        self._checker = RowChecker()
        self._keys: dict[int, bytes] = {}
        self._inflight: dict[int, deque[int]] = {}
        self.acked: dict[int, int] = {}
        self.published = 0
        self.errors = 0
        self._failure: KafkaError | None = None

    @property
    def in_flight(self) -> int:
        """Messages handed to the producer and not yet acknowledged."""
        return len(self._producer)

    def set_acked(self, positions: dict[int, int]) -> None:
        """Mark positions as acknowledged (the start position, or a committed transaction's end)."""
        for partition, offset in positions.items():
            if offset > self.acked.get(partition, -1):
                self.acked[partition] = offset

    def publish(self, rows: Sequence[StoredRow]) -> int:
        """Hand rows to the producer in order; returns how many were handed over (fewer on stop)."""
        produce = self._producer.produce
        for i, row in enumerate(rows):
            headers = self._checker.headers_for(row)
            if isinstance(headers, str):
                self._publish_error(row, headers)
                continue
            key = self._keys.get(row.partition)
            if key is None:
                key = self._keys[row.partition] = message_key(row.partition)
                self._inflight[row.partition] = deque()
            while True:
                try:
                    produce(self._topic, row.payload, key, headers=headers, on_delivery=self._delivered)
                    break
                except BufferError:
                    self.poll(0.05)
                    if self._should_stop():
                        return i
            self._inflight[row.partition].append(row.offset)
        self.poll(0)
        return len(rows)

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self._failure is not None and not self._transactional:
            err = self._failure
            raise DeliveryError(f"Kafka rejected a record: {err}") from KafkaException(err)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for every acknowledgement (forever with None); returns how many are still in flight."""
        while len(self._producer) > 0:
            step = 1.0 if timeout is None else min(1.0, timeout)
            self._producer.flush(step)
            self.raise_if_failed()
            if timeout is not None:
                timeout -= step
                if timeout <= 0:
                    break
            elif len(self._producer) > 0:
                log.info("waiting for Kafka to acknowledge %d messages", len(self._producer))
        return len(self._producer)

    def forget_in_flight(self) -> None:
        """After an aborted transaction: nothing produced in it counts."""
        for pending in self._inflight.values():
            pending.clear()
        self._failure = None

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        partition = int(msg.key() or b"-1")
        pending = self._inflight.get(partition)
        offset = pending.popleft() if pending else -1
        if err is not None:
            if self._failure is None:
                self._failure = err
            return
        self.published += 1
        if not self._transactional:
            self.acked[partition] = offset

    def _publish_error(self, row: StoredRow, reason: str) -> None:
        log.warning(
            "log partition %d offset %d does not decode (%s): sent to %s",
            row.partition,
            row.offset,
            reason,
            self._errors_topic,
        )
        if not self._transactional:
            self.flush()  # everything before this row is in Kafka first
        failure: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failure.append(err)

        headers = self._checker.error_headers(row, reason)
        key = message_key(row.partition)
        while True:
            try:
                self._producer.produce(
                    self._errors_topic, row.payload, key, headers=headers, on_delivery=delivered
                )
                break
            except BufferError:
                self.poll(0.05)
        self.errors += 1
        ERRORS.labels(kind="decode").inc()
        if not self._transactional:
            self.flush()  # and this row is in Kafka before anything after it
            if failure:
                raise DeliveryError(
                    f"Kafka rejected the error record of partition {row.partition} offset {row.offset}: "
                    f"{failure[0]}"
                )
            self.acked[row.partition] = row.offset
