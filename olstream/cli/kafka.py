"""`olstream kafka up|down|status`: a local single-node Kafka broker for development and tests."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from olstream.infra import kafka
from olstream.infra.kafka_config import (
    DEFAULT_KAFKA_VERSION,
    DEFAULT_PORT,
    KafkaSettings,
    default_data_dir,
)
from olstream.shared.errors import OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `kafka up`, `kafka down` and `kafka status`."""
    parser = subparsers.add_parser("kafka", help="run a local single-node Kafka broker (KRaft)")
    actions = parser.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    def add_common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help="broker directory (default $OLSTREAM_KAFKA_DATA_DIR or ~/.local/state/olstream/kafka)",
        )
        p.add_argument("--log-format", choices=("text", "json"), default="text")

    up = actions.add_parser("up", help="start the broker (no-op when it already runs)")
    add_common(up)
    up.add_argument("--port", type=int, default=int(os.environ.get("OLSTREAM_KAFKA_PORT", DEFAULT_PORT)))
    up.add_argument(
        "--controller-port", type=int, default=None, help="KRaft controller port (default port+1)"
    )
    up.add_argument("--version", default=os.environ.get("OLSTREAM_KAFKA_VERSION", DEFAULT_KAFKA_VERSION))
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the broker")
    up.set_defaults(func=run_up)

    down = actions.add_parser("down", help="stop the broker started with the same --data-dir")
    add_common(down)
    down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    down.set_defaults(func=run_down)

    status = actions.add_parser("status", help="say whether the broker runs, its version and address")
    add_common(status)
    status.set_defaults(func=run_status)


def settings_from_args(args: argparse.Namespace) -> KafkaSettings:
    data_dir = (args.data_dir or default_data_dir()).expanduser().resolve()
    return KafkaSettings(
        version=args.version,
        port=args.port,
        controller_port=args.controller_port or args.port + 1,
        data_dir=data_dir,
        start_timeout=args.timeout,
    )


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir or default_data_dir()).expanduser().resolve()


def run_up(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "INFO")
    settings = settings_from_args(args)
    started = time.monotonic()
    try:
        state, fresh = kafka.start_broker(settings)
    except (OlstreamError, ValueError) as e:
        print(f"olstream kafka up: {e}", file=sys.stderr)
        return 1
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
    return 0


def run_down(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "INFO")
    data_dir = _data_dir(args)
    try:
        state = kafka.stop_broker(data_dir, timeout=args.timeout)
    except OlstreamError as e:
        print(f"olstream kafka down: {e}", file=sys.stderr)
        return 1
    if state is None:
        print(f"no Kafka broker running for data dir {data_dir}")
    else:
        print(f"stopped Kafka {state.version} at {state.bootstrap} (pid {state.pid})")
    return 0


def run_status(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, "WARNING")
    data_dir = _data_dir(args)
    try:
        status = kafka.broker_status(data_dir)
    except OlstreamError as e:
        print(f"olstream kafka status: {e}", file=sys.stderr)
        return 1
    if status.running and status.state is not None:
        s = status.state
        print(
            f"running: yes\nversion: {s.version}\naddress: {s.bootstrap}\npid: {s.pid}\ndata dir: {data_dir}"
        )
        return 0
    print(f"running: no\ndata dir: {data_dir}")
    return 3
