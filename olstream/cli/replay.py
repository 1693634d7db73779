"""`olstream replay`: the lineage topic, or a time range of it, delivered again to a receiver under its
own consumer group (`olstream.operations.replay`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from olstream.cli.commands import add_destination_flags
from olstream.connectors.sink.settings import build_settings
from olstream.operations.replay_settings import REPLAY_SETTINGS, SINK_FLAGS, build_replay_settings, sink_flags
from olstream.shared.config import add_flags, add_print_config, print_settings
from olstream.shared.errors import ConfigError, ExitCode, KafkaAuthError, OlstreamError
from olstream.shared.logs import setup_logging

if TYPE_CHECKING:  # the sink's modules register its metrics: imported only when a replay runs
    from olstream.connectors.sink.bounded import ReplayProgress

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `olstream replay`."""
    p = subparsers.add_parser(
        "replay",
        help="deliver the lineage topic, or a time range of it, to a receiver again (own consumer group)",
        description="Deliver the events of the lineage topic whose message timestamps (produce time, not "
        "eventTime) fall in [--since, --until) through the sink's transport, retries, per-run order and "
        "dead-letter rules, under a consumer group of its own; it ends at the end of its range and "
        "resumes where it stopped when run again. The destination is the sink's: the flags below, "
        "OPENLINEAGE_* and openlineage.yml.",
    )
    add_destination_flags(p, "destination (OpenLineage's settings, as for olstream sink)")
    # the replay's own settings (section replay: of the file), then the sink's (section sink:)
    add_flags(p.add_argument_group("replay, then delivery (the sink's)"), (*REPLAY_SETTINGS, *SINK_FLAGS))
    add_print_config(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    flags = vars(args)
    sink = build_settings(sink_flags(flags), os.environ, Path.cwd())
    settings = build_replay_settings(flags, sink, os.environ, datetime.now(UTC))
    if args.print_config:
        print_settings(settings.describe())
        return ExitCode.OK
    setup_logging(sink.log_format, sink.log_level)
    from olstream.operations.replay import run_replay  # aiohttp, only when the replay runs

    try:
        with progress_bar(sys.stderr.isatty()) as report:
            outcome = asyncio.run(run_replay(settings, report))
    except KafkaAuthError as e:
        log.error("%s", e)
        return ExitCode.KAFKA_REFUSED
    except ConfigError:
        raise  # one line, exit 2 (olstream.cli.main)
    except (OlstreamError, KafkaException) as e:
        log.error("%s", e)
        return ExitCode.FAILED
    for line in outcome.lines:
        print(line)
    return ExitCode.OK


@contextmanager
def progress_bar(on_terminal: bool) -> Iterator[Callable[[ReplayProgress], None] | None]:
    """A progress bar with an ETA on stderr, only when stderr is a terminal."""
    if not on_terminal:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("replay"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[detail]}"),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task("replay", total=None, detail="")

        def report(progress: ReplayProgress) -> None:
            bar.update(
                task,
                total=progress.total,
                completed=progress.done,
                detail=f"delivered {progress.delivered:,}, dead-lettered {progress.dead_lettered:,}",
            )

        yield report
