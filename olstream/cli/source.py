"""`olstream source`: tails the event log and publishes every record to Kafka.

Flags win over environment variables (``OLSTREAM_*``), which win over defaults.
Exit codes: 0 done (``--until-idle``, or stopped by SIGINT/SIGTERM after a flush),
1 Kafka refused a record or the event log failed while running, 2 bad settings, an event log
that cannot be opened, or Kafka unreachable at start.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from olstream.connectors.source.run import EXIT_FAILED, EXIT_UNAVAILABLE, run_source
from olstream.connectors.source.settings import DEFAULT_TOPIC, SourceSettings
from olstream.connectors.source.tailer import TailerSettings
from olstream.shared.errors import ConfigError, InfrastructureError, OlstreamError
from olstream.shared.logs import setup_logging
from olstream.shared.metrics import serve_metrics

log = logging.getLogger(__name__)

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
