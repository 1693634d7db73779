"""The local tools: `olstream demo`, `olstream graph`, `olstream marquez up|down|status` and
`olstream registry up|down|status`.

They use the local launchers (`olstream/devkit/`); the demo's picture and the graph need the extra
`local` (`pip install 'olstream[local]'`), which `olstream/shared/extras.py` names when it is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from olstream.cli.commands import LauncherCommand
from olstream.devkit import marquez, registry
from olstream.devkit.settings import (
    DEMO,
    MARQUEZ_DOWN,
    MARQUEZ_STATUS,
    MARQUEZ_UP,
    REGISTRY_DOWN,
    REGISTRY_STATUS,
    REGISTRY_UP,
    data_dir_of,
    local_postgres,
)
from olstream.shared.config import Resolved, add_flags, add_print_config, help_text, print_config, resolve
from olstream.shared.errors import ExitCode, MissingExtraError, OlstreamError
from olstream.shared.logs import setup_logging


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add this module's subcommands."""
    _register_demo(subparsers)
    _register_graph(subparsers)
    _register_marquez(subparsers)
    _register_registry(subparsers)


def _register_demo(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="simulate a workload and run source, workers and sink end to end",
        description="Starts a local broker unless one is configured, simulates a workload into a SQLite "
        "event log, runs the source, N workers and the sink as separate processes until every finished "
        "run's terminal event is delivered, prints a summary and renders the lineage graph.",
    )
    add_flags(p, DEMO)
    add_print_config(p)
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from olstream.devkit.demo import demo_settings, main

    r = resolve("demo", DEMO, vars(args), os.environ)
    settings = demo_settings(r.values)  # a ConfigError here: one line, exit 2
    if args.print_config:
        print_config(r)
        return ExitCode.OK
    setup_logging(r["log_format"], "WARNING")
    try:
        return main(settings)
    except OlstreamError as e:
        print(f"olstream demo: {e}", file=sys.stderr)
        return ExitCode.FAILED


def _register_graph(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = subparsers.add_parser(
        "graph", help="draw the lineage graph of a file of RunEvents (Graphviz; extra `local`)"
    )
    p.add_argument("events", type=Path, help="newline-delimited JSON RunEvents (the sink's file transport)")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("lineage.svg"),
        help=help_text(".svg, .png or .html", default="lineage.svg"),
    )
    p.add_argument(
        "--title", default=None, help=help_text("title above the graph", default="olstream lineage: EVENTS")
    )
    p.add_argument(
        "--dot",
        action="store_true",
        help=help_text("print the Graphviz DOT source instead of rendering", default="off"),
    )
    p.set_defaults(func=_run_graph)


def _run_graph(args: argparse.Namespace) -> int:
    from olstream.devkit import graph

    setup_logging("text", "WARNING")
    try:
        lineage = graph.build_graph(graph.load_events(args.events))
        title = args.title or f"olstream lineage: {args.events.name}"
        if args.dot:
            sys.stdout.write(graph.to_dot(lineage, title))
            return 0
        graph.render(lineage, args.output, title)
    except MissingExtraError:
        raise  # one line and exit 2 (olstream.cli.main): the extra to install
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


def _register_marquez(subparsers: argparse._SubParsersAction[Any]) -> None:
    MARQUEZ.register(
        subparsers,
        "run a local Marquez API server from its server jar (--jar: Maven Central does not serve Marquez)",
        (
            ("up", "start Marquez (no-op when it runs)", MARQUEZ_UP, _marquez_up),
            ("down", "stop the Marquez of --data-dir", MARQUEZ_DOWN, _marquez_down),
            ("status", "say whether it runs (exit 3 when not)", MARQUEZ_STATUS, _marquez_status),
        ),
    )


MARQUEZ = LauncherCommand("marquez", verbose=("up", "down", "status"))


def _marquez_up(r: Resolved) -> int:
    print(f"Marquez API at {marquez.up(marquez.settings_of(r.values, local_postgres(os.environ)))}")
    return ExitCode.OK


def _marquez_down(r: Resolved) -> int:
    print("stopped" if marquez.down(data_dir_of(r, marquez.default_data_dir())) else "not running")
    return ExitCode.OK


def _marquez_status(r: Resolved) -> int:
    return _say_status(marquez.status(data_dir_of(r, marquez.default_data_dir())))


def _say_status(state: str | None) -> int:
    """What `marquez status` and `registry status` say: what runs, or "not running" and exit 3."""
    print(state or "not running")
    return ExitCode.OK if state else ExitCode.NOT_RUNNING


def _register_registry(subparsers: argparse._SubParsersAction[Any]) -> None:
    REGISTRY.register(
        subparsers,
        "run a local Apicurio Registry, a Confluent-compatible Schema Registry (Maven Central, Java 17; "
        "in-memory)",
        (
            ("up", "start it (no-op when running), print its URL", REGISTRY_UP, _registry_up),
            ("down", "stop the registry of --data-dir", REGISTRY_DOWN, _registry_down),
            ("status", "say whether it runs (exit 3 when not)", REGISTRY_STATUS, _registry_status),
        ),
    )


REGISTRY = LauncherCommand("registry", verbose=("up", "down", "status"))


def _registry_data_dir(r: Resolved) -> Path:
    return data_dir_of(r, registry.default_data_dir())


def _registry_up(r: Resolved) -> int:
    settings = registry.RegistrySettings(
        port=r["port"], data_dir=_registry_data_dir(r), version=r["version"], start_timeout=r["start_timeout"]
    )
    print(registry.up(settings))
    return ExitCode.OK


def _registry_down(r: Resolved) -> int:
    settings = registry.RegistrySettings(data_dir=_registry_data_dir(r), start_timeout=r["stop_timeout"])
    print("stopped" if registry.down(settings) else "not running")
    return ExitCode.OK


def _registry_status(r: Resolved) -> int:
    return _say_status(registry.status(registry.RegistrySettings(data_dir=_registry_data_dir(r))))
