"""The local tools: `olstream demo`, `olstream graph`, `olstream marquez up|down|status` and
`olstream registry up|down|status`.

They use the local launchers (`olstream/infra/`); the demo's picture and the graph need the extra
`local` (`pip install 'olstream[local]'`), which `olstream/shared/extras.py` names when it is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from olstream.cli.commands import add_actions, resolve_unless_printed
from olstream.infra.settings import DEMO, MARQUEZ, REGISTRY, data_dir_of, local_postgres
from olstream.shared.config import add_flags, add_print_config, print_config, resolve
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
    from olstream.infra.demo import demo_settings, main

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
    add_actions(
        subparsers,
        "marquez",
        "run a local Marquez API server from its server jar (--jar: Maven Central does not serve Marquez)",
        (
            ("up", "start Marquez (no-op when it runs)", MARQUEZ, _run_marquez),
            ("down", "stop the Marquez of --data-dir", MARQUEZ, _run_marquez),
            ("status", "say whether it runs", MARQUEZ, _run_marquez),
        ),
    )


def _run_marquez(args: argparse.Namespace) -> int:
    from olstream.infra import marquez

    r = resolve_unless_printed("marquez", MARQUEZ, args)
    if r is None:
        return ExitCode.OK
    setup_logging(r["log_format"], "INFO")
    try:
        settings = marquez.settings_of(r.values, args.marquez_command, local_postgres(os.environ))
        if args.marquez_command == "up":
            print(f"Marquez API at {marquez.up(settings)}")
        elif args.marquez_command == "down":
            print("stopped" if marquez.down(settings) else "not running")
        else:
            print(marquez.status(settings))
    except OlstreamError as e:
        print(f"olstream marquez {args.marquez_command}: {e}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


def _register_registry(subparsers: argparse._SubParsersAction[Any]) -> None:
    add_actions(
        subparsers,
        "registry",
        "run a local Apicurio Registry, a Confluent-compatible Schema Registry (Maven Central, Java 17; "
        "in-memory)",
        (
            ("up", "start it (no-op when running), print its URL", REGISTRY, _run_registry),
            ("down", "stop the registry of --data-dir", REGISTRY, _run_registry),
            ("status", "say whether it runs (exit 3 when not)", REGISTRY, _run_registry),
        ),
    )


def _run_registry(args: argparse.Namespace) -> int:
    from olstream.infra import registry

    r = resolve_unless_printed("registry", REGISTRY, args)
    if r is None:
        return ExitCode.OK
    setup_logging(r["log_format"], "INFO")
    settings = registry.RegistrySettings(
        port=r["port"],
        data_dir=data_dir_of(r, registry.default_data_dir()),
        version=r["version"],
        start_timeout=r["timeout"],
    )
    try:
        if args.registry_command == "up":
            print(registry.up(settings))
        elif args.registry_command == "down":
            print("stopped" if registry.down(settings) else "not running")
        else:
            state = registry.status(settings)
            print(state or "not running")
            return ExitCode.OK if state else ExitCode.NOT_RUNNING
    except OlstreamError as e:
        print(f"olstream registry {args.registry_command}: {e}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK
