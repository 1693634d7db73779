"""`olstream sink`: deliver the JSON RunEvents of a Kafka topic to an OpenLineage receiver, file or stdout."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from olstream.cli.commands import add_destination_flags
from olstream.connectors.sink.settings import SINK_SETTINGS, build_settings
from olstream.shared.config import add_flags, add_print_config, print_settings
from olstream.shared.errors import ConfigError, ExitCode, KafkaAuthError, OlstreamError
from olstream.shared.logs import setup_logging

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream sink`."""
    p = subparsers.add_parser(
        "sink",
        help="deliver OpenLineage events from Kafka to an HTTP receiver, a file or stdout (at-least-once)",
        description="Consume JSON RunEvents and deliver them at-least-once, in per-key order. "
        "Flags win over the OPENLINEAGE__TRANSPORT__* variables, which win over OPENLINEAGE_URL / "
        "OPENLINEAGE_ENDPOINT / OPENLINEAGE_API_KEY, which win over the transport section of "
        "openlineage.yml (OPENLINEAGE_CONFIG); a composite transport runs one member per sink "
        "(--transport NAME). OPENLINEAGE_DISABLED=true: exit 0 at once, nothing delivered or "
        "committed. The sink's own settings: flags > OLSTREAM_* > --config file > defaults.",
    )
    add_destination_flags(p, "destination (OpenLineage's settings)")
    add_flags(p.add_argument_group("sink"), SINK_SETTINGS)
    add_print_config(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings = build_settings(vars(args), os.environ, Path.cwd())
    if args.print_config:
        print_settings(settings.describe())
        return ExitCode.OK
    setup_logging(settings.log_format, settings.log_level)
    try:
        from olstream.connectors.sink.run import run_sink  # aiohttp, only when the sink runs

        return asyncio.run(run_sink(settings))
    except KafkaAuthError as e:
        log.error("%s", e)
        return ExitCode.KAFKA_REFUSED
    except ConfigError as e:  # a Kafka client property librdkafka refuses: nothing was done
        log.error("%s", e)
        return ExitCode.CONFIG
    except OlstreamError as e:
        log.error("%s", e)
        return ExitCode.FAILED
    except KafkaException as e:
        log.error("Kafka at %s: %s", settings.bootstrap, e)
        return ExitCode.FAILED
