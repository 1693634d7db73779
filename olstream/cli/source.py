"""`olstream source`: tails the event log and publishes every record to Kafka.

Settings: `connectors/source/settings.py` (flags > ``OLSTREAM_*`` > file > defaults). Exit codes:
the table of `olstream.shared.errors.ExitCode` (2: bad settings, an event log that cannot be
opened, or Kafka unreachable at start; 1: Kafka refused a record or the event log failed while
running).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from olstream.connectors.source.settings import SOURCE_SETTINGS, resolve_source_settings
from olstream.shared.config import add_flags, add_print_config, print_config
from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError, KafkaAuthError, OlstreamError
from olstream.shared.logs import setup_logging
from olstream.shared.metrics import serve_metrics
from olstream.shared.stopping import install_stop_deadline

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream source`."""
    p = subparsers.add_parser("source", help="publish the event log to Kafka (resumable, keyed by partition)")
    add_flags(p, SOURCE_SETTINGS)
    add_print_config(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings, resolved = resolve_source_settings(vars(args), os.environ)
    if args.print_config:
        print_config(resolved)
        return ExitCode.OK
    setup_logging(settings.log_format, settings.log_level)
    stop = threading.Event()
    _install_signal_handlers(stop)
    install_stop_deadline(settings.stop_timeout, "source")  # chained after the handlers above
    from olstream.connectors.source.run import run_source  # registers the source's metrics: only here

    if settings.metrics_port:
        serve_metrics(settings.metrics_port, settings.metrics_host)
    try:
        return run_source(settings, stop)
    except KafkaAuthError as e:
        log.error("%s", e)
        return ExitCode.KAFKA_REFUSED
    except (ConfigError, InfrastructureError) as e:
        log.error("%s", e)
        return ExitCode.CONFIG
    except OlstreamError as e:
        log.error("%s", e)
        return ExitCode.FAILED


def _install_signal_handlers(stop: threading.Event) -> None:
    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # a second signal: leave without waiting for the flush
        log.info("got %s: flushing and stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
