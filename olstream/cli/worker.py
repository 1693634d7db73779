"""``olstream worker``: the lineage stream (faust worker)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from olstream.shared.config import add_flags, add_print_config, print_config
from olstream.shared.errors import ConfigError, ExitCode, InfrastructureError, KafkaAuthError
from olstream.shared.logs import setup_logging
from olstream.shared.metrics import serve_metrics
from olstream.streams.settings import WORKER_SETTINGS, WorkerSettings, resolve_worker_settings

if TYPE_CHECKING:
    from olstream.streams.framed_input import InputFraming

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "worker", help="run the lineage stream: event-log records -> OpenLineage RunEvents"
    )
    add_flags(p, WORKER_SETTINGS)
    add_print_config(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings, resolved = resolve_worker_settings(vars(args), os.environ)
    if args.print_config:
        print_config(resolved)
        return ExitCode.OK
    setup_logging(settings.log_format, settings.log_level)
    # faust is imported here so that `olstream --help` and other commands stay light
    from olstream.streams.runtime.agent import attach
    from olstream.streams.runtime.app import build_app, worker_process
    from olstream.streams.runtime.faust_private import check_faust_private_names
    from olstream.streams.runtime.topology import prepare_topics

    check_faust_private_names()  # a faust upgrade that removed a name we rely on: say so, exit 2

    try:
        partitions, settings = prepare_topics(settings)
    except KafkaAuthError as e:
        log.error("%s", e)
        return ExitCode.KAFKA_REFUSED
    except (KafkaException, InfrastructureError) as e:  # Kafka unreachable at start: nothing was done
        log.error("Kafka at %s: %s", settings.bootstrap, e)
        return ExitCode.CONFIG
    framing = _input_framing(settings)
    if isinstance(framing, ExitCode):
        return framing
    sa = build_app(settings, partitions, framing)
    stream_worker = attach(sa)
    if settings.metrics_port:
        serve_metrics(settings.metrics_port, settings.metrics_host)
    log.info(
        "worker %s: %s (%d partitions) -> %s, data dir %s",
        settings.app_id,
        settings.input_topic,
        partitions,
        settings.output_topic,
        settings.data_dir,
    )
    # faust's worker, SIGTERM/SIGINT bounded by --stop-timeout; SIGUSR1 logs where it reads
    worker = worker_process(sa, stream_worker.describe_input)
    try:
        worker.execute_from_commandline()
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        stream_worker.parts.close()  # the standby's and the directory reader's threads, the changelog
    return 0


def _input_framing(settings: WorkerSettings) -> InputFraming | ExitCode:
    """Both wire formats of the input, with the local schemas' ids resolved now (docs/contract.md)."""
    from olstream.streams.framed_input import input_framing

    try:
        return input_framing(settings.schema_registry, settings.input_topic)
    except ConfigError as e:
        log.error("%s", e)
        return ExitCode.CONFIG
    except InfrastructureError as e:  # the registry does not answer: nothing was done
        log.error("%s", e)
        return ExitCode.SCHEMA_REGISTRY
