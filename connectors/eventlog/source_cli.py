"""`olstream source`: tails the event log and publishes every record to Kafka.

Flags win over environment variables (``OLSTREAM_*``), which win over defaults.
Exit codes: 0 done (``--until-idle``, or stopped by SIGINT/SIGTERM after a flush),
1 a delivery failed while running, 2 bad settings or Kafka unreachable at start.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import psycopg
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from connectors.eventlog.publisher import (
    ERRORS,
    PARTITION_LAG,
    PUBLISHED_OFFSET,
    RECORDS_PUBLISHED,
    Publisher,
)
from connectors.eventlog.publisher import producer_config as build_producer_config
from connectors.eventlog.resume import read_resume_positions
from connectors.eventlog.store import EventLogStore, open_store
from connectors.eventlog.tailer import Gap, LogTailer, TailerSettings
from olstream.errors import ConfigError, DeliveryError, InfrastructureError, OlstreamError
from olstream.kafka_admin import ensure_topic
from olstream.logs import setup_logging
from olstream.metrics import serve_metrics, set_health

log = logging.getLogger(__name__)
_LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

DEFAULT_TOPIC = "olstream.eventlog"
STORE_ERRORS = (sqlite3.Error, psycopg.Error, OSError)  # what a store raises when its database fails
EXIT_OK, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SourceSettings:
    log_url: str
    bootstrap: str = "127.0.0.1:9092"
    topic: str = DEFAULT_TOPIC
    errors_topic: str = DEFAULT_TOPIC + ".errors"
    partitions: int = 6
    until_idle: bool = False
    idle_seconds: float = 2.0
    exactly_once: bool = False
    connect_timeout: float = 15.0
    transaction_interval: float = 0.1
    check_bodies: bool = True
    tailer: TailerSettings = field(default_factory=TailerSettings)
    metrics_port: int = 0
    log_format: str = "text"
    log_level: str = "INFO"

    @property
    def transactional_id(self) -> str:
        """Stable per (topic, log): a restarted connector fences its own zombie, and only it."""
        parts = urlsplit(self.log_url)
        where = f"{parts.scheme}://{parts.hostname or ''}:{parts.port or ''}{parts.path}"
        digest = hashlib.sha256(f"{self.topic}|{where}".encode()).hexdigest()[:16]
        return f"olstream-source-{self.topic}-{digest}"


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def settings_from_args(args: argparse.Namespace) -> SourceSettings:
    """The one settings value of the command, from flags, then OLSTREAM_* variables, then defaults."""
    log_url = args.log or os.environ.get("OLSTREAM_LOG_URL")
    if not log_url:
        raise ConfigError("no event log: pass --log URL or set OLSTREAM_LOG_URL")
    topic = args.topic or _env("OLSTREAM_SOURCE_TOPIC", DEFAULT_TOPIC)
    try:
        count = args.partitions
        partitions = int(count if count is not None else _env("OLSTREAM_SOURCE_PARTITIONS", "6"))
        port = args.metrics_port
        metrics_port = int(port if port is not None else _env("OLSTREAM_METRICS_PORT", "0"))
    except ValueError as e:
        raise ConfigError(f"--partitions and --metrics-port take integers: {e}") from e
    if partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, got {partitions}")
    for name in ("idle_seconds", "connect_timeout", "transaction_interval", "max_wait", "gap_grace"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must not be negative")
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    return SourceSettings(
        log_url=log_url,
        bootstrap=args.bootstrap or _env("OLSTREAM_BOOTSTRAP", "127.0.0.1:9092"),
        topic=topic,
        errors_topic=args.errors_topic or f"{topic}.errors",
        partitions=partitions,
        until_idle=args.until_idle,
        idle_seconds=args.idle_seconds,
        exactly_once=args.exactly_once,
        connect_timeout=args.connect_timeout,
        transaction_interval=args.transaction_interval,
        check_bodies=args.check == "full",
        tailer=TailerSettings(batch_size=args.batch_size, max_wait=args.max_wait, gap_grace=args.gap_grace),
        metrics_port=metrics_port,
        log_format=args.log_format or _env("OLSTREAM_LOG_FORMAT", "text"),
        log_level=args.log_level or _env("OLSTREAM_LOG_LEVEL", "INFO"),
    )


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream source`."""
    p = subparsers.add_parser("source", help="publish the event log to Kafka (resumable, keyed by partition)")
    arg = p.add_argument
    arg("--log", help="event log URL: sqlite:///path/events.db or postgresql://... [OLSTREAM_LOG_URL]")
    arg("--bootstrap", help="Kafka bootstrap servers [OLSTREAM_BOOTSTRAP, 127.0.0.1:9092]")
    arg("--topic", help=f"records topic [OLSTREAM_SOURCE_TOPIC, {DEFAULT_TOPIC}]")
    arg("--errors-topic", help="topic for rows that do not decode [<topic>.errors]")
    arg("--partitions", type=int, help="partitions of a topic it creates [OLSTREAM_SOURCE_PARTITIONS, 6]")
    arg("--until-idle", action="store_true", help="exit 0 once caught up and quiet for --idle-seconds")
    arg("--idle-seconds", type=float, default=2.0, help="quiet period for --until-idle, s [2]")
    arg("--exactly-once", action="store_true", help="transactional producer: once for read_committed")
    arg("--connect-timeout", type=float, default=15.0, help="how long to wait for Kafka at start, s [15]")
    arg("--batch-size", type=int, default=2000, help="rows read per partition per round [2000]")
    arg("--max-wait", type=float, default=0.05, help="longest pause between polls of an idle log, s [0.05]")
    arg("--gap-grace", type=float, default=1.0, help="how long a missing offset may stay missing, s [1]")
    arg("--transaction-interval", type=float, default=0.1, help="--exactly-once: commit every N s [0.1]")
    arg(
        "--check",
        choices=("full", "header"),
        default="full",
        help="full: decode every body under its writer schema; header: magic, fingerprint, position [full]",
    )
    arg("--metrics-port", type=int, help="serve Prometheus metrics here (0: off) [OLSTREAM_METRICS_PORT]")
    arg("--log-format", choices=("text", "json"), help="[OLSTREAM_LOG_FORMAT, text]")
    arg("--log-level", help="[OLSTREAM_LOG_LEVEL, INFO]")
    p.set_defaults(func=main)


def build_parser_for_tests() -> argparse.ArgumentParser:
    """A parser holding only this subcommand (for unit tests of the flags)."""
    parser = argparse.ArgumentParser(prog="olstream")
    register(parser.add_subparsers(dest="command"))
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ConfigError as e:
        setup_logging("text")
        log.error("%s", e)
        return EXIT_UNAVAILABLE
    setup_logging(settings.log_format, settings.log_level)
    stop = threading.Event()
    _install_signal_handlers(stop)
    if settings.metrics_port:
        serve_metrics(settings.metrics_port)
    try:
        return run_source(settings, stop)
    except (ConfigError, InfrastructureError) as e:
        log.error("%s", e)
        return EXIT_UNAVAILABLE
    except OlstreamError as e:
        log.error("%s", e)
        return EXIT_FAILED


def _install_signal_handlers(stop: threading.Event) -> None:
    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # a second signal: leave without waiting for the flush
        log.info("got %s: flushing and stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def check_broker(settings: SourceSettings) -> None:
    """Fail with InfrastructureError when no broker answers within the connect timeout."""
    config: dict[str, Any] = {"bootstrap.servers": settings.bootstrap, "logger": _LIBRDKAFKA_LOG}
    admin = AdminClient(config)
    try:
        admin.list_topics(timeout=settings.connect_timeout)
    except KafkaException as e:
        raise InfrastructureError(
            f"Kafka at {settings.bootstrap} did not answer within {settings.connect_timeout:g} s: {e}"
        ) from e


def run_source(settings: SourceSettings, stop: threading.Event) -> int:
    """Publish the log until idle (with --until-idle) or until `stop` is set; returns the exit code."""
    try:
        store = open_store(settings.log_url)
    except (ValueError, *STORE_ERRORS) as e:
        raise ConfigError(f"cannot open the event log: {e}") from e
    try:
        check_broker(settings)
        for topic in (settings.topic, settings.errors_topic):
            ensure_topic(settings.bootstrap, topic, settings.partitions, timeout=settings.connect_timeout)
        transactional_id = settings.transactional_id if settings.exactly_once else None
        config: dict[str, Any] = build_producer_config(settings.bootstrap, transactional_id=transactional_id)
        config["logger"] = _LIBRDKAFKA_LOG
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
        start = read_resume_positions(
            settings.bootstrap,
            [settings.topic, settings.errors_topic],
            wanted,
            read_committed=settings.exactly_once,
            timeout=max(settings.connect_timeout, 30.0),
        )
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
        loop = _SourceLoop(settings, store, producer, start, stop)
        errors.target = loop.publisher.on_kafka_error
        return loop.run()
    finally:
        store.close()


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
            should_stop=stop.is_set,
            check_bodies=settings.check_bodies,
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
        last_activity = time.monotonic()
        next_metrics = 0.0
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
                last_activity = now
                busy_since = now if busy_since is None else busy_since
                caught_up_at = None
                if s.exactly_once and not self._in_txn:
                    self._producer.begin_transaction()
                    self._in_txn, self._txn_started = True, now
                if self.publisher.publish(rows) < len(rows):
                    break  # stopped while Kafka applied back-pressure
                if self._in_txn and now - self._txn_started >= s.transaction_interval:
                    self._commit()
            else:
                if self._in_txn:
                    self._commit()
                self.publisher.poll(0)
                if caught_up_at is None and self.publisher.in_flight == 0:
                    caught_up_at = time.monotonic()
                idle = (
                    not self._tailer.holding_gap
                    and self.publisher.in_flight == 0
                    and now - last_activity >= s.idle_seconds
                )
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
        return EXIT_FAILED if failed else EXIT_OK

    def _finish(self) -> None:
        if self._in_txn:
            self._commit()
        else:
            self.publisher.flush()

    def _commit(self) -> None:
        """Commit the open transaction; on an abortable error abort it and read its rows again."""
        if self._retry_txn_call("commit", self._producer.commit_transaction):
            self._committed = self._tailer.positions
            self.publisher.set_acked(self._committed)
        else:
            self._retry_txn_call("abort", self._producer.abort_transaction)
            self.publisher.forget_in_flight()
            self._tailer.reset(self._committed)
            log.warning("transaction aborted: publishing its rows again")
        self._in_txn = False

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
