"""`olstream log simulate`: write a realistic, reproducible workload into an event log."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from olstream.eventlog.simulate import BASE_TIME, simulate
from olstream.eventlog.stores import open_store
from olstream.shared.errors import ConfigError, OlstreamError
from olstream.shared.logs import redact, setup_logging

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SimulateSettings:
    log_url: str
    runs: int
    partitions: int | None
    seed: int
    base_time: datetime
    batch_size: int
    log_format: str
    log_level: str


def _settings(args: argparse.Namespace) -> SimulateSettings:
    log_url = args.log or os.environ.get("OLSTREAM_LOG_URL")
    if not log_url:
        raise ConfigError("no event log: pass --log URL or set OLSTREAM_LOG_URL")
    if args.runs < 0:
        raise ConfigError(f"--runs must be >= 0, got {args.runs}")
    if args.partitions is not None and args.partitions < 1:
        raise ConfigError(f"--partitions must be >= 1, got {args.partitions}")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        base_time = datetime.fromisoformat(args.base_time) if args.base_time else BASE_TIME
    except ValueError as e:
        raise ConfigError(f"--base-time {args.base_time!r} is not an ISO 8601 time: {e}") from e
    if base_time.tzinfo is None:
        raise ConfigError(
            f"--base-time {args.base_time!r} needs a UTC offset, e.g. 2024-05-01T00:00:00+00:00"
        )
    return SimulateSettings(
        log_url=log_url,
        runs=args.runs,
        partitions=args.partitions,
        seed=args.seed,
        base_time=base_time,
        batch_size=args.batch_size,
        log_format=args.log_format or os.environ.get("OLSTREAM_LOG_FORMAT", "text"),
        log_level=args.log_level or os.environ.get("OLSTREAM_LOG_LEVEL", "INFO"),
    )


def run_simulate(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args)
    except ConfigError as e:
        print(f"olstream log simulate: {e}", file=sys.stderr)
        return 2
    setup_logging(settings.log_format, settings.log_level)
    try:
        store = open_store(settings.log_url, partitions=settings.partitions, create=True)
    except (OSError, ValueError, OlstreamError) as e:
        print(
            f"olstream log simulate: cannot open {redact(settings.log_url)}: {redact(str(e))}",
            file=sys.stderr,
        )
        return 1
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
    p.add_argument(
        "--log", help="event log URL: sqlite:///path/events.db or postgresql://... [OLSTREAM_LOG_URL]"
    )
    p.add_argument("--runs", type=int, required=True, help="number of workflow runs to write")
    p.add_argument(
        "--partitions", type=int, help="partitions of a log this creates [8]; must match an existing log"
    )
    p.add_argument("--seed", type=int, default=0, help="the seed: same seed, same records [0]")
    p.add_argument(
        "--base-time", help=f"simulated start time, ISO 8601 with offset [{BASE_TIME.isoformat()}]"
    )
    p.add_argument("--batch-size", type=int, default=5000, help="records per append transaction [5000]")
    p.add_argument("--log-format", choices=("text", "json"), help="[OLSTREAM_LOG_FORMAT, text]")
    p.add_argument("--log-level", help="[OLSTREAM_LOG_LEVEL, INFO]")
    p.set_defaults(func=run_simulate)
