"""What the command modules share: subcommands with actions, the destination flags of `sink` and
`replay`, and `--print-config` before any work."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from olstream.shared.config import Resolved, Setting, add_flags, add_print_config, print_config, resolve

Action = tuple[str, str, tuple[Setting, ...], Callable[[argparse.Namespace], int]]
"""(action name, help, its settings, its main)."""


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
    dest.add_argument("--url", help="receiver base URL (env OPENLINEAGE_URL; yml transport.url)")
    dest.add_argument(
        "--endpoint", help="path after the URL (env OPENLINEAGE_ENDPOINT; default api/v1/lineage)"
    )
    dest.add_argument("--api-key-file", help="file with the bearer API key (env OPENLINEAGE_API_KEY)")
    dest.add_argument("--ca-file", help="extra CA bundle for TLS (verification is always on)")
    dest.add_argument("--file", help="append NDJSON to this file instead (fsynced before each commit)")
    dest.add_argument("--console", action="store_true", default=None, help="one event per line on stdout")


def resolve_unless_printed(
    command: str, settings: Sequence[Setting], args: argparse.Namespace
) -> Resolved | None:
    """The command's settings; None once they were printed for --print-config (nothing else to do)."""
    r = resolve(command, settings, vars(args), os.environ)
    if args.print_config:
        print_config(r)
        return None
    return r
