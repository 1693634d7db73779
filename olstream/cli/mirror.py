"""`olstream mirror up|down|status`: a local MirrorMaker 2 replicating topics from one cluster to another."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from olstream.cli.commands import add_actions, resolve_unless_printed
from olstream.infra import mirror
from olstream.infra.mirror_settings import (
    MIRROR_DOWN,
    MIRROR_STATUS,
    MIRROR_UP,
    mirror_data_dir,
    mirror_settings,
)
from olstream.shared.config import Resolved, Setting
from olstream.shared.errors import ExitCode, InfrastructureError
from olstream.shared.logs import redact, setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `mirror up`, `mirror down` and `mirror status`."""
    add_actions(
        subparsers,
        "mirror",
        "run a local MirrorMaker 2 replicating topics from a source cluster to a target cluster "
        "(connect-mirror jars from Maven Central)",
        (
            (
                "up",
                "start MirrorMaker 2 and wait until it replicates (no-op when it runs)",
                MIRROR_UP,
                run_up,
            ),
            ("down", "stop the MirrorMaker 2 started with the same --data-dir", MIRROR_DOWN, run_down),
            ("status", "say whether MirrorMaker 2 runs, its clusters and topics", MIRROR_STATUS, run_status),
        ),
    )


def _resolve(args: argparse.Namespace, settings: tuple[Setting, ...]) -> Resolved | None:
    """The resolved settings, or None after printing them for --print-config."""
    r = resolve_unless_printed("mirror", settings, args)
    if r is not None:
        setup_logging(r["log_format"], "INFO" if args.mirror_command == "up" else "WARNING")
    return r


def _flow(state: mirror.MirrorState) -> str:
    return (
        f"{state.source_alias} ({state.source_bootstrap}) -> {state.target_alias} ({state.target_bootstrap})"
    )


def run_up(args: argparse.Namespace) -> int:
    r = _resolve(args, MIRROR_UP)
    if r is None:
        return ExitCode.OK
    settings = mirror_settings(r)  # a ConfigError: one line, exit 2
    started = time.monotonic()
    try:
        state, fresh = mirror.ensure_mirror(settings)
    except InfrastructureError as e:
        print(f"olstream mirror up: {redact(str(e))}", file=sys.stderr)
        return ExitCode.FAILED
    if fresh:
        print(
            f"MirrorMaker 2 (connect-mirror {state.version}) replicates {_flow(state)}, "
            f"topics {state.topics} (copies: {state.remote_topic('<topic>')}), ready in "
            f"{time.monotonic() - started:.1f} s (pid {state.pid}, data dir {state.data_dir})"
        )
    else:
        print(
            f"MirrorMaker 2 (connect-mirror {state.version}) is already running: {_flow(state)}, "
            f"topics {state.topics} (pid {state.pid}, data dir {state.data_dir})"
        )
    return ExitCode.OK


def run_down(args: argparse.Namespace) -> int:
    r = _resolve(args, MIRROR_DOWN)
    if r is None:
        return ExitCode.OK
    data_dir = mirror_data_dir(r)
    try:
        state = mirror.stop_mirror(data_dir, timeout=r["stop_timeout"])
    except InfrastructureError as e:
        print(f"olstream mirror down: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if state is None:
        print(f"no MirrorMaker 2 running for data dir {data_dir}")
    else:
        print(f"stopped MirrorMaker 2 {_flow(state)} (pid {state.pid})")
    return ExitCode.OK


def run_status(args: argparse.Namespace) -> int:
    r = _resolve(args, MIRROR_STATUS)
    if r is None:
        return ExitCode.OK
    data_dir = mirror_data_dir(r)
    try:
        status = mirror.mirror_status(data_dir)
    except InfrastructureError as e:
        print(f"olstream mirror status: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if status.running and status.state is not None:
        s = status.state
        ready = "starting" if s.ready_seconds is None else f"yes (after {s.ready_seconds:.1f} s)"
        print(
            f"running: yes\npid: {s.pid}\nversion: {s.version}\n"
            f"source: {s.source_alias} {s.source_bootstrap}\ntarget: {s.target_alias} {s.target_bootstrap}\n"
            f"topics: {s.topics}\nreplication policy: {s.replication_policy} "
            f"(copies: {s.remote_topic('<topic>')})\n"
            f"replicating: {ready}\ndata dir: {data_dir}"
        )
        return ExitCode.OK
    print(f"running: no\ndata dir: {data_dir}")
    return ExitCode.NOT_RUNNING
