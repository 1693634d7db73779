"""`olstream errors list | show | redrive`: the error topics, summed up, read and sent again
(`olstream.operations.error_records`, `olstream.operations.redrive`)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from olstream.cli.commands import resolve_unless_printed
from olstream.operations.error_records import (
    ERROR_TOPICS,
    Selection,
    describe,
    format_ms,
    read_topics,
    summarize,
)
from olstream.operations.redrive import DEFAULT_MAX_ATTEMPTS
from olstream.operations.redrive_run import RedriveRequest, run_redrive
from olstream.operations.settings import ERRORS_LIST, ERRORS_REDRIVE, STATUS
from olstream.shared.config import Resolved, Setting, add_flags, add_print_config, help_text
from olstream.shared.errors import ExitCode, KafkaAuthError, OlstreamError
from olstream.shared.kafka_admin import check_connection
from olstream.shared.kafka_settings import connection_of
from olstream.shared.logs import redact, setup_logging
from olstream.shared.moments import parse_moment


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser("errors", help="the error topics: list reasons, show records, re-drive them")
    actions = p.add_subparsers(dest="errors_command", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="reason x records x first and last time, per error topic")
    show = actions.add_parser("show", help="print selected records of one error topic, headers decoded")
    for q, settings in ((lst, ERRORS_LIST), (show, STATUS)):
        add_flags(q, settings)
        add_print_config(q)
    lst.add_argument(
        "--topic",
        action="append",
        default=None,
        help=help_text(
            "error topic (repeatable)",
            default=f"the config file's errors: topics, else {', '.join(ERROR_TOPICS)}",
        ),
    )
    lst.set_defaults(func=_run_list)
    show.add_argument("topic", help="the error topic")
    _add_selection(show)
    show.add_argument(
        "--limit", type=int, default=20, help=help_text("print at most this many records", default="20")
    )
    show.add_argument(
        "--raw",
        type=Path,
        default=None,
        help=help_text(
            "write the payload of the one selected record, unescaped, to this file", default="none"
        ),
    )
    show.set_defaults(func=_run_show)
    redrive = actions.add_parser(
        "redrive", help="send selected error records through the pipeline again, after a fix"
    )
    add_flags(redrive, ERRORS_REDRIVE)
    add_print_config(redrive)
    redrive.add_argument(
        "topic", help="the error topic (the sink's DLQ, the worker's or the source's errors topic)"
    )
    _add_selection(redrive)
    redrive.add_argument(
        "--max-attempts",
        type=int,
        default=DEFAULT_MAX_ATTEMPTS,
        help=help_text("leave records re-driven this many times already", default=str(DEFAULT_MAX_ATTEMPTS)),
    )
    redrive.add_argument(
        "--to-topic",
        default=None,
        help=help_text("send to this topic (same partition)", default="the topic each record came from"),
    )
    redrive.add_argument(
        "--dry-run",
        action="store_true",
        help=help_text("print what would be sent; send nothing", default="off"),
    )
    redrive.set_defaults(func=_run_redrive)


def _add_selection(p: argparse.ArgumentParser) -> None:
    every = "every"
    p.add_argument(
        "--reason",
        default=None,
        help=help_text("only records with this olstream.error reason", default=every),
    )
    p.add_argument(
        "--partition", type=int, default=None, help=help_text("only this partition", default=every)
    )
    p.add_argument(
        "--from-offset",
        type=int,
        default=None,
        help=help_text("only offsets from this one", default="the first"),
    )
    p.add_argument(
        "--to-offset",
        type=int,
        default=None,
        help=help_text("only offsets up to this one (inclusive)", default="the last"),
    )
    p.add_argument(
        "--since",
        default=None,
        help=help_text(
            "only records produced at or after this time: ISO (2024-05-01T12:00:00Z) or a duration back "
            "from now (2h, 30m, 1d); message timestamps, not eventTime",
            default="the first",
        ),
    )
    p.add_argument(
        "--until",
        default=None,
        help=help_text("only records produced before this time, as --since", default="now"),
    )


def _resolved(args: argparse.Namespace, settings: tuple[Setting, ...]) -> Resolved | None:
    """The action's settings (the file's section `errors:`); None once printed for --print-config."""
    r = resolve_unless_printed("errors", settings, args)
    if r is not None:
        setup_logging("text", "WARNING")
    return r


def _read(
    args: argparse.Namespace, r: Resolved, names: list[str], missing: set[str] | None = None
) -> list[Any] | int:
    """The records of the topics `names`; an exit code when Kafka refused or did not answer."""
    what = f"olstream errors {args.errors_command}"
    try:
        kafka = connection_of(r)
        check_connection(kafka, r["wait"])
        return read_topics(kafka, names, r["wait"], missing)
    except KafkaAuthError as e:
        print(f"{what}: {one_line(e)}", file=sys.stderr)
        return ExitCode.KAFKA_REFUSED
    except OlstreamError as e:  # a missing topic, a broker that does not answer
        print(f"{what}: {one_line(e)}", file=sys.stderr)
        return ExitCode.CONFIG


def _selection(args: argparse.Namespace) -> Selection:
    """The records chosen by the flags; a time that is neither ISO nor a duration is `ConfigError`."""
    now = datetime.now(UTC)
    since = parse_moment(args.since, now, "--since") if args.since else None
    until = parse_moment(args.until, now, "--until") if args.until else None
    return Selection(args.reason, args.partition, args.from_offset, args.to_offset, since, until)


def _chosen(args: argparse.Namespace, r: Resolved) -> list[Any] | int:
    """The records of `--topic` the flags select; an exit code instead when there are none to show
    (Kafka refused or unreachable, nothing matches)."""
    records = _read(args, r, [args.topic])
    if isinstance(records, int):
        return records
    selection = _selection(args)
    chosen = [record for record in records if selection.matches(record)]
    if not chosen:
        what = f"olstream errors {args.errors_command}"
        print(f"{what}: no record of {args.topic} matches the selection", file=sys.stderr)
        return ExitCode.CONFIG
    return chosen


def _run_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    r = _resolved(args, ERRORS_LIST)
    if r is None:
        return ExitCode.OK
    names = list(args.topic or r["topics"] or ERROR_TOPICS)
    # the configured and the default topics are listed whether they exist or not (a source with its
    # own --topic has its errors in <topic>.errors; a receiver's DLQ appears with its first dead
    # letter); a topic named with --topic must exist
    missing: set[str] | None = None if args.topic else set()
    records = _read(args, r, names, missing)
    if isinstance(records, int):
        return records
    rows = summarize(records)
    table = Table(title="error records (message times: when each was produced)")
    for column in ("topic", "reason", "records", "first", "last", "not re-drivable from copy"):
        table.add_column(
            column, justify="right" if column in ("records", "not re-drivable from copy") else "left"
        )
    for name in names:
        mine = [row for row in rows if row.topic == name]
        if missing and name in missing:
            table.add_row(name, "(no such topic)", "-", "-", "-", "-")
        elif not mine:
            table.add_row(name, "(empty)", "0", "-", "-", "0")
        for row in mine:
            table.add_row(
                row.topic,
                row.reason,
                f"{row.records:,}",
                format_ms(row.first_ms),
                format_ms(row.last_ms),
                f"{row.not_from_copy:,}",
            )
    Console(width=None if sys.stdout.isatty() else 240).print(table)  # a pipe gets whole cells
    return ExitCode.OK


def _run_show(args: argparse.Namespace) -> int:
    if args.limit < 1:
        print("olstream errors show: --limit must be at least 1", file=sys.stderr)
        return ExitCode.CONFIG
    r = _resolved(args, STATUS)
    if r is None:
        return ExitCode.OK
    chosen = _chosen(args, r)
    if isinstance(chosen, int):
        return chosen
    if args.raw is not None:
        if len(chosen) != 1:
            print(
                f"olstream errors show: --raw writes one record's payload; {len(chosen)} match "
                "(select one with --partition and --from-offset/--to-offset)",
                file=sys.stderr,
            )
            return ExitCode.CONFIG
        args.raw.write_bytes(chosen[0].value)
    for record in chosen[: args.limit]:
        print("\n".join(describe(record)))
    if len(chosen) > args.limit:
        print(f"({len(chosen) - args.limit} more records match; raise --limit to see them)")
    return ExitCode.OK


def _run_redrive(args: argparse.Namespace) -> int:
    what = "olstream errors redrive"
    if args.max_attempts < 1:
        print(f"{what}: --max-attempts must be at least 1", file=sys.stderr)
        return ExitCode.CONFIG
    r = _resolved(args, ERRORS_REDRIVE)
    if r is None:
        return ExitCode.OK
    chosen = _chosen(args, r)
    if isinstance(chosen, int):
        return chosen
    request = RedriveRequest(
        args.topic, args.max_attempts, args.to_topic, args.dry_run, r["log_url"], r["wait"]
    )
    try:
        report = run_redrive(connection_of(r), chosen, request)
    except KafkaAuthError as e:
        print(f"{what}: {one_line(e)}", file=sys.stderr)
        return ExitCode.KAFKA_REFUSED
    except OlstreamError as e:
        print(f"{what}: {one_line(e)}", file=sys.stderr)
        return ExitCode.CONFIG
    for line in report.lines:
        print(line)
    if report.sent == 0 and report.returned == 0 and not args.dry_run:  # nothing was written
        print(f"{what}: none of the {len(chosen):,} selected records can be re-driven", file=sys.stderr)
        return ExitCode.CONFIG
    return ExitCode.OK


def one_line(e: Exception) -> str:
    """An error as one line, its secrets redacted (a URL's password, a key)."""
    return " ".join(redact(str(e)).split())
