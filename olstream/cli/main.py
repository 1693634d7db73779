"""The `olstream` command: one subcommand per service, each registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from olstream.shared import deprecated
from olstream.shared.errors import ConfigError, ExitCode
from olstream.shared.extras import extra_of_missing, install_hint
from olstream.shared.logs import redact
from olstream.shared.version import package_version

# Each module defines `register(subparsers) -> None`, adding its subcommand(s) with
# `set_defaults(func=...)`, where func(args) -> int is the subcommand's main().
COMMAND_MODULES = (
    "olstream.cli.kafka",  # olstream kafka up|down|status
    "olstream.cli.mirror",  # olstream mirror up|down|status
    "olstream.cli.postgres",  # olstream postgres up|down|status
    "olstream.cli.log",  # olstream log simulate
    "olstream.cli.source",  # olstream source
    "olstream.cli.worker",  # olstream worker
    "olstream.cli.sink",  # olstream sink
    "olstream.cli.tools",  # olstream demo, graph, marquez (the local tools)
    "olstream.cli.status",  # olstream status
    "olstream.cli.errors",  # olstream errors list|show
    "olstream.cli.replay",  # olstream replay
    "olstream.cli.explain",  # olstream explain RUN
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="olstream", description="Turn a workflow engine's event log into OpenLineage lineage."
    )
    parser.add_argument(
        "--version", action="version", version=f"olstream {package_version()}", help="print the version, exit"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
    return parser


def command_name(args: argparse.Namespace) -> str:
    """`log simulate`, `kafka up`, `worker`: the command and its action, for one-line errors."""
    action = getattr(args, f"{args.command}_command", None)  # kafka_command, log_command, ...
    return f"{args.command} {action}" if action else str(args.command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return ExitCode.CONFIG
    try:
        rc = func(args)
    except ConfigError as e:
        # an invalid setting is one line on stderr and exit 2, never a traceback
        sys.stderr.write(f"olstream {command_name(args)}: {' '.join(redact(str(e)).split())}\n")
        return ExitCode.CONFIG
    except ModuleNotFoundError as e:
        # a module of an extra the command imports directly: the same one line as a MissingExtraError
        if extra_of_missing(e) is None:
            raise
        sys.stderr.write(f"olstream {command_name(args)}: {install_hint(str(e.name))}\n")
        return ExitCode.CONFIG
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    finally:
        deprecated.flush()  # old names used by a command that set up no logging (--print-config, errors)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
