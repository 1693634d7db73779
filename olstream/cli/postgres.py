"""`olstream postgres up|down|status`: a local PostgreSQL server (Debian packages) for dev and tests."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from olstream.infra import postgres
from olstream.infra.postgres import DEFAULT_PORT, PostgresSettings
from olstream.shared.errors import OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `postgres up`, `postgres down` and `postgres status`."""
    parser = subparsers.add_parser("postgres", help="run a local PostgreSQL server")
    actions = parser.add_subparsers(dest="postgres_command", metavar="ACTION", required=True)

    def add_common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help="server directory (default $OLSTREAM_PG_DATA_DIR or ~/.local/state/olstream/postgres)",
        )
        p.add_argument("--log-format", choices=("text", "json"), default="text")

    up = actions.add_parser("up", help="start the server (no-op when it already runs); prints its URL")
    add_common(up)
    up.add_argument("--port", type=int, default=int(os.environ.get("OLSTREAM_PG_PORT", DEFAULT_PORT)))
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the server")
    up.set_defaults(func=run_up)

    down = actions.add_parser("down", help="stop the server started with the same --data-dir")
    add_common(down)
    down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    down.set_defaults(func=run_down)

    status = actions.add_parser("status", help="say whether the server runs, its version and URL")
    add_common(status)
    status.set_defaults(func=run_status)


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir or postgres.default_data_dir()).expanduser().resolve()


def run_up(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "INFO")
    settings = PostgresSettings(port=args.port, data_dir=_data_dir(args), start_timeout=args.timeout)
    started = time.monotonic()
    try:
        state, fresh = postgres.start_server(settings)
    except OlstreamError as e:
        print(f"olstream postgres up: {e}", file=sys.stderr)
        return 1
    verb = f"started in {time.monotonic() - started:.1f} s" if fresh else "is already running"
    print(f"PostgreSQL {state.version} {verb} (pid {state.pid}, data dir {state.data_dir})", file=sys.stderr)
    print(state.url)
    return 0


def run_down(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "INFO")
    data_dir = _data_dir(args)
    try:
        state = postgres.stop_server(data_dir, timeout=args.timeout)
    except OlstreamError as e:
        print(f"olstream postgres down: {e}", file=sys.stderr)
        return 1
    if state is None:
        print(f"no PostgreSQL server running for data dir {data_dir}")
    else:
        print(f"stopped PostgreSQL {state.version} at {state.host}:{state.port} (pid {state.pid})")
    return 0


def run_status(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "WARNING")
    data_dir = _data_dir(args)
    try:
        status = postgres.server_status(data_dir)
    except OlstreamError as e:
        print(f"olstream postgres status: {e}", file=sys.stderr)
        return 1
    if status.running and status.state is not None:
        s = status.state
        print(f"running: yes\nversion: {s.version}\nurl: {s.url}\npid: {s.pid}\ndata dir: {data_dir}")
        return 0
    print(f"running: no\ndata dir: {data_dir}")
    return 3
