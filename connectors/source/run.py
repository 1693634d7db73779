"""Runs the source connector: start-up checks, the resume scan, then the read-publish loop.

Start-up: open the log, wait up to the connect timeout for a broker, create the topics if
missing, start the (transactional) producer, read the resume position back from Kafka. The
loop then reads every partition, publishes, commits (with --exactly-once), keeps metrics, and
stops when idle (--until-idle) or asked to, after a flush.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Producer

from olstream.connectors.source.framing import RowFraming, register_schemas
from olstream.connectors.source.publisher import (
    ERRORS,
    PARTITION_LAG,
    PUBLISHED_OFFSET,
    RECORDS_PUBLISHED,
    Publisher,
)
from olstream.connectors.source.publisher import producer_config as build_producer_config
from olstream.connectors.source.resume import read_resume_positions
from olstream.connectors.source.tailer import Gap, LogTailer
from olstream.contract import topics, wire
from olstream.contract.placement import Placement
from olstream.eventlog.store import EventLogStore
from olstream.eventlog.stores import open_store
from olstream.shared.errors import ConfigError, DeliveryError, ExitCode, InfrastructureError
from olstream.shared.idle import QuietPeriod
from olstream.shared.kafka_admin import check_connection, ensure_topic, fit_limit
from olstream.shared.kafka_clients import LIBRDKAFKA_LOG
from olstream.shared.metrics import set_health
from olstream.shared.schema_registry import SchemaRegistry

if TYPE_CHECKING:
    from olstream.connectors.source.settings import SourceSettings

log = logging.getLogger(__name__)


def _not_the_gapless_warning(record: logging.LogRecord) -> bool:
    """librdkafka warns that enable.gapless.guarantee is experimental at every start: we chose it."""
    return not ("CONFWARN" in record.getMessage() and "gapless" in record.getMessage())


LIBRDKAFKA_LOG.addFilter(_not_the_gapless_warning)

STORE_ERRORS = (sqlite3.Error, psycopg.Error, OSError)  # what a store raises when its database fails
CHECKPOINT_INTERVAL = 5.0  # s between checkpoints to the offsets topic without transactions


def check_broker(settings: SourceSettings) -> None:
    """Fail with InfrastructureError when no broker answers within the connect timeout."""
    check_connection(settings.connection, timeout=settings.connect_timeout)


def run_source(settings: SourceSettings, stop: threading.Event) -> int:
    """Publish the log until idle (with --until-idle) or until `stop` is set; returns the exit code."""
    try:
        store = open_store(settings.log_url)
    except (ValueError, *STORE_ERRORS) as e:
        raise ConfigError(f"cannot open the event log: {e}") from e
    try:
        check_broker(settings)
        framing = _registered(settings)  # before anything is published: a refused schema stops here
        sized = topics.size_config(settings.max_record_bytes)
        partitions = settings.partitions or max(1, len(store.partitions()))  # default: the log's count
        for topic in (settings.topic, settings.errors_topic):
            ensure_topic(
                settings.connection,
                topic,
                partitions,
                config=sized,
                timeout=settings.connect_timeout,
                replication=settings.replication,
            )
        ensure_topic(
            settings.connection,
            settings.offsets_topic,
            1,
            config={"cleanup.policy": "compact"},
            timeout=settings.connect_timeout,
            replication=settings.replication,
        )
        transactional_id = settings.transactional_id if settings.exactly_once else None
        config: dict[str, Any] = build_producer_config(settings.connection, transactional_id=transactional_id)
        config.update(topics.producer_size_config(settings.max_record_bytes))
        fitted = fit_limit(
            settings.connection,
            settings.topic,
            settings.max_record_bytes,
            topics.MESSAGE_HEADROOM_BYTES,
            "--max-record-bytes",
        )
        settings = replace(settings, max_record_bytes=fitted)
        errors = _ErrorForwarder()
        config["error_cb"] = errors
        producer = Producer(config)
        if transactional_id is not None:
            try:
                producer.init_transactions(max(settings.connect_timeout, 30.0))  # fences the previous one
            except KafkaException as e:
                raise InfrastructureError(f"cannot start the transactional producer: {e}") from e
        heads = store.heads()
        wanted = [p for p, head in heads.items() if head >= 0]
        resume = read_resume_positions(
            settings.connection,
            settings.topic,
            settings.errors_topic,
            settings.offsets_topic,
            wanted,
            # always: records of aborted transactions (an earlier --exactly-once run) never count
            read_committed=True,
            timeout=max(settings.connect_timeout, 30.0),
        )
        start = resume.positions
        for partition, offset in start.items():
            if offset > heads.get(partition, -1):
                log.warning(
                    "Kafka already holds log partition %d up to offset %d, beyond the log's head %d: "
                    "is this the log that was published to %s?",
                    partition,
                    offset,
                    heads.get(partition, -1),
                    settings.topic,
                )
        log.info("resuming after %s", {p: start.get(p, -1) for p in store.partitions()})
        loop = _SourceLoop(settings, store, producer, start, stop, resume.placement, framing)
        errors.target = loop.publisher.on_kafka_error
        return loop.run()
    finally:
        store.close()


def _registered(settings: SourceSettings) -> RowFraming | None:
    """With --schema-registry: the schemas registered (SchemaRefused names a refused one) and, for
    `--wire-format confluent`, the re-framing by their ids."""
    if settings.schema_registry is None:
        return None
    registry = SchemaRegistry(settings.schema_registry)
    return register_schemas(registry, settings.topic, settings.schema_compatibility, settings.wire_format)


class _ErrorForwarder:
    """The producer's error_cb, handed on to the publisher once it exists."""

    def __init__(self) -> None:
        self.target: Callable[[KafkaError], None] | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.target is not None:
            self.target(err)
        elif err.fatal():
            raise DeliveryError(f"the Kafka producer failed: {err}")
        else:
            log.warning("Kafka: %s", err)


class _SourceLoop:
    def __init__(
        self,
        settings: SourceSettings,
        store: EventLogStore,
        producer: Producer,
        start: dict[int, int],
        stop: threading.Event,
        placement: Placement,
        framing: RowFraming | None = None,
    ) -> None:
        self._s = settings
        self._store = store
        self._producer = producer
        self._stop = stop
        self.publisher = Publisher(
            producer,
            settings.topic,
            settings.errors_topic,
            transactional=settings.exactly_once,
            placement=placement,
            should_stop=stop.is_set,
            check_bodies=settings.check_bodies,
            offsets_topic=settings.offsets_topic,
            max_record_bytes=settings.max_record_bytes,
            reframe=framing,
        )
        self.publisher.set_acked(start)
        self._tailer = LogTailer(store, start, settings.tailer, on_gap=self._gap)
        self._committed = dict(start)
        self._in_txn = False
        self._txn_started = 0.0
        self._counted = 0

    @staticmethod
    def _gap(_gap: Gap) -> None:
        ERRORS.labels(kind="gap").inc()

    def run(self) -> int:
        s = self._s
        quiet = QuietPeriod(s.idle_seconds, time.monotonic())
        next_metrics = 0.0
        next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL
        busy_since: float | None = None  # first rows read
        caught_up_at: float | None = None  # everything read so far acknowledged
        failed = False
        set_health(True, "publishing")
        while not self._stop.is_set():
            try:
                rows = self._tailer.read_batch()
            except STORE_ERRORS as e:
                log.error("reading the event log failed (%s: %s): flushing and stopping", type(e).__name__, e)
                failed = True
                break
            now = time.monotonic()
            if rows:
                quiet.note_activity(now)
                busy_since = now if busy_since is None else busy_since
                caught_up_at = None
                if s.exactly_once and not self._in_txn:
                    self._begin()
                    self._in_txn, self._txn_started = True, now
                # read after the rows: every row appended before one of them is at or below these heads
                heads = wire.encode_heads(self._store.heads())
                if self.publisher.publish(rows, heads) < len(rows):
                    break  # stopped while Kafka applied back-pressure
                if self._in_txn and now - self._txn_started >= s.transaction_interval:
                    self._commit()
            else:
                if self._in_txn and not self._commit():
                    # aborted: its rows are read again before anything may count as idle
                    quiet.note_activity(time.monotonic())
                    continue
                self.publisher.poll(0)
                if caught_up_at is None and self.publisher.in_flight == 0:
                    caught_up_at = time.monotonic()
                idle = not self._tailer.holding_gap and self.publisher.in_flight == 0 and quiet.over(now)
                if s.until_idle and idle:
                    log.info("caught up and idle for %.1f s: done", s.idle_seconds)
                    break
                try:
                    self._tailer.wait()
                except STORE_ERRORS as e:
                    log.error("waiting on the event log failed (%s: %s): stopping", type(e).__name__, e)
                    failed = True
                    break
            if now >= next_metrics:
                next_metrics = now + 1.0
                self._update_metrics()
            if not s.exactly_once and now >= next_checkpoint:
                next_checkpoint = now + CHECKPOINT_INTERVAL
                self.publisher.checkpoint(self.publisher.acked)
        self._finish()
        self._update_metrics()
        if busy_since is not None:
            busy = (caught_up_at or time.monotonic()) - busy_since
            count = self.publisher.published + self.publisher.errors
            log.info("published %d rows in %.2f s (%.0f rows/s)", count, busy, count / max(busy, 1e-6))
        log.info(
            "stopped: %d records published, %d sent to %s",
            self.publisher.published,
            self.publisher.errors,
            s.errors_topic,
        )
        return ExitCode.FAILED if failed else ExitCode.OK

    def _finish(self) -> None:
        if self._in_txn:
            self._commit()
        elif not self._s.exactly_once:
            self.publisher.flush()
            self.publisher.checkpoint(self.publisher.acked)
            self.publisher.flush()

    def _begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as e:
            raise DeliveryError(
                f"cannot begin a transaction ({e.args[0]}): did another connector with transactional id "
                f"{self._s.transactional_id!r} take over?"
            ) from e

    def _commit(self) -> bool:
        """Commit the open transaction (with its checkpoint); on an abortable error abort it and
        read its rows again. False when it was aborted."""
        positions = dict(self.publisher.produced)  # not the tailer's: a stop may cut a batch short
        self.publisher.checkpoint(positions)
        if self._retry_txn_call("commit", self._producer.commit_transaction):
            self._committed = positions
            self.publisher.set_acked(self._committed)
            self._in_txn = False
            return True
        else:
            self.publisher.forget_checkpoints()
            self.publisher.produced = dict(self._committed)
            self._retry_txn_call("abort", self._producer.abort_transaction)
            self.publisher.forget_in_flight()
            self._tailer.reset(self._committed)
            log.warning("transaction aborted: publishing its rows again")
        self._in_txn = False
        return False

    def _retry_txn_call(self, what: str, call: Callable[[float], None]) -> bool:
        """Run a transaction call, retrying while Kafka is away; False when the transaction must abort."""
        while True:
            try:
                call(30.0)
                set_health(True, "publishing")
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable():
                    set_health(False, f"waiting for Kafka to {what} a transaction")
                    log.warning("%s transaction: %s; retrying", what, err)
                    continue
                if err.txn_requires_abort() and what == "commit":
                    log.warning("%s transaction: %s", what, err)
                    return False
                raise DeliveryError(f"cannot {what} the transaction: {err}") from e

    def _update_metrics(self) -> None:
        RECORDS_PUBLISHED.inc(self.publisher.published - self._counted)
        self._counted = self.publisher.published
        acked = self.publisher.acked
        try:
            heads = self._store.heads()
        except STORE_ERRORS as e:
            log.warning("cannot read the log's heads for the lag metric: %s", e)
            return
        for partition, head in heads.items():
            done = acked.get(partition, -1)
            PUBLISHED_OFFSET.labels(partition=str(partition)).set(done)
            PARTITION_LAG.labels(partition=str(partition)).set(max(0, head - done))
