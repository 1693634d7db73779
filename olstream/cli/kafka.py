"""`olstream kafka up|down|status`: a local single-node Kafka broker for development and tests."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from olstream.cli.commands import add_actions, resolve_unless_printed
from olstream.infra import kafka
from olstream.infra.kafka_config import KafkaSettings, default_data_dir
from olstream.infra.settings import KAFKA_DOWN, KAFKA_STATUS, KAFKA_UP, data_dir_of
from olstream.shared.config import Resolved, Setting
from olstream.shared.errors import ExitCode, OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `kafka up`, `kafka down` and `kafka status`."""
    add_actions(
        subparsers,
        "kafka",
        "run a local single-node Kafka broker (KRaft)",
        (
            ("up", "start the broker (no-op when it already runs)", KAFKA_UP, run_up),
            ("down", "stop the broker started with the same --data-dir", KAFKA_DOWN, run_down),
            ("status", "say whether the broker runs, its version and address", KAFKA_STATUS, run_status),
        ),
    )


def _resolve(args: argparse.Namespace, settings: tuple[Setting, ...]) -> Resolved | None:
    """The resolved settings, or None after printing them for --print-config."""
    r = resolve_unless_printed("kafka", settings, args)
    if r is not None:
        setup_logging(r["log_format"], "INFO" if args.kafka_command == "up" else "WARNING")
    return r


def _broker_settings(r: Resolved) -> KafkaSettings:
    return KafkaSettings(
        version=r["version"],
        port=r["port"],
        controller_port=r["controller_port"] or r["port"] + 1,
        data_dir=data_dir_of(r, default_data_dir()),
        start_timeout=r["start_timeout"],
    )


def run_up(args: argparse.Namespace) -> int:
    r = _resolve(args, KAFKA_UP)
    if r is None:
        return ExitCode.OK
    settings = _broker_settings(r)
    started = time.monotonic()
    try:
        state, fresh = kafka.start_broker(settings)
    except (OlstreamError, ValueError) as e:
        print(f"olstream kafka up: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if fresh:
        print(
            f"Kafka {state.version} started in {time.monotonic() - started:.1f} s "
            f"(pid {state.pid}, data dir {state.data_dir})",
            file=sys.stderr,
        )
    else:
        print(
            f"Kafka {state.version} is already running at {state.bootstrap} "
            f"(pid {state.pid}, data dir {state.data_dir})",
            file=sys.stderr,
        )
    print(state.bootstrap)
    return ExitCode.OK


def run_down(args: argparse.Namespace) -> int:
    r = _resolve(args, KAFKA_DOWN)
    if r is None:
        return ExitCode.OK
    data_dir = data_dir_of(r, default_data_dir())
    try:
        state = kafka.stop_broker(data_dir, timeout=r["stop_timeout"])
    except OlstreamError as e:
        print(f"olstream kafka down: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if state is None:
        print(f"no Kafka broker running for data dir {data_dir}")
    else:
        print(f"stopped Kafka {state.version} at {state.bootstrap} (pid {state.pid})")
    return ExitCode.OK


def run_status(args: argparse.Namespace) -> int:
    r = _resolve(args, KAFKA_STATUS)
    if r is None:
        return ExitCode.OK
    data_dir = data_dir_of(r, default_data_dir())
    try:
        status = kafka.broker_status(data_dir)
    except OlstreamError as e:
        print(f"olstream kafka status: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if status.running and status.state is not None:
        s = status.state
        print(
            f"running: yes\nversion: {s.version}\naddress: {s.bootstrap}\npid: {s.pid}\ndata dir: {data_dir}"
        )
        return ExitCode.OK
    print(f"running: no\ndata dir: {data_dir}")
    return ExitCode.NOT_RUNNING
