"""The producer side of the source connector: checks rows, publishes them, tracks deliveries.

Wire contract (the stream worker relies on it):
- records topic (default ``olstream.eventlog``): key = log partition id in ASCII decimal, Kafka
  partition = the topic's recorded placement of that log partition (``contract.placement``),
  value = the stored bytes unchanged (Avro single-object encoding), headers
  ``olstream.partition``, ``olstream.offset`` (ASCII decimal), ``olstream.type``
  (record name) and ``olstream.fingerprint`` (16 hex chars of the writer-schema fingerprint);
- errors topic (default ``<topic>.errors``): same key, the raw bytes (cut to their first 64 KiB,
  with ``olstream.error.size`` and ``olstream.error.sha256``, when larger), the same headers as
  far as they can be read, plus ``olstream.error`` with the reason: the decode reason, or
  ``too_large`` for a row above ``--max-record-bytes`` (``olstream.error.detail`` says its size).

A row counts as published only once its delivery report succeeded. Without
transactions, every error record is fenced by waiting for all acknowledgements
before and after it, so the records topic and the errors topic stay in log order
per partition and the resume position (the larger of the two tails) never skips
a row. With transactions both topics commit atomically instead.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from prometheus_client import Counter, Gauge

from olstream.connectors.source.framing import RowFraming
from olstream.connectors.source.rowcheck import Headers, RowChecker
from olstream.contract import topics
from olstream.contract.placement import Placement
from olstream.contract.wire import (
    HEADER_HEADS,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_TYPE,
    ROW_REJECTED,
    message_key,
)
from olstream.eventlog.store import StoredRow
from olstream.shared import deadletter, kafka_clients
from olstream.shared.errors import DeliveryError
from olstream.shared.metrics import set_health
from olstream.shared.produce import ROOM_POLL_SECONDS, produce

log = logging.getLogger(__name__)

RECORDS_PUBLISHED = Counter(
    "olstream_source_records_published_total", "Log rows acknowledged by Kafka on the records topic."
)
ERRORS = Counter(
    "olstream_source_errors_total",
    "Rows sent to the errors topic (kind=decode: they do not decode; kind=too_large: above "
    "--max-record-bytes) and gaps in a partition's offsets (kind=gap).",
    ["kind"],
)
for _kind in ("decode", "too_large", "gap"):
    ERRORS.labels(kind=_kind)  # exported as 0 from the start
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


_RUN_STARTED = b"RunStarted"
PARTITION_BY_KEY = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses, by key
_TOO_LARGE = deadletter.TOO_LARGE  # the check's result for a row above the limit (compared by identity)


def producer_config(kafka: kafka_clients.Kafka, *, transactional_id: str | None) -> dict[str, Any]:
    """librdkafka settings: idempotent, ordered, waiting for a lost broker instead of failing."""
    config = kafka_clients.producer_config(
        kafka, {"linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 200000}
    )
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
        placement: Placement,
        should_stop: Callable[[], bool] = lambda: False,
        check_bodies: bool = True,
        offsets_topic: str | None = None,
        max_record_bytes: int = topics.MAX_MESSAGE_BYTES,
        reframe: RowFraming | None = None,
    ) -> None:
        self._producer = producer
        self._max_record_bytes = max_record_bytes
        # `confluent` wire format: each good row re-framed with its schema id; markers null values
        self._reframe = reframe
        self._marker_value: bytes | None = b"" if reframe is None else None
        self._topic = topic
        self._errors_topic = errors_topic
        self._transactional = transactional
        self._should_stop = should_stop
        self._checker = RowChecker(check_bodies=check_bodies)
        self._placement = placement
        self._keys: dict[int, bytes] = {}
        self._kafka_partitions: dict[int, int] = {}  # log partition -> its records-topic partition
        self._inflight: dict[int, deque[tuple[int, int]]] = {}  # (offset, rows it covers) awaiting reports
        self._fatal: KafkaError | None = None
        self._offsets_topic = offsets_topic
        self.produced: dict[int, int] = {}  # log partition -> last offset handed to the producer
        self._checkpointed: dict[int, int] = {}
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
        self.produced.update({p: o for p, o in positions.items() if o > self.produced.get(p, -1)})
        for partition, offset in positions.items():
            if offset > self.acked.get(partition, -1):
                self.acked[partition] = offset

    def publish(self, rows: Sequence[StoredRow], heads: bytes | None = None) -> int:
        """Hand rows to the producer in order; returns how many were handed over (fewer on stop).

        `heads` (`wire.encode_heads`), the log's heads read after these rows, goes on every
        RunStarted (`wire.HEADER_HEADS`): a worker resolves the run's parent from every log partition
        up to them. A row sent to the errors topic leaves a position marker in the records topic.

        Only the last message of a run of one log partition's good rows asks for a delivery
        report: the idempotent producer keeps a partition's messages in order and raises a fatal
        error rather than leave a gap (``enable.gapless.guarantee``), so its acknowledgement
        covers every message before it.
        """
        check = self._checker.headers_for
        produce_run = self._produce_run
        limit = self._max_record_bytes
        done = 0
        run: list[tuple[StoredRow, Headers]] = []  # consecutive good rows of one partition
        append = run.append
        for row in rows:
            headers = check(row) if len(row.payload) <= limit else _TOO_LARGE
            if isinstance(headers, str):  # a row that does not decode, or too large
                if run:
                    handed = produce_run(run)
                    done += handed
                    if handed < len(run):
                        return done  # stopped while Kafka applied back-pressure
                    run = []
                    append = run.append
                self._publish_error(row, headers)
                done += 1
                continue
            if heads is not None and headers[2][1] == _RUN_STARTED:
                headers.append((HEADER_HEADS, heads))
            if run and run[0][0].partition != row.partition:
                handed = produce_run(run)
                done += handed
                if handed < len(run):
                    return done
                run = []
                append = run.append
            append((row, headers) if self._reframe is None else (self._reframe.row(row), headers))
        if run:
            handed = produce_run(run)
            done += handed
            if handed < len(run):
                return done
        self.poll(0)
        return done

    def _produce_run(self, run: list[tuple[StoredRow, Headers]]) -> int:
        """Produce consecutive good rows of one partition; the last asks for a delivery report."""
        partition = run[0][0].partition
        key = self._keys.get(partition)
        if key is None:
            key = self._keys[partition] = message_key(partition)
            self._kafka_partitions[partition] = self._placement.kafka_partition(partition)
            self._inflight[partition] = deque()
        kp = self._kafka_partitions[partition]
        producer, topic, wait = self._producer, self._topic, self._wait_for_room
        send = producer.produce  # the hot path calls librdkafka directly; a full queue goes to `produce`
        last = len(run) - 1
        for i in range(last):
            row, headers = run[i]
            try:
                send(topic, row.payload, key, kp, headers=headers)
            except BufferError:
                if not produce(producer, topic, key, row.payload, headers, kp, wait=wait):
                    if i:
                        self.produced[partition] = run[i - 1][0].offset
                    return i  # the rows handed over are flushed, just not counted as acked
        row, headers = run[last]
        if not produce(producer, topic, key, row.payload, headers, kp, self._delivered, wait=wait):
            if last:
                self.produced[partition] = run[last - 1][0].offset
            return last
        self._inflight[partition].append((row.offset, len(run)))
        self.produced[partition] = row.offset
        return len(run)

    def _wait_for_room(self) -> bool:
        """Serve delivery reports while librdkafka's queue is full (Kafka slow or away); False when
        asked to stop."""
        set_health(False, "waiting for Kafka: the producer queue is full")
        self.poll(ROOM_POLL_SECONDS)
        if self._should_stop():
            return False
        set_health(True, "publishing")
        return True

    def checkpoint(self, positions: dict[int, int]) -> None:
        """Record positions in the compacted offsets topic (key = log partition, value = offset).

        Only a lower bound for the resume scan, for log partitions whose last message the
        records topic's retention already deleted; with transactions it commits with the records.
        """
        if self._offsets_topic is None:
            return
        for partition, offset in positions.items():
            if offset < 0 or self._checkpointed.get(partition) == offset:
                continue
            key, value = message_key(partition), str(offset).encode()
            headers: Headers = [(HEADER_PARTITION, key), (HEADER_OFFSET, value)]
            produce(self._producer, self._offsets_topic, key, value, headers, wait=self._poll_for_room)
            self._checkpointed[partition] = offset

    def forget_checkpoints(self) -> None:
        """After an aborted transaction its checkpoints are gone: write them again next time."""
        self._checkpointed.clear()

    def on_kafka_error(self, err: KafkaError) -> None:
        """The producer's error_cb: fatal errors stop publishing; others are only logged."""
        if err.fatal():
            self._fatal = err
        else:
            log.warning("Kafka: %s", err)

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)
        self.raise_if_failed()

    def _poll_for_room(self) -> bool:
        """Serve delivery reports while librdkafka's queue is full; a failure seen meanwhile raises."""
        self.poll(ROOM_POLL_SECONDS)
        return True

    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            err = self._fatal
            raise DeliveryError(f"the Kafka producer failed: {err}") from KafkaException(err)
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
        offset, rows = pending.popleft() if pending else (-1, 0)
        if err is not None:
            if self._failure is None:
                self._failure = err
            return
        self.published += rows
        if not self._transactional:
            self.acked[partition] = offset

    def _publish_error(self, row: StoredRow, reason: str) -> None:
        size = len(row.payload)
        too_large = reason is _TOO_LARGE
        if too_large:
            log.warning(
                "log partition %d offset %d: its row is %d bytes, above --max-record-bytes %d: sent to %s "
                "(its first %d bytes and digest)",
                row.partition,
                row.offset,
                size,
                self._max_record_bytes,
                self._errors_topic,
                deadletter.COPY_LIMIT,
            )
        else:
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
        copy, whole = deadletter.bounded_copy(row.payload, always=too_large)
        headers.extend(whole)
        if too_large:
            headers.append(
                (deadletter.ERROR_DETAIL, f"row of {size} bytes, above the limit {self._max_record_bytes}")
            )
        key = message_key(row.partition)
        # the position marker first, in the records topic: its readers see every position of the log
        # partition, this one as rejected (`wire.ROW_REJECTED`), even when no row follows it
        marker: Headers = [
            (HEADER_PARTITION, str(row.partition).encode()),
            (HEADER_OFFSET, str(row.offset).encode()),
            (HEADER_TYPE, ROW_REJECTED),
        ]
        # the marker where the log partition's records go (its placement); the copy by key
        for topic, value, message_headers, kafka_partition in (
            (self._topic, self._marker_value, marker, self._placement.kafka_partition(row.partition)),
            (self._errors_topic, copy, headers, PARTITION_BY_KEY),
        ):
            produce(
                self._producer,
                topic,
                key,
                value,
                message_headers,
                kafka_partition,
                delivered,
                wait=self._poll_for_room,
            )
        self.errors += 1
        self.produced[row.partition] = row.offset
        ERRORS.labels(kind=deadletter.TOO_LARGE if too_large else "decode").inc()
        if not self._transactional:
            self.flush()  # and this row is in Kafka before anything after it
            if failure:
                raise DeliveryError(
                    f"Kafka rejected the error record of partition {row.partition} offset {row.offset}: "
                    f"{failure[0]}"
                )
            self.acked[row.partition] = row.offset
