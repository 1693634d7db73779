"""`olstream status`: the pipeline's topics and consumer groups (`olstream.operations.status`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from olstream.cli.commands import resolve_unless_printed
from olstream.operations.settings import STATUS
from olstream.shared.config import add_flags, add_print_config, help_text
from olstream.shared.errors import ExitCode, KafkaAuthError, OlstreamError
from olstream.shared.kafka_admin import check_connection
from olstream.shared.kafka_settings import connection_of
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    from olstream.operations.status import PIPELINE_TOPICS

    p = subparsers.add_parser("status", help="end offsets of the pipeline's topics and consumer group lag")
    add_flags(p, STATUS)
    p.add_argument(
        "--topic",
        action="append",
        default=None,
        help=help_text("topic to show (repeatable)", default=", ".join(PIPELINE_TOPICS)),
    )
    add_print_config(p)
    p.set_defaults(func=_run_status)


def _run_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from olstream.operations import status

    r = resolve_unless_printed("status", STATUS, args)
    if r is None:
        return ExitCode.OK
    setup_logging("text", "WARNING")
    bootstrap = r["bootstrap"]
    try:
        kafka = connection_of(r)
        check_connection(kafka, r["wait"])
        current = status.collect(kafka, tuple(args.topic or status.PIPELINE_TOPICS), r["wait"])
    except KafkaAuthError as e:
        print(f"olstream status: {e}", file=sys.stderr)
        return ExitCode.KAFKA_REFUSED
    except OlstreamError as e:
        print(f"olstream status: {e}", file=sys.stderr)
        return 2
    console = Console()
    for table in status.render_tables(current, bootstrap):
        console.print(table)
    return 0
