"""What the command modules share: subcommands with actions, the destination flags of `sink` and
`replay`, the frame of the local launchers' actions, and `--print-config` before any work."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from olstream.shared.config import (
    Resolved,
    Setting,
    add_flags,
    add_print_config,
    help_text,
    print_config,
    resolve,
)
from olstream.shared.errors import ExitCode, OlstreamError
from olstream.shared.logs import setup_logging

Action = tuple[str, str, tuple[Setting, ...], Callable[[argparse.Namespace], int]]
"""(action name, help, its settings, its main)."""
LauncherAction = tuple[str, str, tuple[Setting, ...], Callable[[Resolved], int]]
"""(action name, help, its settings, what it does with them): an action of a local launcher."""


def add_actions(
    subparsers: argparse._SubParsersAction[Any], command: str, helptext: str, actions: Sequence[Action]
) -> None:
    """`olstream COMMAND ACTION`: one parser per action, with its settings' flags and --print-config.

    The action's name is `args.<command>_command` (what `olstream.cli.main` names in errors).
    """
    parser = subparsers.add_parser(command, help=helptext)
    choices = parser.add_subparsers(dest=f"{command}_command", metavar="ACTION", required=True)
    for name, action_help, settings, func in actions:
        p = choices.add_parser(name, help=action_help)
        add_flags(p, settings)
        add_print_config(p)
        p.set_defaults(func=func)


def add_destination_flags(parser: argparse.ArgumentParser, title: str) -> None:
    """Where events go, in OpenLineage's terms: `olstream sink` and `olstream replay` share these flags."""
    dest = parser.add_argument_group(title)
    yml = "none: the transport of openlineage.yml"
    dest.add_argument(
        "--url", help=help_text("receiver base URL (yml transport.url)", "OPENLINEAGE_URL", yml)
    )
    dest.add_argument(
        "--endpoint",
        help=help_text(
            "path after the URL (yml transport.endpoint)", "OPENLINEAGE_ENDPOINT", "api/v1/lineage"
        ),
    )
    dest.add_argument(
        "--api-key-file",
        help=help_text("file with the bearer API key (yml transport.auth.apiKey)", "OPENLINEAGE_API_KEY"),
    )
    dest.add_argument(
        "--ca-file",
        help=help_text("extra CA bundle for TLS (verification is always on)", default="the system CAs"),
    )
    dest.add_argument(
        "--file",
        help=help_text("append NDJSON to this file instead (fsynced before each commit)", default=yml),
    )
    dest.add_argument(
        "--console",
        action="store_true",
        default=None,
        help=help_text("one event per line on stdout", default="off"),
    )


@dataclass(frozen=True)
class LauncherCommand:
    """What `olstream kafka|postgres|mirror|marquez|registry up|down|status` share around each action:
    its own settings (each action declares only those it reads) resolved (or printed for
    --print-config), logging at INFO for the `verbose` actions (warnings only for the others), and a
    failure to start, stop or read the local server (`failures`) as one line on stderr, exit 1."""

    command: str
    verbose: tuple[str, ...]
    failures: tuple[type[Exception], ...] = (OlstreamError,)
    shown: Callable[[Exception], str] = str

    def register(
        self, subparsers: argparse._SubParsersAction[Any], helptext: str, actions: Sequence[LauncherAction]
    ) -> None:
        """`olstream COMMAND ACTION` for each (action name, help, its settings, what it does)."""
        add_actions(
            subparsers,
            self.command,
            helptext,
            [(name, text, s, partial(self.run, settings=s, action=act)) for name, text, s, act in actions],
        )

    def run(
        self, args: argparse.Namespace, settings: Sequence[Setting], action: Callable[[Resolved], int]
    ) -> int:
        """`action` with the resolved settings; its exit code."""
        r = resolve_unless_printed(self.command, settings, args)
        if r is None:
            return ExitCode.OK
        name = getattr(args, f"{self.command}_command")
        setup_logging(r["log_format"], "INFO" if name in self.verbose else "WARNING")
        try:
            return action(r)
        except self.failures as e:
            print(f"olstream {self.command} {name}: {self.shown(e)}", file=sys.stderr)
            return ExitCode.FAILED


def report_stopped(what: str, data_dir: Path, stopped: Sequence[str]) -> int:
    """What `down` says: a line per server it stopped, or that none ran for the data dir."""
    if not stopped:
        print(f"no {what} running for data dir {data_dir}")
    for line in stopped:
        print(line)
    return ExitCode.OK


def resolve_unless_printed(
    command: str, settings: Sequence[Setting], args: argparse.Namespace
) -> Resolved | None:
    """The command's settings; None once they were printed for --print-config (nothing else to do)."""
    r = resolve(command, settings, vars(args), os.environ)
    if args.print_config:
        print_config(r)
        return None
    return r
