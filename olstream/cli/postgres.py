"""`olstream postgres up|down|status`: a local PostgreSQL server (Debian packages) for dev and tests."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from olstream.cli.commands import LauncherCommand, report_stopped
from olstream.devkit import postgres
from olstream.devkit.postgres import PostgresSettings
from olstream.devkit.settings import POSTGRES_DOWN, POSTGRES_STATUS, POSTGRES_UP, data_dir_of
from olstream.shared.config import Resolved
from olstream.shared.errors import ExitCode


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `postgres up`, `postgres down` and `postgres status`."""
    POSTGRES.register(
        subparsers,
        "run a local PostgreSQL server (the installed PostgreSQL binaries: Debian's postgresql package)",
        (
            ("up", "start the server (no-op when it already runs); prints its URL", POSTGRES_UP, _up),
            ("down", "stop the server started with the same --data-dir", POSTGRES_DOWN, _down),
            ("status", "say whether the server runs, its version and URL", POSTGRES_STATUS, _status),
        ),
    )


POSTGRES = LauncherCommand("postgres", verbose=("up", "down"))


def _up(r: Resolved) -> int:
    settings = PostgresSettings(
        port=r["port"], data_dir=data_dir_of(r, postgres.default_data_dir()), start_timeout=r["start_timeout"]
    )
    started = time.monotonic()
    state, fresh = postgres.start_server(settings)
    verb = f"started in {time.monotonic() - started:.1f} s" if fresh else "is already running"
    print(f"PostgreSQL {state.version} {verb} (pid {state.pid}, data dir {state.data_dir})", file=sys.stderr)
    print(state.url)
    return ExitCode.OK


def _down(r: Resolved) -> int:
    data_dir = data_dir_of(r, postgres.default_data_dir())
    state = postgres.stop_server(data_dir, timeout=r["stop_timeout"])
    said = (
        f"stopped PostgreSQL {state.version} at {state.host}:{state.port} (pid {state.pid})" if state else ""
    )
    return report_stopped("PostgreSQL server", data_dir, [said] if said else [])


def _status(r: Resolved) -> int:
    data_dir = data_dir_of(r, postgres.default_data_dir())
    status = postgres.server_status(data_dir)
    if status.running and status.state is not None:
        s = status.state
        print(f"running: yes\nversion: {s.version}\nurl: {s.url}\npid: {s.pid}\ndata dir: {data_dir}")
        return ExitCode.OK
    print(f"running: no\ndata dir: {data_dir}")
    return ExitCode.NOT_RUNNING
