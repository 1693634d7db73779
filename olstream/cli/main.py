"""The `olstream` command: one subcommand per service, each registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines `register(subparsers) -> None`, adding its subcommand(s) with
# `set_defaults(func=...)`, where func(args) -> int is the subcommand's main().
COMMAND_MODULES = (
    "olstream.cli.kafka",  # olstream kafka up|down|status
    "olstream.cli.postgres",  # olstream postgres up|down|status
    "olstream.cli.log",  # olstream log simulate
    "olstream.cli.source",  # olstream source
    "olstream.cli.worker",  # olstream worker
    "olstream.cli.sink",  # olstream sink
    "olstream.cli.tools",  # olstream demo, graph, status, marquez
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="olstream", description="Turn a workflow engine's event log into OpenLineage lineage."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        rc = func(args)
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
