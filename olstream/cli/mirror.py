"""`olstream mirror up|down|status`: a local MirrorMaker 2 replicating topics from one cluster to another."""

from __future__ import annotations

import argparse
import time
from typing import Any

from olstream.cli.commands import LauncherCommand, report_stopped
from olstream.devkit import mirror
from olstream.devkit.mirror_settings import (
    MIRROR_DOWN,
    MIRROR_STATUS,
    MIRROR_UP,
    mirror_data_dir,
    mirror_settings,
)
from olstream.shared.config import Resolved
from olstream.shared.errors import ExitCode, InfrastructureError
from olstream.shared.logs import redact


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `mirror up`, `mirror down` and `mirror status`."""
    MIRROR.register(
        subparsers,
        "run a local MirrorMaker 2 replicating topics from a source cluster to a target cluster "
        "(connect-mirror jars from Maven Central)",
        (
            (
                "up",
                "start MirrorMaker 2 and wait until it replicates (no-op when it runs)",
                MIRROR_UP,
                _up,
            ),
            ("down", "stop the MirrorMaker 2 started with the same --data-dir", MIRROR_DOWN, _down),
            ("status", "say whether MirrorMaker 2 runs, its clusters and topics", MIRROR_STATUS, _status),
        ),
    )


def _shown(e: Exception) -> str:
    return redact(str(e))  # a client setting's secret may be named in the error


MIRROR = LauncherCommand("mirror", verbose=("up",), failures=(InfrastructureError,), shown=_shown)


def _flow(state: mirror.MirrorState) -> str:
    return (
        f"{state.source_alias} ({state.source_bootstrap}) -> {state.target_alias} ({state.target_bootstrap})"
    )


def _up(r: Resolved) -> int:
    settings = mirror_settings(r)  # a ConfigError: one line, exit 2
    started = time.monotonic()
    state, fresh = mirror.ensure_mirror(settings)
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


def _down(r: Resolved) -> int:
    data_dir = mirror_data_dir(r)
    state = mirror.stop_mirror(data_dir, timeout=r["stop_timeout"])
    stopped = [] if state is None else [f"stopped MirrorMaker 2 {_flow(state)} (pid {state.pid})"]
    return report_stopped("MirrorMaker 2", data_dir, stopped)


def _status(r: Resolved) -> int:
    data_dir = mirror_data_dir(r)
    status = mirror.mirror_status(data_dir)
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
