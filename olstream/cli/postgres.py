"""`olstream postgres up|down|status`: a local PostgreSQL server (Debian packages) for dev and tests."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from olstream.cli.commands import add_actions, resolve_unless_printed
from olstream.infra import postgres
from olstream.infra.postgres import PostgresSettings
from olstream.infra.settings import POSTGRES_DOWN, POSTGRES_STATUS, POSTGRES_UP, data_dir_of
from olstream.shared.config import Resolved, Setting
from olstream.shared.errors import ExitCode, OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `postgres up`, `postgres down` and `postgres status`."""
    add_actions(
        subparsers,
        "postgres",
        "run a local PostgreSQL server (the installed PostgreSQL binaries: Debian's postgresql package)",
        (
            ("up", "start the server (no-op when it already runs); prints its URL", POSTGRES_UP, run_up),
            ("down", "stop the server started with the same --data-dir", POSTGRES_DOWN, run_down),
            ("status", "say whether the server runs, its version and URL", POSTGRES_STATUS, run_status),
        ),
    )


def _resolve(args: argparse.Namespace, settings: tuple[Setting, ...]) -> Resolved | None:
    """The resolved settings, or None after printing them for --print-config."""
    r = resolve_unless_printed("postgres", settings, args)
    if r is not None:
        setup_logging(r["log_format"], "WARNING" if args.postgres_command == "status" else "INFO")
    return r


def run_up(args: argparse.Namespace) -> int:
    r = _resolve(args, POSTGRES_UP)
    if r is None:
        return ExitCode.OK
    settings = PostgresSettings(
        port=r["port"], data_dir=data_dir_of(r, postgres.default_data_dir()), start_timeout=r["start_timeout"]
    )
    started = time.monotonic()
    try:
        state, fresh = postgres.start_server(settings)
    except OlstreamError as e:
        print(f"olstream postgres up: {e}", file=sys.stderr)
        return ExitCode.FAILED
    verb = f"started in {time.monotonic() - started:.1f} s" if fresh else "is already running"
    print(f"PostgreSQL {state.version} {verb} (pid {state.pid}, data dir {state.data_dir})", file=sys.stderr)
    print(state.url)
    return ExitCode.OK


def run_down(args: argparse.Namespace) -> int:
    r = _resolve(args, POSTGRES_DOWN)
    if r is None:
        return ExitCode.OK
    data_dir = data_dir_of(r, postgres.default_data_dir())
    try:
        state = postgres.stop_server(data_dir, timeout=r["stop_timeout"])
    except OlstreamError as e:
        print(f"olstream postgres down: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if state is None:
        print(f"no PostgreSQL server running for data dir {data_dir}")
    else:
        print(f"stopped PostgreSQL {state.version} at {state.host}:{state.port} (pid {state.pid})")
    return ExitCode.OK


def run_status(args: argparse.Namespace) -> int:
    r = _resolve(args, POSTGRES_STATUS)
    if r is None:
        return ExitCode.OK
    data_dir = data_dir_of(r, postgres.default_data_dir())
    try:
        status = postgres.server_status(data_dir)
    except OlstreamError as e:
        print(f"olstream postgres status: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if status.running and status.state is not None:
        s = status.state
        print(f"running: yes\nversion: {s.version}\nurl: {s.url}\npid: {s.pid}\ndata dir: {data_dir}")
        return ExitCode.OK
    print(f"running: no\ndata dir: {data_dir}")
    return ExitCode.NOT_RUNNING
