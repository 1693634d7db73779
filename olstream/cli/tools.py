"""`olstream demo`, `olstream graph`, `olstream status` and `olstream marquez up|down|status`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from olstream.shared.errors import OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add this module's subcommands."""
    _register_demo(subparsers)
    _register_graph(subparsers)
    _register_status(subparsers)
    _register_marquez(subparsers)


def _register_demo(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="simulate a workload and run source, workers and sink end to end",
        description="Starts a local broker unless one is configured, simulates a workload into a SQLite "
        "event log, runs the source, N workers and the sink as separate processes until every finished "
        "run's terminal event is delivered, prints a summary and renders the lineage graph.",
    )
    p.add_argument("--runs", type=int, default=500, help="workflow runs to simulate (default 500)")
    p.add_argument("--workers", type=int, default=2, help="stream worker processes (default 2)")
    p.add_argument(
        "--out", type=Path, default=Path("lineage.jsonl"), help="events file (sink file transport)"
    )
    p.add_argument("--graph", type=Path, default=None, help="picture to render (default: --out with .svg)")
    p.add_argument("--url", default=None, help="post the events to this OpenLineage receiver instead")
    p.add_argument("--marquez", action="store_true", help="send to a local Marquez (`olstream marquez up`)")
    p.add_argument(
        "--bootstrap",
        default=os.environ.get("OLSTREAM_BOOTSTRAP"),
        help="Kafka bootstrap servers (default $OLSTREAM_BOOTSTRAP; absent: start a local broker)",
    )
    p.add_argument("--partitions", type=int, default=6, help="partitions of the demo topics (default 6)")
    p.add_argument("--seed", type=int, default=None, help="simulator seed")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs of every process)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from olstream.infra.demo import main, settings_from_args

    setup_logging(args.log_format, "WARNING")
    try:
        return main(settings_from_args(args))
    except OlstreamError as e:
        print(f"olstream demo: {e}", file=sys.stderr)
        return 1


def _register_graph(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser("graph", help="draw the lineage graph of a file of RunEvents")
    p.add_argument("events", type=Path, help="newline-delimited JSON RunEvents (the sink's file transport)")
    p.add_argument("-o", "--output", type=Path, default=Path("lineage.svg"), help=".svg, .png or .html")
    p.add_argument("--title", default=None, help="title above the graph")
    p.add_argument("--dot", action="store_true", help="print the Graphviz DOT source instead of rendering")
    p.set_defaults(func=_run_graph)


def _run_graph(args: argparse.Namespace) -> int:
    from olstream.infra import graph

    setup_logging("text", "WARNING")
    try:
        lineage = graph.build_graph(graph.load_events(args.events))
        title = args.title or f"olstream lineage: {args.events.name}"
        if args.dot:
            sys.stdout.write(graph.to_dot(lineage, title))
            return 0
        graph.render(lineage, args.output, title)
    except OlstreamError as e:
        print(f"olstream graph: {e}", file=sys.stderr)
        return 1
    s = lineage.summary()
    print(
        f"wrote {args.output}: {s['jobs']} jobs, {s['datasets']} datasets, "
        f"{s['dataset_edges']} dataset edges, "
        f"{s['parent_edges']} parent edges, {s['failed_jobs']} jobs with failed runs"
    )
    return 0


def _register_status(subparsers: argparse._SubParsersAction[Any]) -> None:
    from olstream.infra.status import PIPELINE_TOPICS

    p = subparsers.add_parser("status", help="end offsets of the pipeline's topics and consumer group lag")
    p.add_argument("--bootstrap", default=os.environ.get("OLSTREAM_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument(
        "--topic",
        action="append",
        default=None,
        help=f"topic to show (repeatable; default: {', '.join(PIPELINE_TOPICS)})",
    )
    p.add_argument("--timeout", type=float, default=10.0)
    p.set_defaults(func=_run_status)


def _run_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from olstream.infra import status

    setup_logging("text", "WARNING")
    try:
        current = status.collect(args.bootstrap, tuple(args.topic or status.PIPELINE_TOPICS), args.timeout)
    except OlstreamError as e:
        print(f"olstream status: {e}", file=sys.stderr)
        return 2
    console = Console()
    for table in status.render_tables(current, args.bootstrap):
        console.print(table)
    return 0


def _register_marquez(subparsers: argparse._SubParsersAction[Any]) -> None:
    from olstream.infra.marquez import DEFAULT_MARQUEZ_VERSION, DEFAULT_PORT

    parser = subparsers.add_parser("marquez", help="run a local Marquez API server (from Maven Central)")
    actions = parser.add_subparsers(dest="marquez_command", metavar="ACTION", required=True)
    for name, helptext in (
        ("up", "start Marquez (no-op when it runs)"),
        ("down", "stop the Marquez of --data-dir"),
        ("status", "say whether it runs"),
    ):
        p = actions.add_parser(name, help=helptext)
        p.add_argument("--data-dir", type=Path, default=None, help="default ~/.local/state/olstream/marquez")
        p.add_argument("--port", type=int, default=int(os.environ.get("OLSTREAM_MARQUEZ_PORT", DEFAULT_PORT)))
        p.add_argument("--admin-port", type=int, default=None, help="default port+1")
        p.add_argument(
            "--version", default=os.environ.get("OLSTREAM_MARQUEZ_VERSION", DEFAULT_MARQUEZ_VERSION)
        )
        p.add_argument(
            "--pg-url",
            default=os.environ.get("OLSTREAM_MARQUEZ_PG_URL"),
            help="superuser URL of the PostgreSQL server Marquez keeps its database on "
            "(default $OLSTREAM_MARQUEZ_PG_URL, else the local `olstream postgres` server)",
        )
        p.add_argument("--log-format", choices=("text", "json"), default="text")
        p.set_defaults(func=_run_marquez, marquez_action=name)


def _run_marquez(args: argparse.Namespace) -> int:
    from olstream.infra import marquez

    setup_logging(args.log_format, "INFO")
    try:
        settings = marquez.settings_from_args(args)
        if args.marquez_action == "up":
            print(f"Marquez API at {marquez.up(settings)}")
        elif args.marquez_action == "down":
            print("stopped" if marquez.down(settings) else "not running")
        else:
            print(marquez.status(settings))
    except OlstreamError as e:
        print(f"olstream marquez {args.marquez_action}: {e}", file=sys.stderr)
        return 2
    return 0
