"""`olstream log simulate`: write a realistic, reproducible workload into an event log."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from olstream.eventlog.settings import SIMULATE_SETTINGS, resolve_simulate_settings
from olstream.eventlog.simulate import simulate
from olstream.eventlog.stores import open_store
from olstream.shared.config import add_flags, add_print_config, print_config
from olstream.shared.errors import ExitCode, OlstreamError
from olstream.shared.logs import redact, setup_logging

logger = logging.getLogger(__name__)


def run_simulate(args: argparse.Namespace) -> int:
    settings, resolved = resolve_simulate_settings(vars(args), os.environ)
    if args.print_config:
        print_config(resolved)
        return ExitCode.OK
    setup_logging(settings.log_format, settings.log_level)
    try:
        store = open_store(settings.log_url, partitions=settings.partitions, create=True)
    except (OSError, ValueError, OlstreamError) as e:
        print(
            f"olstream log simulate: cannot open {redact(settings.log_url)}: {redact(str(e))}",
            file=sys.stderr,
        )
        return ExitCode.FAILED
    try:
        heads_before = store.heads()
        if any(head >= 0 for head in heads_before.values()):
            logger.warning(
                "appending to a log that already holds %d records: a seed used before repeats its run ids",
                sum(h + 1 for h in heads_before.values()),
            )
        summary = simulate(
            store, settings.runs, settings.seed, base_time=settings.base_time, batch_size=settings.batch_size
        )
    finally:
        store.close()
    print(f"event log: {redact(settings.log_url)} (seed {settings.seed})")
    print(summary.render())
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream log simulate`."""
    log = subparsers.add_parser("log", help="work with the engine's event log")
    actions = log.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    p = actions.add_parser(
        "simulate",
        help="write a realistic, reproducible workload (seeded) into an event log",
        description="Write a seeded engine workload through the writer API and print what was written.",
    )
    add_flags(p, SIMULATE_SETTINGS)
    add_print_config(p)
    p.set_defaults(func=run_simulate)
